"""The load side of one process (the local runner or a locust worker): producer Users, consumers, recording.

An ``Agent`` exists per process and run. Its Users (``scenarios.users``) take intended send times from one
shared open-loop ``Pacer`` and send through the driver; its consumers record every delivery. Each operation
becomes one event row (``harness.records``, this process's ``part-<worker>-*.parquet``) and one locust
request event (type "send"/"receive", name = the phase label or topic; the web UI's figures, while the
rows are the record). The coordinator steers it: phase, rate, producing on/off, pause/resume, finish.

Runs under locust, so under gevent's monkey-patching: the client's threads are greenlets; the event writer
keeps its own real OS thread for Parquet encoding.
"""

# gevent ships no type information; its names are Any here.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

import functools
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import gevent
from gevent.lock import Semaphore

from harness.driver import Consumer, Delivery, Driver, SendOutcome
from harness.drivers import make_driver
from harness.records import EventWriter, MetricsWriter, Outcome, RunRecord, wall_clock
from harness.records.schema import MetricName
from harness.send_outcome import record_send
from scenarios.contract import Counts, RunInfo
from scenarios.head_latency import LatencyHistogram
from scenarios.options import Settings
from scenarios.pacing import Pacer

log = logging.getLogger(__name__)

Fire = Callable[..., None]  # locust's events.request.fire
STOP_WAIT_S = 2.0  # beyond the send timeout, how long stop_producing waits for outstanding sends
HEAD_WINDOW_NS = 1_000_000_000  # the head readers' latency goes into the metrics once per second


def head_group(info: RunInfo) -> str:
    """The head readers' consumer group: a second group on the run's topics, never paused."""
    return f"lab_head_{info.tag}"


class SendError(Exception):
    """The locust-side exception of a send that was not acknowledged (its outcome and code)."""


class _Pending:
    """One async send until its callback (or its abandonment) records it, exactly once."""

    __slots__ = ("done", "intended", "key", "nbytes", "start", "topic")

    def __init__(self, key: str, topic: str, start: int, intended: int, nbytes: int) -> None:
        self.key = key
        self.topic = topic
        self.start = start
        self.intended = intended
        self.nbytes = nbytes
        self.done = False


