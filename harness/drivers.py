"""Driver names (``--driver``) and the factory the scenarios and the load processes share.

==================  ==========================================================================================
name                client -> broker
==================  ==========================================================================================
rocketmq            this project's client (``harness.driver.RocketMQDriver``) -> a name server (the default)
cpp                 Apache RocketMQ's C++ client as producer (``harness.cpp_driver``) -> a name server
nats                nats-py -> NATS JetStream (``harness.peer_drivers``)
rabbitmq-classic    pika -> RabbitMQ, durable classic queues, publisher confirms
rabbitmq-quorum     pika -> RabbitMQ, quorum queues, publisher confirms
==================  ==========================================================================================

For the RocketMQ drivers the address is a name-server list; for a peer it is the server's URL (``nats://`` or
``amqp://``), which the embedded peer server (``harness.peers``) gives.
"""

from __future__ import annotations

from typing import Final

from harness.driver import Driver, RocketMQDriver
from harness.peers import PeerKind

ROCKETMQ_DRIVERS: Final = ("rocketmq", "cpp")
PEER_DRIVERS: Final = ("nats", "rabbitmq-classic", "rabbitmq-quorum")
DRIVER_NAMES: Final = ROCKETMQ_DRIVERS + PEER_DRIVERS


def is_peer(name: str) -> bool:
    return name in PEER_DRIVERS


def server_kind(name: str) -> PeerKind:
    """The peer server a peer driver needs."""
    if not is_peer(name):
        raise ValueError(f"{name!r} is not a peer driver")
    return "nats" if name == "nats" else "rabbitmq"


def make_driver(name: str, address: str, *, instance: str, producer_group: str = "lab_producer",
                send_timeout_s: float = 3.0) -> Driver:
    if name == "rocketmq":
        return RocketMQDriver(address, instance=instance, producer_group=producer_group,
                              send_timeout_s=send_timeout_s)
    if name == "cpp":
        from harness.cpp_driver import CppDriver

        return CppDriver(address, instance=instance, producer_group=producer_group, send_timeout_s=send_timeout_s)
    if name == "nats":
        from harness.peer_drivers import NatsDriver

        return NatsDriver(address, send_timeout_s=send_timeout_s)
    if name in ("rabbitmq-classic", "rabbitmq-quorum"):
        from harness.peer_drivers import RabbitMQDriver

        return RabbitMQDriver(address, queue_type="classic" if name.endswith("classic") else "quorum",
                              send_timeout_s=send_timeout_s)
    raise ValueError(f"unknown driver {name!r}: one of {', '.join(DRIVER_NAMES)}")
