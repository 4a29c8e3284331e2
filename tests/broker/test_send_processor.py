"""SendMessageProcessor built from exactly what it uses (no controller), against a store whose puts the
test completes: the answer is immediate when the store's pending put is done, else awaited — the same code
for every flush mode, for single sends and batches alike."""

from __future__ import annotations

import asyncio
import inspect
import threading
from pathlib import Path
from typing import Any

import pytest

from reference_broker.broker.broker_config import BrokerConfig
from reference_broker.broker.send_processor import SendMessageProcessor
from reference_broker.broker.subscription_group import SubscriptionGroupManager
from reference_broker.broker.topic_config import PERM_READ, PERM_WRITE, TopicConfig, TopicConfigManager
from reference_broker.common.message_batch import BatchEntry, encode_batch
from reference_broker.remoting.codec import FrameDecoder
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import RemotingCommand, create_request
from reference_broker.store.config import MessageStoreConfig
from reference_broker.store.durability import PendingPut, submit_all
from reference_broker.store.flush import GroupCommitRequest
from reference_broker.store.status import AppendMessageResult, AppendMessageStatus, PutMessageResult, PutMessageStatus
from tests.broker.broker_helpers import FakeConn, send_request
from tests.compiled_paths import put_path  # noqa: F401 - the fixture, used by pytestmark

pytestmark = pytest.mark.usefixtures("put_path")  # pure and compiled (tests/compiled_paths.py)


class Waits:
    """A durability condition the test completes by hand (or not at all: ``wait=False``)."""

    name = "flush"

    def __init__(self, wait: bool) -> None:
        self.wait = wait
        self.requests: list[GroupCommitRequest] = []

    def submit(self, append: AppendMessageResult, wait_store_ok: bool) -> GroupCommitRequest | None:
        if not self.wait:
            return None
        req = GroupCommitRequest(append.wrote_offset + append.wrote_bytes, 60_000)
        self.requests.append(req)
        return req


class FakeStore:
    def __init__(self, wait: bool) -> None:
        self.config = MessageStoreConfig()
        self.condition = Waits(wait)
        self.puts: list[Any] = []

    def is_os_page_cache_busy(self) -> bool:
        return False

    def _pending(self, what: Any, msg_id: str) -> PendingPut:
        self.puts.append(what)
        append = AppendMessageResult(AppendMessageStatus.PUT_OK, 0, 100, msg_id, logics_offset=len(self.puts) - 1)
        return submit_all([self.condition], PutMessageResult(PutMessageStatus.PUT_OK, append), True)

    def put(self, msg: Any) -> PendingPut:
        return self._pending(msg, "AA")

    def put_batch(self, batch: Any) -> PendingPut:
        return self._pending(batch, "BB")


def processor(tmp_path: Path, store: FakeStore, pending: int = 0) -> SendMessageProcessor:
    bc = BrokerConfig(broker_name="b", listen_port=10911, namesrv_addr=None)
    topics = TopicConfigManager(tmp_path, bc)
    topics.topic_config_table["T"] = TopicConfig("T", 4, 4, PERM_READ | PERM_WRITE)  # exists: nothing to persist
    return SendMessageProcessor(store, topics, SubscriptionGroupManager(tmp_path, bc),  # type: ignore[arg-type]
                                bc, lambda: pending)


def decoded(reply: RemotingCommand | bytes) -> RemotingCommand:
    if isinstance(reply, RemotingCommand):
        return reply
    decoder = FrameDecoder()
    decoder.feed(reply)
    cmd = decoder.next_frame()
    assert cmd is not None
    return cmd


def batch_request() -> RemotingCommand:
    body = encode_batch([BatchEntry(0, b"a", {}), BatchEntry(0, b"b", {})])
    req = send_request("T", body)
    req.code = RequestCode.SEND_BATCH_MESSAGE
    return req


def test_a_put_done_at_once_is_answered_at_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        sp = processor(tmp_path, FakeStore(wait=False))
        for req in (send_request("T", b"x"), batch_request()):
            reply = sp.handle(FakeConn(), req)
            assert not inspect.isawaitable(reply)
            assert decoded(reply).code == ResponseCode.SUCCESS  # type: ignore[arg-type]

    asyncio.run(scenario())


def test_a_pending_put_is_answered_when_another_thread_completes_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = FakeStore(wait=True)
        sp = processor(tmp_path, store)
        single = sp.handle(FakeConn(), send_request("T", b"x"))
        batch = sp.handle(FakeConn(), batch_request())
        assert inspect.isawaitable(single) and inspect.isawaitable(batch)
        ok, late = store.condition.requests
        threading.Thread(target=ok.complete, args=(PutMessageStatus.PUT_OK,)).start()
        threading.Thread(target=late.complete, args=(PutMessageStatus.FLUSH_DISK_TIMEOUT,)).start()
        first = decoded(await asyncio.wait_for(single, 5))  # type: ignore[arg-type]
        second = decoded(await asyncio.wait_for(batch, 5))  # type: ignore[arg-type]
        assert first.code == ResponseCode.SUCCESS
        assert second.code == ResponseCode.FLUSH_DISK_TIMEOUT  # stored: the answer still names the message
        assert second.ext_fields["msgId"] == "BB"

    asyncio.run(scenario())


def test_the_fast_failure_remark_counts_the_servers_pending_requests(tmp_path: Path) -> None:
    async def scenario() -> None:
        sp = processor(tmp_path, FakeStore(wait=False), pending=7)
        req = send_request("T", b"x")
        req.received_at = asyncio.get_running_loop().time() - 1.0  # queued for a second
        resp = decoded(sp.handle(FakeConn(), req))  # type: ignore[arg-type]
        assert resp.code == ResponseCode.SYSTEM_BUSY
        assert resp.remark is not None and resp.remark.endswith("size of queue: 7")

    asyncio.run(scenario())


def test_a_refused_request_never_reaches_the_store(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = FakeStore(wait=True)
        sp = processor(tmp_path, store)
        missing_queue = create_request(RequestCode.SEND_MESSAGE, {"topic": "T"}, b"x")
        resp = decoded(sp.handle(FakeConn(), missing_queue))  # type: ignore[arg-type]
        assert resp.code == ResponseCode.SYSTEM_ERROR
        assert store.puts == []

    asyncio.run(scenario())