class Agent:
    """The per-process load generator of one run. ``Agent.current`` is the active one (Users look it up)."""

    current: ClassVar[Agent | None] = None

    def __init__(self, info: RunInfo, settings: Settings, worker: str, fire: Fire | None = None,
                 driver: Driver | None = None) -> None:
        self.info = info
        self.settings = settings
        self.worker = worker
        self._fire = fire
        self.clock = wall_clock()
        self.driver = driver or make_driver(settings.driver, info.namesrv,
                                            instance=f"lab-{info.tag}-{worker}-{os.getpid()}",
                                            producer_group=f"lab_producer_{info.tag}",
                                            send_timeout_s=settings.send_timeout_s,
                                            peer_client=settings.peer_client,
                                            rocketmq_client=settings.rocketmq_client)
        self.counts = Counts(worker=worker)
        self.writer: EventWriter | None = None
        self.consumers: list[Consumer] = []
        self.head_consumers: list[Consumer] = []
        # Head readers' latency per stage (the controller's "mark"), and the current second's for the metrics.
        self._head_lock = threading.Lock()
        self._head_stage = "warmup"
        self.head_hist: dict[str, LatencyHistogram] = {}
        self._head_window = LatencyHistogram()
        self._head_window_end = 0
        self._head_metrics: MetricsWriter | None = None
        self.pacer = Pacer(self._process_rate(settings.rate), self.clock.now_ns(), settings.batch)
        self._slots = Semaphore(settings.in_flight)
        self._body = os.urandom(settings.message_size)
        self._seq = itertools.count()
        self._key_prefix = f"{info.tag}-{worker}-"
        self._run_prefix = f"{info.tag}-"
        self._labels = {t: p.label for p in info.phases for t in p.topic_names}
        self._phase = 0
        self._topics = info.phases[0].topic_names
        self._rr = 0
        self._pending: set[_Pending] = set()  # async sends without an outcome yet
        self.producing = False
        self._anchored = False
        self._cpu0 = time.process_time()

    def _process_rate(self, total: float) -> float:
        return total / max(1, self.info.processes)

    # ---- lifecycle ------------------------------------------------------------------------------------

    def begin(self) -> Counts:
        """Open this process's part of the run, connect, start consuming, then start producing."""
        run_dir = Path(self.info.run_dir)
        if not run_dir.is_dir():  # a worker on another host: keep the events under the same path here
            log.warning("run directory %s is not on this host: events stay here, copy %s/events/ into the run",
                        run_dir, run_dir)
            run_dir.mkdir(parents=True, exist_ok=True)
        if self.settings.record:
            self.writer = RunRecord(run_dir, self.clock).events_writer(self.worker)
        self.driver.start()
        for i in range(self.settings.consumers):
            c = self.driver.consumer(self.info.group, self._topics, self._on_delivery, name=f"{self.worker}-c{i}",
                                     from_timestamp_ms=self.info.from_timestamp_ms,
                                     threads=self.settings.consume_threads, batch=self.settings.consume_batch)
            c.start()
            self.consumers.append(c)
        if self.settings.head_readers > 0 and self.settings.record:
            self._head_metrics = RunRecord(run_dir, self.clock).metrics_writer(f"head-{self.worker}")
        for i in range(self.settings.head_readers):
            c = self.driver.consumer(head_group(self.info), self._topics, self._on_head, name=f"{self.worker}-h{i}",
                                     from_timestamp_ms=self.info.from_timestamp_ms,
                                     threads=self.settings.consume_threads, batch=self.settings.consume_batch)
            c.start()
            self.head_consumers.append(c)
        Agent.current = self
        self.producing = True
        self.counts.producing = True
        return self.snapshot()

    def snapshot(self) -> Counts:
        c = self.counts
        if not c.finished:
            c.cpu_s = time.process_time() - self._cpu0
        c.rows = self.writer.rows_written if self.writer is not None else 0
        c.producing = self.producing
        c.extra = {"owned_queues": sum(x.owned_queues() for x in self.consumers), "phase": self._phase}
        if self.head_consumers:
            with self._head_lock:
                c.extra["head"] = {stage: h.to_json() for stage, h in self.head_hist.items()}
        return Counts.from_dict(c.to_dict())

    # ---- steering (the coordinator's commands) --------------------------------------------------------

    def mark(self, stage: str) -> Counts:
        """From now on the head readers' latency counts toward ``stage`` (the backlog controller's build,
        drain, ...)."""
        with self._head_lock:
            self._head_stage = stage
        return self.snapshot()

    def set_phase(self, index: int) -> Counts:
        phase = self.info.phases[index]
        for c in [*self.consumers, *self.head_consumers]:
            c.subscribe(phase.topic_names)
        self._phase = index
        self._topics = phase.topic_names
        self._rr = 0
        return self.snapshot()

    def set_rate(self, rate: float) -> Counts:
        """Total rate over all processes (this one takes its share); 0 stops producing, -1 = closed loop."""
        if rate == 0:
            self.producing = False
        else:
            self.pacer.set_rate(0.0 if rate < 0 else self._process_rate(rate), self.clock.now_ns())
            self.producing = True
        return self.snapshot()

    def pause(self) -> Counts:
        """Stop pulling, and tell the broker what was consumed so far (its backlog view is then current; a pull
        already held at the broker may still deliver one more batch per queue)."""
        for c in self.consumers:
            c.pause()
        for c in self.consumers:
            c.commit()
        return self.snapshot()

    def resume(self) -> Counts:
        for c in self.consumers:
            c.resume()
        return self.snapshot()

    def stop_producing(self) -> Counts:
        """No new sends; wait (bounded) until every outstanding one has its outcome."""
        self.producing = False
        deadline = self.clock.now_ns() + int((self.settings.send_timeout_s * 3 + STOP_WAIT_S) * 1e9)
        while self.counts.in_flight > 0 and self.clock.now_ns() < deadline:
            gevent.sleep(0.01)
        return self.snapshot()

    def finish(self) -> Counts:
        """Stop everything of this process and write its last events; idempotent."""
        if self.counts.finished:
            return self.snapshot()
        self.stop_producing()
        for p in list(self._pending):  # no callback in time: maybe stored, maybe not
            self._sent(p, SendOutcome(Outcome.UNKNOWN, error="no outcome by the end of the run"))
        for c in [*self.consumers, *self.head_consumers]:
            try:
                c.stop()
            except Exception as exc:  # noqa: BLE001 - shutdown: one failed stop must not skip the rest
                log.warning("stopping consumer: %s", exc)
        try:
            self.driver.stop()
        except Exception as exc:  # noqa: BLE001 - shutdown: one failed stop must not skip the rest
            log.warning("stopping the driver: %s", exc)
        self._flush_head_window(self.clock.now_ns())
        if self._head_metrics is not None:
            try:
                self._head_metrics.close()
            except Exception as exc:  # noqa: BLE001 - shutdown: the head figures are lost, the run says so
                self.counts.error = f"head metrics writer: {exc}"
        if self.writer is not None:
            try:
                self.writer.close()
            except Exception as exc:  # noqa: BLE001 - shutdown (RecordWriteError): the run is incomplete, and says so
                self.counts.error = f"event writer: {exc}"
                log.error("%s: %s", self.worker, self.counts.error)
        if Agent.current is self:
            Agent.current = None
        self.counts.finished = True
        return self.snapshot()

    # ---- producing (called from the Users' greenlets) ------------------------------------------------

    def _next_topic(self) -> str:
        topics = self._topics
        if len(topics) == 1:
            return topics[0]
        self._rr += 1
        return topics[self._rr % len(topics)]

    def _wait_for_slot(self) -> int | None:
        intended = self.pacer.take()
        if intended is not None:
            # Never early: gevent's timers may fire a little before their time.
            while (delay := intended - self.clock.now_ns()) > 0:
                gevent.sleep(delay / 1e9)
        return intended

    def run_user(self) -> None:
        """A User's loop: send until producing stops."""
        if not self._anchored:  # the schedule starts with the first User, not when the run was set up
            self._anchored = True
            self.pacer.set_rate(self.pacer.rate, self.clock.now_ns())
        sync = self.settings.sync or self.settings.batch > 1
        while self.producing:
            if sync:
                self._send_sync()
            else:
                self._send_async()

    def _send_async(self) -> None:
        intended = self._wait_for_slot()
        self._slots.acquire()
        if not self.producing:
            self._slots.release()
            return
        topic = self._next_topic()
        key = f"{self._key_prefix}{next(self._seq):09d}"
        start = self.clock.now_ns()
        pending = _Pending(key, topic, start, start if intended is None else intended, len(self._body))
        self.counts.attempted += 1
        self.counts.in_flight += 1
        if not self.counts.first_send_ns:
            self.counts.first_send_ns = start
        self._pending.add(pending)
        try:
            self.driver.send_async(topic, key, self._body, functools.partial(self._sent, pending))
        except BaseException as exc:  # killed while handing it over: it may or may not have been written
            self._sent(pending, SendOutcome(Outcome.UNKNOWN, error=f"abandoned: {type(exc).__name__}"))
            raise
        if self.pacer.behind_ns(start) > 0:
            gevent.sleep(0)  # behind schedule: still let the acknowledgements in between sends

    def _sent(self, p: _Pending, o: SendOutcome) -> None:
        if p.done:
            return
        p.done = True
        self._pending.discard(p)
        end = self.clock.now_ns()
        self.counts.in_flight -= 1
        self._slots.release()
        self._account(o, 1, end)
        if self.writer is not None:
            record_send(self.writer, p.key, p.topic, o, p.start, end, p.nbytes, p.intended)
        self._fire_send("send", p.topic, p.start, end, p.nbytes, o)

    def _send_sync(self) -> None:
        intended = self._wait_for_slot()
        if not self.producing:
            return
        n = self.settings.batch
        topic = self._next_topic()
        keys = [f"{self._key_prefix}{next(self._seq):09d}" for _ in range(n)]
        start = self.clock.now_ns()
        self.counts.attempted += n
        self.counts.in_flight += n
        if not self.counts.first_send_ns:
            self.counts.first_send_ns = start
        try:
            if n == 1:
                o = self.driver.send(topic, keys[0], self._body)
            else:
                o = self.driver.send_batch(topic, keys, [self._body] * n)
        except BaseException as exc:  # the User was killed mid-send (GreenletExit): outcome unknown
            self._sent_sync(keys, topic, start, intended,
                            SendOutcome(Outcome.UNKNOWN, error=f"abandoned: {type(exc).__name__}"))
            raise
        self._sent_sync(keys, topic, start, intended, o)

    def _sent_sync(self, keys: list[str], topic: str, start: int, intended: int | None, o: SendOutcome) -> None:
        end = self.clock.now_ns()
        n = len(keys)
        self.counts.in_flight -= n
        self._account(o, n, end)
        size = len(self._body)
        if self.writer is not None:
            for i, key in enumerate(keys):
                record_send(self.writer, key, topic, o, start, end, size, start if intended is None else intended, i)
        self._fire_send("send" if n == 1 else "send_batch", topic, start, end, size * n, o)

    def _account(self, o: SendOutcome, n: int, end: int) -> None:
        if o.outcome == Outcome.OK:
            self.counts.ok += n
            self.counts.last_ack_ns = end
        elif o.outcome == Outcome.FAIL:
            self.counts.fail += n
        else:
            self.counts.unknown += n

    def _fire_send(self, kind: str, topic: str, start: int, end: int, nbytes: int, o: SendOutcome) -> None:
        if self._fire is None:
            return
        exc = None if o.outcome == Outcome.OK else SendError(f"{o.outcome} code {o.code}: {o.error or ''}"[:120])
        self._fire(request_type=kind, name=self._labels.get(topic, topic), response_time=(end - start) / 1e6,
                   response_length=nbytes, exception=exc, context=None)

    # ---- consuming (called from the client's consume threads) -----------------------------------------

    def _on_delivery(self, deliveries: list[Delivery]) -> None:
        now = self.clock.now_ns()
        writer = self.writer
        fire = self._fire
        for d in deliveries:
            if not d.key.startswith(self._run_prefix):
                self.counts.foreign += 1
                continue
            self.counts.received += 1
            if writer is not None:
                writer.record_receive(d.key, d.topic, d.queue_id, d.queue_offset, now, now, d.born_ns, d.store_ns,
                                      d.nbytes)
            if fire is not None:
                fire(request_type="receive", name=self._labels.get(d.topic, d.topic),
                     response_time=max(0.0, (now - d.born_ns) / 1e6), response_length=d.nbytes, exception=None,
                     context=None)

    def _on_head(self, deliveries: list[Delivery]) -> None:
        """The head readers: send-to-consume latency (delivery time - born time), nothing in the events."""
        now = self.clock.now_ns()
        with self._head_lock:
            hist = self.head_hist.get(self._head_stage)
            if hist is None:
                hist = self.head_hist[self._head_stage] = LatencyHistogram()
            for d in deliveries:
                if not d.key.startswith(self._run_prefix):
                    continue
                hist.add(now - d.born_ns)
                self._head_window.add(now - d.born_ns)
        if now >= self._head_window_end:
            self._flush_head_window(now)

    def _flush_head_window(self, now: int) -> None:
        with self._head_lock:
            window, self._head_window = self._head_window, LatencyHistogram()
            self._head_window_end = now + HEAD_WINDOW_NS
        if self._head_metrics is None or window.n == 0:
            return
        try:
            for label, q in (("p50", 0.5), ("p99", 0.99), ("max", 1.0)):
                value = window.quantile_ms(q)
                if value is not None:
                    self._head_metrics.record(MetricName.HEAD_LATENCY_MS, value, label, ts_ns=now)
            self._head_metrics.record(MetricName.HEAD_MSGS, window.n, "", ts_ns=now)
        except ValueError:  # closed by finish meanwhile
            pass


def agent_user_loop() -> None:
    """What a producer User does each time locust runs its task: produce while the run wants it."""
    agent = Agent.current
    if agent is None or not agent.producing:
        gevent.sleep(0.05)
        return
    agent.run_user()
