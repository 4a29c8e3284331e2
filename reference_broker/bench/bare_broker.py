"""This module owns the broker benchmark's baseline: a bare broker that only does what the broker issue's
prototype did, so the real broker's send figures can be read against the floor of this interpreter on this
machine, with the same load generator, in the same run.

Per request it parses the frame and its JSON header, appends a RocketMQ record (the store's own layout and
struct, BODYCRC included) to one mapped file and a 20-byte consume-queue unit to that queue's mapped file,
and answers with the msgId, queueId and queueOffset a producer expects. A batch (SEND_BATCH_MESSAGE) appends
one record and one unit per entry. Any other request is answered SUCCESS with nothing in it (heartbeats,
client unregistration). It registers its topics with the name servers so the project's producers find it.

Deliberately absent, because they are what the comparison measures: topic checks and configuration, the
whole-record CRC, dispatch (consume queues are written inline, there is no index), flushing, recovery,
flow control. The mapped files are recycled from their start when full: nothing here is ever read back.
Never use it to store anything.
"""

from __future__ import annotations

import asyncio
import logging
import mmap
import os
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final, cast

import orjson

from reference_broker.broker.outer_api import BrokerOuterAPI
from reference_broker.common import record as rec
from reference_broker.common.crc import crc32
from reference_broker.common.message_batch import BatchDecodeError, decode_batch_entries
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.server import new_event_loop

log = logging.getLogger(__name__)

FRAME_HEAD: Final = struct.Struct(">ii")  # length, serialize type << 24 | header length
CQ_UNIT: Final = struct.Struct(">qiq")  # commit-log offset, size, tags hash: ConsumeQueue.CQ_STORE_UNIT_SIZE
CQ_FILE_UNITS: Final = 300_000  # mappedFileSizeConsumeQueue / 20, as the store's default
QUEUES_PER_TOPIC: Final = 4  # defaultTopicQueueNums
REGISTER_PERIOD_S: Final = 30.0  # registerNameServerPeriod
PAGE: Final = 4096
_SENDS: Final = frozenset({int(RequestCode.SEND_MESSAGE), int(RequestCode.SEND_MESSAGE_V2)})
_BATCH: Final = int(RequestCode.SEND_BATCH_MESSAGE)


