"""This module owns ``bench producer --lean``: a load generator that costs the broker's machine as little CPU
per message as a Python client can, so a 2-core figure measures the broker rather than the client.

The client library spends ~40 µs per message (message object, validation, UNIQ_KEY, header dict, JSON
encoding, futures, callbacks). Here each connection keeps one pre-encoded SEND_MESSAGE_V2 (or
SEND_BATCH_MESSAGE) frame per queue — the same bytes the library would send — and per message only splices the
fixed-width fields that change into a copy: the opaque (10 digits, so the frame length never changes), the born
timestamp (13 digits), each message's UNIQ_KEY (32 hex, MessageClientIDSetter's layout) and the bench's
send-time stamp (19 digits). Frames go out in one write per event-loop pass on uvloop; answers are matched by
opaque, reading only the header's code and opaque. The route comes from the name server once, through the
client library. What the broker receives and does is unchanged: it cannot tell the difference.

With ``--rate`` the sends are paced open loop: a timer writes whatever is due, whatever the answers do, so a
broker stall delays every send written meanwhile and shows in their latencies (no coordinated omission). The
loop's timers tick in milliseconds, so a latency counts from the moment its frame was written, not from its
intended time; how late the client wrote each frame is reported beside it (``pace_lag_*``), so a reader can
tell a slow client from a slow broker.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import struct
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import orjson

from reference_broker.bench.producer_stats import SEND_NS_PROPERTY, ProducerOptions, Window, producer_line
from reference_broker.client import Message, Producer
from reference_broker.client import protocol as client_protocol
from reference_broker.client.message_id import UniqIdGenerator
from reference_broker.common import message as mc
from reference_broker.common.message_batch import BatchEntry, encode_batch
from reference_broker.remoting.command import encode

OPAQUE_BASE: Final = 1_000_000_000  # 10-digit opaques from here keep the frame's length constant
OPAQUE_SENTINEL: Final = 1_999_999_999
BORN_SENTINEL: Final = 9_999_999_999_999  # 13 digits: epoch ms until the year 2286
UNIQ_SENTINEL: Final = "Q" * 32
NS_SENTINEL: Final = "8" * 19
_HEAD = struct.Struct(">ii")
PACE_TICK_S: Final = 0.001  # paced sends: each timer tick writes every frame due by then


@dataclass(frozen=True)
class FrameTemplate:
    """A frame with the byte offsets of its variable fields."""

    frame: bytes
    opaque_at: int
    born_at: int
    uniq_at: tuple[int, ...]
    ns_at: tuple[int, ...]


def fill_frame(tpl: FrameTemplate, opaque: int, born_ms: int, uniq_ids: list[str], stamp_ns: int) -> bytes:
    """The template with its variable fields set (each must keep the sentinel's width)."""
    f = bytearray(tpl.frame)
    f[tpl.opaque_at : tpl.opaque_at + 10] = b"%010d" % opaque
    f[tpl.born_at : tpl.born_at + 13] = b"%013d" % born_ms
    for at, uid in zip(tpl.uniq_at, uniq_ids, strict=True):
        f[at : at + 32] = uid.encode()
    stamp = b"%019d" % stamp_ns
    for at in tpl.ns_at:
        f[at : at + 19] = stamp
    return bytes(f)


def _find_all(data: bytes, needle: bytes) -> tuple[int, ...]:
    found = []
    i = data.find(needle)
    while i >= 0:
        found.append(i)
        i = data.find(needle, i + len(needle))
    return tuple(found)


def build_template(group: str, topic: str, queue_id: int, body: bytes, batch: int, tags: str | None) -> FrameTemplate:
    """The frame the client library would send for one message (``batch`` = 1) or a batch, with sentinels in the
    variable fields."""
    props = {mc.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: UNIQ_SENTINEL, SEND_NS_PROPERTY: NS_SENTINEL,
             mc.PROPERTY_WAIT_STORE_MSG_OK: "true"}
    if tags:
        props[mc.PROPERTY_TAGS] = tags
    if batch > 1:
        payload = encode_batch(BatchEntry(0, body, props) for _ in range(batch))
        header_props = client_protocol.encode_properties({mc.PROPERTY_WAIT_STORE_MSG_OK: "true"})
    else:
        payload, header_props = body, client_protocol.encode_properties(props)
    cmd = client_protocol.send_request(group, topic, queue_id, payload, header_props, batch=batch > 1,
                                       born_timestamp=BORN_SENTINEL)
    cmd.opaque = OPAQUE_SENTINEL
    frame = encode(cmd)
    opaque_at = _find_all(frame, b'"opaque":%d' % OPAQUE_SENTINEL)
    born_at = _find_all(frame, b'"%d"' % BORN_SENTINEL)
    uniq_at = _find_all(frame, UNIQ_SENTINEL.encode())
    ns_at = _find_all(frame, NS_SENTINEL.encode())
    if len(opaque_at) != 1 or len(born_at) != 1 or len(uniq_at) != batch or len(ns_at) != batch:
        raise ValueError("the frame template's fields are not where they should be")
    return FrameTemplate(frame, opaque_at[0] + len(b'"opaque":'), born_at[0] + 1, uniq_at, ns_at)


class _Connection(asyncio.Protocol):
    """One connection to the broker: frames out, answers matched by opaque."""

    def __init__(self, on_answer: Callable[[int, int], None], on_read: Callable[[], None],
                 on_lost: Callable[[], None]) -> None:
        self._buf = bytearray()
        self._on_answer = on_answer
        self._on_read = on_read
        self._on_lost = on_lost

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        pos = 0
        end = len(buf)
        while end - pos >= 8:
            length, mixed = _HEAD.unpack_from(buf, pos)
            if end - pos < 4 + length:
                break
            header = orjson.loads(bytes(buf[pos + 8 : pos + 8 + (mixed & 0xFFFFFF)]))
            self._on_answer(int(header["opaque"]), int(header["code"]))
            pos += 4 + length
        del buf[:pos]
        self._on_read()  # refill once per read: one write for all the answers it brought

    def connection_lost(self, exc: Exception | None) -> None:
        self._on_lost()


async def _run(opts: ProducerOptions, addr: str, targets: list[tuple[str, int]],
               out: Callable[[str], None]) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    batch = opts.batch_size
    body = (os.urandom(64) * (opts.size // 64 + 1))[: opts.size]
    tags = "tag0" if opts.tag_count else None
    templates = [build_template(opts.group, topic, q, body, batch, tags) for topic, q in targets]
    uniq = UniqIdGenerator()
    opaques = itertools.count(OPAQUE_BASE)  # a wrap to OPAQUE_BASE repeats no opaque still pending
    pending: dict[int, int] = {}  # opaque -> start (or intended) time, perf_counter ns
    total, window = Window(), Window()
    done = asyncio.Event()
    state = {"sent": 0, "lost": False}
    rr = itertools.cycle(templates)

    def on_answer(opaque: int, code: int) -> None:
        t0 = pending.pop(opaque, None)
        if t0 is None:
            return
        rt_us = (time.perf_counter_ns() - t0) // 1000
        for w in (total, window):
            if code == 0:
                w.add(rt_us)
            else:
                w.response_failed += 1
        if not pending and done.is_set():
            drained.set()

    def on_read() -> None:
        if not done.is_set() and not paced:
            fill()

    def on_lost() -> None:
        state["lost"] = True
        done.set()
        drained.set()

    drained = asyncio.Event()
    host, _, port = addr.rpartition(":")
    transport, _proto = await loop.create_connection(lambda: _Connection(on_answer, on_read, on_lost), host, int(port))

    def frame_for(t0: int) -> bytes:
        tpl = next(rr)
        opaque = next(opaques)
        if opaque > OPAQUE_SENTINEL:  # wrap within the 10-digit range
            opaque = OPAQUE_BASE
        pending[opaque] = t0
        now = time.time_ns()
        return fill_frame(tpl, opaque, now // 1_000_000, [uniq.create() for _ in tpl.uniq_at], now)

    def limit_reached() -> bool:
        return bool(opts.quantity) and state["sent"] * batch >= opts.quantity

    def fill() -> None:
        frames = []
        while len(pending) < opts.in_flight and not limit_reached():
            frames.append(frame_for(time.perf_counter_ns()))
            state["sent"] += 1
        if frames:
            transport.write(b"".join(frames))

    paced = opts.rate > 0
    interval_ns = 1e9 / opts.rate if paced else 0.0
    lags: array[int] = array("I")  # µs each paced frame went out after its intended time
    start_ns = time.perf_counter_ns()

    def pace() -> None:
        """Write every send due by now (open loop), then sleep until the next one is due."""
        if done.is_set():
            return
        now = time.perf_counter_ns()
        frames = []
        sent = state["sent"]
        while start_ns + sent * interval_ns <= now and len(pending) < opts.in_flight and not limit_reached():
            lags.append(min(0xFFFFFFFF, int(now - start_ns - sent * interval_ns) // 1000))
            frames.append(frame_for(now))
            sent = state["sent"] = sent + 1
        if frames:
            transport.write(b"".join(frames))
        # uvloop's timers have millisecond resolution: a shorter delay would spin the loop (and eat a core).
        loop.call_later(max(PACE_TICK_S, (start_ns + sent * interval_ns - time.perf_counter_ns()) / 1e9), pace)

    cpu0 = time.process_time()
    t_start = time.monotonic()
    if paced:
        pace()
    else:
        fill()
    last = t_start
    deadline = t_start + opts.duration_s
    while not done.is_set():
        await asyncio.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
        now = time.monotonic()
        if now - last >= opts.report_interval_s:
            out(producer_line(time.time(), window, now - last, batch))
            window = Window()
            last = now
        if now >= deadline or limit_reached() or state["lost"]:
            done.set()
    if pending and not state["lost"]:
        try:
            await asyncio.wait_for(drained.wait(), timeout=5.0)
        except TimeoutError:
            pass
    elapsed = time.monotonic() - t_start
    cpu = time.process_time() - cpu0
    transport.close()
    total.send_failed += len(pending)  # never answered
    return {"sent_ok_requests": total.ok, "messages": total.ok * batch, "send_failed": total.send_failed,
            "response_failed": total.response_failed, "elapsed_s": elapsed, "rt_total_us": total.rt_total_us,
            "rt_max_us": total.rt_max_us, "client_cpu_s": cpu, "samples_us": total.samples,
            **({"pace_lag_us": lags} if paced else {})}


def run_lean_producer(opts: ProducerOptions, out: Callable[[str], None] = print) -> dict[str, Any]:
    """One lean producer process: one connection to the master of the topic's first broker, round-robin over its
    queues. ``opts.topic`` may name several topics (comma-separated, on that broker): round-robin over all
    their queues (a broker takes at most 1,024 queues per topic, so 10,000 queues are several topics)."""
    topics = [t.strip() for t in opts.topic.split(",") if t.strip()]
    targets: list[tuple[str, int]] = []
    with Producer(opts.group, opts.namesrv, instance_name=f"bench-lean-{os.getpid()}") as producer:
        addr = ""
        for topic in topics:
            # One send through the library first: it finds (or, with autoCreateTopicEnable, creates) the topic.
            producer.send(Message(topic, b"lean producer warm-up"))
            mqs = producer.fetch_publish_message_queues(topic)
            broker = mqs[0].broker_name
            if not addr:
                addr = producer.broker_addr(mqs[0])
            elif producer.broker_addr(mqs[0]) != addr:
                raise ValueError(f"topic {topic} is not on the first topic's broker ({addr})")
            targets.extend((topic, q) for q in sorted({mq.queue_id for mq in mqs if mq.broker_name == broker}))
    try:
        import uvloop

        runner: Callable[[Any], Any] = uvloop.run
    except ImportError:  # uvloop is a dependency; this only keeps the tool usable without it
        runner = asyncio.run
    result: dict[str, Any] = runner(_run(opts, addr, targets, out))
    samples: array[int] = result["samples_us"]
    result["samples_us"] = samples
    return result
