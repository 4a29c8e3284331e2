"""This module owns the driver workload: one producer and one consumer through any ``Driver`` (the reference
client's, NATS's, RabbitMQ's), every send and delivery recorded as run-record events, then a drain and the loss
checker judged against the broker's own acknowledgement promise (meta.json ``ack_promise``).

The compare command (``harness.compare``) and the chaos load's ``--driver`` (``chaos.peer_faults``) run it. Three
shapes, as in OpenMessaging Benchmark: a fixed ``rate`` (open loop: each send's intended time is recorded, so a
stalled broker shows as publish delay, not as a slower schedule), unbounded (``rate`` 0: ``in_flight`` sends
outstanding, closed loop), and one in flight (``in_flight`` 1: the send latency without queueing).
"""

from __future__ import annotations

import collections
import itertools
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.checker import CheckResult, check_run
from harness.driver import Delivery, Driver, SendOutcome
from harness.peer_drivers import ACK_PROMISES
from harness.records import RunRecord
from harness.records.schema import Outcome
from harness.send_outcome import record_send

FAIL_BACKOFF_S = 0.02  # the producer's pause after a refused send


@dataclass(frozen=True)
class LoadShape:
    name: str = "load"
    seconds: float = 5.0
    rate: float = 0.0  # msgs/s; 0 = as fast as in_flight allows
    in_flight: int = 128
    message_size: int = 1024
    queues: int = 4
    drain_timeout_s: float = 30.0


@dataclass
class LoadResult:
    run_dir: Path
    sent_ok: int = 0
    sent_fail: int = 0
    sent_unknown: int = 0
    received: int = 0
    seconds: float = 0.0
    unreceived: int = 0  # acknowledged keys no delivery brought by the end of the drain
    backlog_at_end: int | None = None  # the broker's backlog then (None: all received; -1: no answer)
    backlog_error: str = ""
    missing_queues: list[str] = field(default_factory=list)  # queues the broker no longer has at the end
    check: CheckResult | None = None