def _mapped(path: Path, size: int) -> mmap.mmap:
    """A file of ``size`` bytes, mapped and touched page by page now, so that no first-write page fault (and
    no read-around) lands in a request: the real store's warm-ahead service does the same for its writer."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, size)
        mm = mmap.mmap(fd, size)
    finally:
        os.close(fd)
    for off in range(0, size, PAGE):
        mm[off] = 0
    return mm


class _Queue:
    """One consume queue: its recycled mapping and the offset of its next unit."""

    __slots__ = ("mm", "next_offset")

    def __init__(self, mm: mmap.mmap) -> None:
        self.mm = mm
        self.next_offset = 0


class BareStore:
    """One recycled commit-log mapping and one consume-queue mapping per (topic, queue)."""

    def __init__(self, root: Path, log_size: int, store_host: tuple[str, int]) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.log_size = log_size
        self.log = _mapped(root / "commitlog", log_size)
        self.log_view = memoryview(self.log)
        self.pos = 0  # next write position in the mapping
        self.offset = 0  # commit-log offset of the next record (grows past the mapping's size)
        self.store_ip = rec.host_bytes(store_host[0])
        self.store_port = store_host[1]
        self.queues: dict[tuple[bytes, int], _Queue] = {}
        self.last_ts = 0

    def _queue(self, topic_b: bytes, queue_id: int) -> _Queue:
        q = self.queues.get((topic_b, queue_id))
        if q is None:
            name = f"cq-{topic_b.hex()}-{queue_id}"
            q = self.queues[(topic_b, queue_id)] = _Queue(_mapped(self.root / name, CQ_FILE_UNITS * CQ_UNIT.size))
        return q

    def append(self, topic_b: bytes, queue_id: int, flag: int, body: bytes, props_b: bytes, sys_flag: int,
               born_ts: int, born_host: tuple[bytes, int], body_crc: int) -> tuple[int, int]:
        """Append one record and its unit; (commit-log offset, queue offset)."""
        born_ip, born_port = born_host
        r = rec.prepare_record(topic_b, body, props_b, queue_id, flag, sys_flag, born_ts, born_ip, born_port,
                               self.store_ip, self.store_port, 0, 0, body_crc)
        total = r.size
        if self.pos + total > self.log_size:
            self.pos = 0  # recycled: a baseline keeps nothing
        q = self._queue(topic_b, queue_id)
        queue_offset = q.next_offset
        now = time.time_ns() // 1_000_000
        ts = self.last_ts = now if now > self.last_ts else self.last_ts
        offset = self.offset
        rec.write_record(self.log_view, self.pos, r, queue_offset, offset, ts, False)  # the store's one encoder
        CQ_UNIT.pack_into(q.mm, queue_offset % CQ_FILE_UNITS * CQ_UNIT.size, offset, total, 0)
        q.next_offset = queue_offset + 1
        self.pos += total
        self.offset = offset + total
        return offset, queue_offset


def _response(opaque: int, code: int, ext: dict[str, str] | None = None) -> bytes:
    header: dict[str, object] = {"code": code, "flag": 1, "language": "PYTHON", "opaque": opaque, "version": 0,
                                 "serializeTypeCurrentRPC": "JSON"}
    if ext:
        header["extFields"] = ext
    h = orjson.dumps(header)
    return FRAME_HEAD.pack(4 + len(h), len(h)) + h


class _Connection(asyncio.Protocol):
    def __init__(self, store: BareStore) -> None:
        self.store = store
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.born_host = (b"\x7f\x00\x00\x01", 0)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport implements asyncio.Transport's methods without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            self.born_host = (rec.host_bytes(peer[0]), int(peer[1]))

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos, end = 0, len(buf)
        out: list[bytes] = []
        while end - pos >= 8:
            length, mixed = FRAME_HEAD.unpack_from(buf, pos)
            if length < 4 or end - pos < 4 + length:
                if length < 4:
                    self._close("bad frame length")
                    return
                break
            header_len = mixed & 0xFFFFFF
            h_at = pos + 8
            try:
                header = orjson.loads(bytes(buf[h_at:h_at + header_len]))
                out.append(self._handle(header, bytes(buf[h_at + header_len:pos + 4 + length])))
            except (ValueError, KeyError, TypeError, BatchDecodeError) as exc:
                self._close(f"bad request: {exc}")
                return
            pos += 4 + length
        del buf[:pos]
        if out and self.transport is not None:
            self.transport.write(b"".join(out))

    def _close(self, why: str) -> None:
        log.warning("closing a connection: %s", why)
        if self.transport is not None:
            self.transport.close()

    def _handle(self, header: dict[str, object], body: bytes) -> bytes:
        code = int(header["code"])  # type: ignore[call-overload]
        opaque = int(header.get("opaque", 0))  # type: ignore[call-overload]
        ext = header.get("extFields") or {}
        assert isinstance(ext, dict)
        if code in _SENDS or code == _BATCH:
            v2 = "b" in ext
            topic_b = str(ext["b" if v2 else "topic"]).encode()
            queue_id = int(ext["e" if v2 else "queueId"])
            born_ts = int(ext.get("g" if v2 else "bornTimestamp", 0))
            store = self.store
            if code == _BATCH:
                entries = decode_batch_entries(body)
                ids = []
                offset = queue_offset = 0
                for i, (flag, entry_body, props_b, crc) in enumerate(entries):
                    offset, q_off = store.append(topic_b, queue_id, flag, entry_body, props_b, 0, born_ts,
                                                 self.born_host, crc if crc >= 0 else crc32(entry_body))
                    if i == 0:
                        queue_offset = q_off
                    ids.append(rec.create_message_id(store.store_ip, store.store_port, offset))
                msg_id = ",".join(ids)
            else:
                props_b = str(ext.get("i" if v2 else "properties", "")).encode()
                offset, queue_offset = store.append(
                    topic_b, queue_id, int(ext.get("f" if v2 else "flag", 0)), body, props_b,
                    int(ext.get("d" if v2 else "sysFlag", 0)), born_ts, self.born_host, crc32(body))
                msg_id = rec.create_message_id(store.store_ip, store.store_port, offset)
            return _response(opaque, ResponseCode.SUCCESS,
                             {"msgId": msg_id, "queueId": str(queue_id), "queueOffset": str(queue_offset)})
        return _response(opaque, ResponseCode.SUCCESS)


def register(namesrv_addrs: list[str], broker_addr: str, broker_name: str, cluster: str,
             topics: list[str], api: BrokerOuterAPI) -> bool:
    """The broker's REGISTER_BROKER with ``topics`` (4 queues each, read and write); True if any name server
    accepted it."""
    table = {t: {"order": False, "perm": 6, "readQueueNums": QUEUES_PER_TOPIC, "topicFilterType": "SINGLE_TAG",
                 "topicName": t, "topicSysFlag": 0, "writeQueueNums": QUEUES_PER_TOPIC} for t in topics}
    header = {"brokerAddr": broker_addr, "brokerId": "0", "brokerName": broker_name, "clusterName": cluster,
              "haServerAddr": broker_addr, "compressed": "false"}
    # ``api`` keeps its connections: the name server drops a broker whose registration connection closes.
    return api.register_broker_all(namesrv_addrs, header, table, {"counter": 1, "timestamp": 0}).ok


def serve(namesrv: str, port: int, root: Path, topics: list[str], log_size: int = 512 * 1024 * 1024,
          broker_name: str = "bare-baseline", ready: Callable[[], None] | None = None,
          stop: threading.Event | None = None) -> None:
    """Run the bare broker on 127.0.0.1:``port`` until ``stop`` is set (or forever)."""
    addrs = [a.strip() for a in namesrv.split(";") if a.strip()]
    broker_addr = f"127.0.0.1:{port}"
    store = BareStore(root, log_size, ("127.0.0.1", port))
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    api = BrokerOuterAPI()

    async def main() -> None:
        server = await loop.create_server(lambda: _Connection(store), "127.0.0.1", port, reuse_address=True)
        if addrs and not await loop.run_in_executor(None, register, addrs, broker_addr, broker_name,
                                                    "BareCluster", topics, api):
            raise RuntimeError(f"could not register with the name server(s) {namesrv}")
        if ready is not None:
            ready()
        next_register = loop.time() + REGISTER_PERIOD_S
        while stop is None or not stop.is_set():
            await asyncio.sleep(0.1)
            if addrs and loop.time() >= next_register:
                next_register = loop.time() + REGISTER_PERIOD_S
                await loop.run_in_executor(None, register, addrs, broker_addr, broker_name, "BareCluster", topics,
                                           api)
        server.close()
        await server.wait_closed()

    try:
        loop.run_until_complete(main())
    finally:
        api.close()
        loop.close()
