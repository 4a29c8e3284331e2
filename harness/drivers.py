"""Driver names (``--driver``) and the factory the scenarios and the load processes share.

==================  ==========================================================================================
name                client -> broker
==================  ==========================================================================================
rocketmq            this project's client (``harness.driver.RocketMQDriver``) -> a name server (the default)
cpp                 Apache RocketMQ's C++ client as producer (``harness.cpp_driver``) -> a name server
nats                NATS JetStream (``harness.peer_drivers``)
rabbitmq-classic    RabbitMQ, durable classic queues, publisher confirms
rabbitmq-quorum     RabbitMQ, quorum queues, publisher confirms
==================  ==========================================================================================

For the RocketMQ drivers the address is a name-server list; for a peer it is the server's URL (``nats://`` or
``amqp://``), which the embedded peer server (``harness.peers``) gives.

A peer's send path is ``peer_client`` (``PEER_CLIENTS``): ``lean`` (the default) speaks the wire protocol
itself (``harness.nats_lean``, ``harness.amqp_lean``: tens of µs of client CPU per message, as this project's
RocketMQ client), ``library`` goes through nats-py / pika (~150-190 µs per message, which bounded the compare
figures: BENCHMARKS.md). For NATS the consumer follows it (``lean``: ``harness.nats_lean_consumer``, a JetStream
pull consumer written directly; ``library``: nats-py's); RabbitMQ's consumer, and topic creation and backlog
queries everywhere, use the library either way.

The ``rocketmq`` driver's send path is ``rocketmq_client`` (``ROCKETMQ_CLIENTS``), a separate choice because its
default differs by caller: ``library`` (this project's client, ``reference_broker.client``: ~40 µs per message,
retries, the faithful client; the scenarios' default, where client behaviour is part of what is tested) or
``lean`` (``harness.rocketmq_lean``: SEND_MESSAGE_V2 frames written directly; ``python -m harness compare``'s
default, so the brokers are compared rather than the clients). Recorded in meta.json as ``rocketmq_client``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Literal

from harness.driver import Driver, RocketMQDriver
from harness.peers import PeerKind

if TYPE_CHECKING:
    from harness.peer_drivers import QueueType

ROCKETMQ_DRIVERS: Final = ("rocketmq", "cpp")
PEER_DRIVERS: Final = ("nats", "rabbitmq-classic", "rabbitmq-quorum")
DRIVER_NAMES: Final = ROCKETMQ_DRIVERS + PEER_DRIVERS
PeerClient = Literal["lean", "library"]
PEER_CLIENTS: Final[tuple[PeerClient, ...]] = ("lean", "library")
DEFAULT_PEER_CLIENT: Final[PeerClient] = "lean"
RocketMQClient = Literal["lean", "library"]
ROCKETMQ_CLIENTS: Final[tuple[RocketMQClient, ...]] = ("lean", "library")
DEFAULT_ROCKETMQ_CLIENT: Final[RocketMQClient] = "library"  # the compare command's default is lean


def is_peer(name: str) -> bool:
    return name in PEER_DRIVERS


def server_kind(name: str) -> PeerKind:
    """The peer server a peer driver needs."""
    if not is_peer(name):
        raise ValueError(f"{name!r} is not a peer driver")
    return "nats" if name == "nats" else "rabbitmq"


def make_driver(name: str, address: str, *, instance: str, producer_group: str = "lab_producer",
                send_timeout_s: float = 3.0, peer_client: PeerClient = DEFAULT_PEER_CLIENT,
                rocketmq_client: RocketMQClient = DEFAULT_ROCKETMQ_CLIENT) -> Driver:
    """``peer_client`` picks a peer's send path (ignored for the RocketMQ drivers), ``rocketmq_client`` the
    ``rocketmq`` driver's (ignored for the others)."""
    if peer_client not in PEER_CLIENTS:
        raise ValueError(f"unknown peer client {peer_client!r}: one of {', '.join(PEER_CLIENTS)}")
    if rocketmq_client not in ROCKETMQ_CLIENTS:
        raise ValueError(f"unknown rocketmq client {rocketmq_client!r}: one of {', '.join(ROCKETMQ_CLIENTS)}")
    if name == "rocketmq" and rocketmq_client == "lean":
        from harness.rocketmq_lean import LeanRocketMQDriver

        return LeanRocketMQDriver(address, instance=instance, producer_group=producer_group,
                                  send_timeout_s=send_timeout_s)
    if name == "rocketmq":
        return RocketMQDriver(address, instance=instance, producer_group=producer_group,
                              send_timeout_s=send_timeout_s)
    if name == "cpp":
        from harness.cpp_driver import CppDriver

        return CppDriver(address, instance=instance, producer_group=producer_group, send_timeout_s=send_timeout_s)
    if name == "nats":
        if peer_client == "lean":
            from harness.nats_lean import LeanNatsDriver

            return LeanNatsDriver(address, send_timeout_s=send_timeout_s)
        from harness.peer_drivers import NatsDriver

        return NatsDriver(address, send_timeout_s=send_timeout_s)
    if name in ("rabbitmq-classic", "rabbitmq-quorum"):
        queue_type: QueueType = "classic" if name.endswith("classic") else "quorum"
        if peer_client == "lean":
            from harness.amqp_lean import LeanRabbitMQDriver

            return LeanRabbitMQDriver(address, queue_type=queue_type, send_timeout_s=send_timeout_s)
        from harness.peer_drivers import RabbitMQDriver

        return RabbitMQDriver(address, queue_type=queue_type, send_timeout_s=send_timeout_s)
    raise ValueError(f"unknown driver {name!r}: one of {', '.join(DRIVER_NAMES)}")