class DriverLoad:
    """Start with ``run()`` (blocking) or ``start()``/``finish()`` around a fault."""

    def __init__(self, driver: Driver, record: RunRecord, shape: LoadShape, topic: str, group: str, *,
                 part: int = 0, key_prefix: str | None = None, track_new: bool = False) -> None:
        """``part`` numbers this instance's writers (``producer-p<part>``, ``consumer-c<part>``) when several
        processes load one run (harness.load_procs); their keys then need distinct ``key_prefix``es, and
        ``track_new`` keeps the keys first seen since the last ``take_new_seen()`` for the coordinator's drain."""
        self.driver = driver
        self.record = record
        self.shape = shape
        self.topic = topic
        self.group = group
        self._send_w = record.events_writer(f"producer-p{part}")
        self._recv_w = record.events_writer(f"consumer-c{part}")
        self._prefix = key_prefix if key_prefix is not None else f"{record.run_id}-"
        self._new_seen: list[str] | None = [] if track_new else None
        self._produced = False
        self._drained = False
        self._body = os.urandom(shape.message_size)
        self._slots = threading.Semaphore(shape.in_flight)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._keys = set[str]()
        self._acked = set[str]()
        self._seen = set[str]()
        self.result = LoadResult(record.run_dir)
        # What a fault observer reads while the load runs (chaos.peer_faults' disk fill): the latest failed or
        # unknown answers (end_ns, outcome, code, error text), and the start of the latest acknowledged send.
        self.recent_errors: collections.deque[tuple[int, str, int, str]] = collections.deque(maxlen=4096)
        self.last_ok_start_ns = 0
        self._backoff_until = 0.0
        self._thread: threading.Thread | None = None
        self._started = 0.0
        self._consumer = driver.consumer(group, [topic], self._on_delivery, name=f"c{part}", threads=1, batch=64)

    def _on_delivery(self, ds: list[Delivery]) -> None:
        now = time.time_ns()
        with self._lock:
            for d in ds:
                self._recv_w.record_receive(d.key, d.topic, d.queue_id, d.queue_offset, now, now, d.born_ns,
                                            d.store_ns, d.nbytes)
                if self._new_seen is not None and d.key not in self._seen:
                    self._new_seen.append(d.key)
                self._seen.add(d.key)
            self.result.received += len(ds)

    def _done(self, key: str, intended: int, start: int) -> Callable[[SendOutcome], None]:
        def cb(o: SendOutcome) -> None:
            end = time.time_ns()
            with self._lock:
                record_send(self._send_w, key, self.topic, o, start, end, self.shape.message_size, intended)
                if o.outcome == Outcome.OK:
                    self.result.sent_ok += 1
                    self._acked.add(key)
                    self.last_ok_start_ns = max(self.last_ok_start_ns, start)
                else:
                    if o.outcome == Outcome.FAIL:
                        self.result.sent_fail += 1
                    else:
                        self.result.sent_unknown += 1
                    self.recent_errors.append((end, str(o.outcome), o.code, o.error or ""))
                if o.outcome == Outcome.FAIL:
                    # A refusing broker: the producer backs off, as an application would. Not here: this runs on
                    # the client's I/O thread (pika's ioloop, nats-py's event loop), where a sleep per refusal
                    # starved the client's own reconnect — RabbitMQ's publisher stayed "not connected" for good.
                    self._backoff_until = time.monotonic() + FAIL_BACKOFF_S
            self._slots.release()
        return cb

    def _produce(self) -> None:
        seq = itertools.count()
        t0 = time.time_ns()
        period_ns = int(1e9 / self.shape.rate) if self.shape.rate > 0 else 0
        prefix = self._prefix
        while not self._stop.is_set():
            i = next(seq)
            intended = t0 + i * period_ns if period_ns else -1
            if period_ns:
                delay = (intended - time.time_ns()) / 1e9
                if delay > 0 and self._stop.wait(delay):
                    break
            if not self._slots.acquire(timeout=0.5):
                continue
            backoff = self._backoff_until - time.monotonic()
            if backoff > 0:
                self._stop.wait(backoff)
            key = f"{prefix}{i}"
            start = time.time_ns()
            self.driver.send_async(self.topic, key, self._body, self._done(key, intended, start))

    def counts(self) -> tuple[int, int, int]:
        """(acknowledged, failed, unknown) sends answered so far."""
        with self._lock:
            return self.result.sent_ok, self.result.sent_fail, self.result.sent_unknown

    def acked_keys(self) -> list[str]:
        with self._lock:
            return list(self._acked)

    def take_new_seen(self) -> list[str]:
        """Keys delivered for the first time since the last call (``track_new``; else always empty)."""
        with self._lock:
            if not self._new_seen:
                return []
            out, self._new_seen = self._new_seen, []
            return out

    def prepare(self) -> None:
        """Connect, create the topic (idempotent: several processes may each do it) and start consuming."""
        self.driver.start()
        self.driver.create_topic(self.topic, self.shape.queues)
        self._consumer.start()

    def go(self) -> None:
        """Start producing."""
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._produce, name="driver-load", daemon=True)
        self._thread.start()

    def start(self) -> None:
        self.prepare()
        self.go()

    def stop_producing(self) -> None:
        """Stop sending and wait until every outstanding send is answered (or timed out); idempotent."""
        if self._produced:
            return
        self._produced = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        self.result.seconds = time.monotonic() - self._started
        for _ in range(self.shape.in_flight):  # every outstanding send answered (or timed out)
            self._slots.acquire(timeout=10)

    def stop_consuming(self) -> None:
        self._consumer.stop()

    def drain(self) -> None:
        """Stop producing, then consume until every acknowledged key was received (or ``drain_timeout_s``) and
        stop the consumer; idempotent."""
        if self._drained:
            return
        self._drained = True
        self.stop_producing()
        deadline = time.monotonic() + self.shape.drain_timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if self._acked <= self._seen:
                    break
            time.sleep(0.1)
        self.stop_consuming()
        with self._lock:
            self.result.unreceived = len(self._acked - self._seen)

    def finish(self, allow_loss: bool = False, extra_meta: dict[str, Any] | None = None) -> LoadResult:
        """Stop producing, wait for the outstanding sends and the consumer, record meta, check."""
        self.drain()
        return finish_record(self.driver, self.record, self.result, self.group, self.topic, allow_loss, extra_meta)

    def run(self, allow_loss: bool = False, extra_meta: dict[str, Any] | None = None) -> LoadResult:
        self.start()
        self._stop.wait(self.shape.seconds)
        return self.finish(allow_loss, extra_meta)


def finish_record(driver: Driver, record: RunRecord, result: LoadResult, group: str, topic: str, allow_loss: bool,
                  extra_meta: dict[str, Any] | None) -> LoadResult:
    """After the drain (``result.unreceived`` known): the broker's backlog if anything is missing, meta.json,
    the checker. Shared by the one-process load and the coordinator of several (harness.load_procs)."""
    if result.unreceived:
        # Acknowledged, not received: still in the broker (a consumer that stopped reading: unread) or
        # gone (lost)? The broker's own count tells them apart for the report; the checker counts both lost.
        try:
            backlog = driver.backlog(group, [topic])
            result.backlog_at_end = backlog.total
            result.missing_queues = sorted(q for q, n in backlog.per_queue.items() if n < 0)
        except Exception as exc:  # noqa: BLE001 - a broker that does not answer: no figure
            result.backlog_at_end = -1
            result.backlog_error = f"{type(exc).__name__}: {exc}"[:200]
    facts = driver.broker_facts()
    broker = dict(facts.get("broker", {}))
    promise = facts.get("ack_promise") or ACK_PROMISES.get(str(broker.get("flushDiskType")))
    fields: dict[str, Any] = {
        "broker": broker, "broker_impl": facts.get("broker_impl"), "driver": driver.impl,
        "ack_promise": None if promise is None else str(promise),
        "peer_client": facts.get("peer_client"),  # a peer's send path (harness.drivers.PEER_CLIENTS); else None
        # the rocketmq driver's send path (harness.drivers.ROCKETMQ_CLIENTS); None for the others
        "rocketmq_client": facts.get("rocketmq_client"),
        "results": {k: v for k, v in asdict(result).items() if k not in ("run_dir", "check")}}
    fields.update(extra_meta or {})
    record.finish(**fields)
    result.check = check_run(record.run_dir, allow_loss=allow_loss)
    return result
