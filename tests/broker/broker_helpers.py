"""An in-process BrokerController on a tiny real store, for processor tests that call handlers directly
(started with ``listen=False``: no socket is opened)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

from reference_broker.broker.broker_config import BrokerConfig
from reference_broker.broker.controller import BrokerController
from reference_broker.common.message import properties_to_bytes
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import RemotingCommand, create_request
from reference_broker.remoting.headers import send_v1_to_v2
from reference_broker.store.config import MessageStoreConfig


class FakeConn:
    """What a handler sees of a connection; records what the broker pushes to it."""

    def __init__(self, peer: str = "127.0.0.1:40000") -> None:
        self.peer = peer
        self.attributes: dict[str, Any] = {}
        self.sent: list[RemotingCommand] = []
        self.closed = False

    async def send(self, cmd: RemotingCommand) -> None:
        self.sent.append(cmd)

    def close(self) -> None:
        self.closed = True


# The port that processor tests' brokers put into offsetMsgIds; nothing listens on it (start(listen=False)).
UNUSED_PORT = 10911


def make_controller(root: Path, port: int = UNUSED_PORT, **store: Any) -> BrokerController:
    """An initialized controller on a tiny store under ``root``; start it with ``start(listen=False)`` for
    processor tests (no socket), or give it a free ``port`` and ``start()`` it to serve real connections."""
    bc = BrokerConfig(broker_name="broker-t", listen_port=port, namesrv_addr=None)
    values: dict[str, Any] = {"store_path_root_dir": root, "mapped_file_size_commit_log": 64 * 1024,
                              "mapped_file_size_consume_queue": 20 * 64, "max_hash_slot_num": 100,
                              "max_index_num": 400,
                              "ha_listen_port": port + 1}  # a listening master's HA port, as BrokerStartup's
    values.update(store)
    controller = BrokerController(bc, MessageStoreConfig(**values), host="127.0.0.1")
    controller.initialize()
    controller.store.clean_initial_delay_s = 3600.0
    controller.store.disk_check_interval_s = 3600.0
    return controller


def send_request(topic: str, body: bytes, queue_id: int = 0, props: dict[str, str] | None = None,
                 v2: bool = True, **extra: str) -> RemotingCommand:
    fields = {"producerGroup": "pg", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
              "queueId": str(queue_id), "sysFlag": "0", "bornTimestamp": str(time.time_ns() // 1_000_000),
              "flag": "0", "properties": properties_to_bytes(props or {}).decode(), "reconsumeTimes": "0",
              "unitMode": "false", "batch": "false", **extra}
    if v2:
        return create_request(RequestCode.SEND_MESSAGE_V2, send_v1_to_v2(fields), body)
    return create_request(RequestCode.SEND_MESSAGE, fields, body)


def pull_request(topic: str, queue_id: int, offset: int, group: str = "cg", sub: str = "*", sys_flag: int = 6,
                 suspend_ms: int = 0, max_nums: int = 32, commit_offset: int = 0) -> RemotingCommand:
    return create_request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": group, "topic": topic, "queueId": str(queue_id), "queueOffset": str(offset),
        "maxMsgNums": str(max_nums), "sysFlag": str(sys_flag), "commitOffset": str(commit_offset),
        "suspendTimeoutMillis": str(suspend_ms), "subscription": sub, "subVersion": "0", "expressionType": "TAG"})


async def wait_dispatched(controller: BrokerController, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while controller.store.dispatch_behind_bytes() > 0:
        if time.monotonic() > deadline:
            raise TimeoutError("dispatch did not catch up")
        await asyncio.sleep(0.005)


def held_pull_answered(c: RemotingClient, topic: str, offset: int, body: bytes) -> tuple[RemotingCommand, float]:
    """Hold a pull on ``topic``'s queue 0 at ``offset`` (nothing there yet), send ``body``: the pull's answer, and
    the seconds from the send to it."""
    got: dict[str, RemotingCommand] = {}

    def held() -> None:
        got["resp"] = c.invoke(pull_request(topic, 0, offset, suspend_ms=30_000), timeout_s=40)

    th = threading.Thread(target=held)
    th.start()
    time.sleep(0.3)
    assert th.is_alive()  # held: nothing to pull yet
    t_send = time.monotonic()
    assert c.invoke(send_request(topic, body)).code == ResponseCode.SUCCESS
    th.join(40)
    return got["resp"], time.monotonic() - t_send
