"""This module owns the chaos load: one producer and one push consumer on the reference client, kept running
across faults, every operation recorded as a run-record event, and the final drain that reads every queue
from its first offset so that "lost" means "not in the broker at all".

Producer: asynchronous sends, at most ``in_flight`` outstanding (closed loop, so ``intended_ns`` = start).
Each send is classified and recorded by ``harness.send_outcome``, the rule the scenarios' driver follows too, so
the checker reads the same rows whoever sent: a SendResult of any status is "ok" with its status's response code
(FLUSH_DISK_TIMEOUT and the slave statuses are stored, but kept apart in ``Ack.status`` because a flush timeout
is not a durability promise); a refusal is "fail"; a send whose request may have been written without an answer
is "unknown" — maybe stored. After a failure the producer waits ``fail_backoff_s``, as an application would,
instead of spinning on a refusing broker. It also waits while it is more than ``max_lag`` sends ahead of the
consumer, so the consumer stays close behind and a verdict does not hinge on a long final drain.

Consumer: a PushConsumer (CLUSTERING, from the first offset, offsets committed to the broker), whose listener
checks each body against its key (chaos.payload) and always returns CONSUME_SUCCESS. After a broker crash it
re-reads from the broker's last persisted offsets, so duplicates are expected; loss is not.
"""

from __future__ import annotations

import bisect
import itertools
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from chaos.drain_source import ConsumerSource, DrainSource
from chaos.payload import BodyVerdict, classify, make_body, make_key
from harness.records import EventWriter, Outcome, RunRecord, WallClock
from harness.send_outcome import outcome_of, record_send
from reference_broker.client import (
    ClientConfig,
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    MessageExt,
    MQClientError,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    SendResult,
    SendStatus,
)
from reference_broker.common.record import MessageIdError, decode_message_id

LAG_PROBE_INTERVAL_S = 1.0  # while the producer waits for the consumer, one send per this interval still goes out


@dataclass(frozen=True)
class LoadSpec:
    topic: str = "ChaosTopic"
    queues: int = 4
    msg_size: int = 1024
    in_flight: int = 32
    rate: float = 0.0  # sends per second; 0 = as fast as the in-flight window allows (closed loop)
    send_timeout_s: float = 3.0
    fail_backoff_s: float = 0.02
    # The consumer kept close behind: no new send while, in some queue, the newest acknowledged queue offset
    # is more than this many ahead of the newest delivered one (0 = no bound). A verdict then never hinges on
    # a long final drain, and an experiment that stops early has little left unseen. Messages the broker lost
    # do not hold the producer back: their queue offsets are taken again by new sends, which are delivered.
    max_lag: int = 5_000
    producer_group: str = "CHAOS_PG"
    consumer_group: str = "CHAOS_CG"
    drain_group: str = "CHAOS_DRAIN"


@dataclass(frozen=True)
class Ack:
    """An acknowledged send: where the broker put it and when the producer heard."""

    commit_log_offset: int
    end_ns: int
    status: SendStatus
    uniq_id: str = ""  # the client's msgId (UNIQ_KEY): what a lookup by id without an offsetMsgId queries
    queue_id: int = -1
    queue_offset: int = -1  # the consume-queue offset the broker gave it (a power cut may give it out again)


@dataclass
class DrainStats:
    queues: int = 0
    messages: int = 0
    complete: bool = True
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _client_config(namesrv: str, name: str) -> ClientConfig:
    # Short route, rebalance and offset-commit intervals: a chaos cycle lasts seconds, not RocketMQ's 20-30 s.
    return ClientConfig(namesrv, name, poll_name_server_interval_s=1.0, heartbeat_broker_interval_s=2.0,
                        persist_consumer_offset_interval_s=1.0, rebalance_interval_s=1.0)


class Workload:
    """Start with ``start()``; ``hold()``/``release()`` stop and resume new sends; ``finish()`` stops the
    producer, lets the consumer catch up, stops it and drains."""

    def __init__(self, namesrv: str, spec: LoadSpec, record: RunRecord, clock: WallClock,
                 worker: str = "p0") -> None:
        self.namesrv = namesrv
        self.spec = spec
        self.clock = clock
        self.worker = worker
        self._record = record
        self._send_events: EventWriter = record.events_writer(f"producer-{worker}")
        self._recv_events: EventWriter = record.events_writer("consumer-c0")
        self._drain_events: EventWriter | None = None
        self.acks: dict[str, Ack] = {}
        self.received: set[str] = set()  # intact keys delivered to anyone (consumer or drain)
        self.drained: set[str] = set()  # intact keys the final drain found in the broker
        self.drain_first: set[str] = set()  # intact keys the drain delivered and the live consumer never had
        self.final_min_offset = 0  # the commit log's min offset when the drain ran (cleaning moves it)
        self.drained_min_offset = -1  # the lowest commit-log offset the drain read
        self.cleaning_expected = False  # disk fill: old files are deleted by design
        self.corrupted: list[str] = []
        self.sent_ok = 0
        self.sent_fail = 0
        self.sent_unknown = 0
        self.deliveries = 0
        self._ok_end_ns: list[int] = []
        self._send_ok_end_ns: list[int] = []  # answers with a plain SEND_OK (a SYNC_MASTER's slave has it too)
        self._lock = threading.Lock()
        self._slots = threading.Semaphore(spec.in_flight)
        self._in_flight = 0
        self._open = threading.Event()
        self._open.set()
        self._stop = threading.Event()
        self._last_failed = False
        self._record_size = 0
        self._acked_qoff: dict[int, int] = {}  # queue id -> the newest acknowledged queue offset
        self._recv_qoff: dict[int, int] = {}  # queue id -> the newest queue offset delivered to the consumer
        self.lag_held_s = 0.0  # time the producer waited for the consumer (max_lag)
        self.rate = spec.rate
        self.recent_errors: deque[tuple[int, int, str]] = deque(maxlen=256)  # (end_ns, code, remark)
        self._producer = Producer(spec.producer_group, namesrv, send_msg_timeout_s=spec.send_timeout_s,
                                  client_config=_client_config(namesrv, f"chaos-{worker}"))
        self._consumer: PushConsumer | None = None
        self._thread = threading.Thread(target=self._produce, name=f"chaos-producer-{worker}", daemon=True)

    # ---- lifecycle --------------------------------------------------------------------------------------

    def start(self) -> None:
        self._producer.start()
        self.start_consumer()
        self._thread.start()

    def start_consumer(self) -> None:
        c = PushConsumer(self.spec.consumer_group, self.namesrv,
                         consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, consume_thread_max=4,
                         pull_batch_size=32, client_config=_client_config(self.namesrv, "chaos-c0"))
        c.subscribe(self.spec.topic, "*")
        c.register_message_listener(self._on_messages)
        c.start()
        self._consumer = c

    def hold(self) -> None:
        """No new sends until ``release()`` (sends in flight go on)."""
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def stop_producing(self, timeout_s: float | None = None) -> bool:
        """Stop sending and wait for the sends in flight; False if some did not complete in time."""
        self._stop.set()
        self._open.set()
        self._thread.join(30)
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else self.spec.send_timeout_s * 3 + 5)
        while self.in_flight > 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.in_flight == 0

    def absent(self) -> dict[str, Ack]:
        """Acknowledged keys the final drain did not find in the broker (delivered before or not). With
        ``cleaning_expected``, keys below where the store's readable log begins — the larger of the final min
        offset and the lowest offset the drain read — were deleted by cleaning and are not counted."""
        floor = self.final_min_offset
        if self.cleaning_expected:
            floor = max(floor, self.drained_min_offset)
        with self._lock:
            return {k: a for k, a in self.acks.items() if k not in self.drained and a.commit_log_offset >= floor}

    def passed_over(self) -> dict[str, Ack]:
        """Acknowledged keys the broker still held at the end (the drain delivered them) that the live
        consumer group never received although it had received a later queue offset of the same queue: its
        position had passed them. After a power cut this happens to a group that had read records past the
        flushed offset (dispatch does not wait for the flush): the cut takes those records, the recovered
        queue hands their offsets to new sends, and the group, already past them, never asks for them.
        The keys the drain delivered that lie beyond the group's position were just not reached yet."""
        with self._lock:
            out = {}
            for k in self.drain_first:
                a = self.acks.get(k)
                if a is not None and 0 <= a.queue_offset <= self._recv_qoff.get(a.queue_id, -1):
                    out[k] = a
            return out

    def acked(self) -> dict[str, Ack]:
        """A copy of the acknowledged sends so far."""
        with self._lock:
            return dict(self.acks)

    def lost(self) -> dict[str, Ack]:
        """Acknowledged keys never delivered to anyone: the checker's ``lost``."""
        with self._lock:
            return {k: a for k, a in self.acks.items() if k not in self.received}

    def received_keys(self) -> set[str]:
        """A copy of the intact keys delivered so far."""
        with self._lock:
            return set(self.received)

    def missing(self) -> int:
        """Acknowledged keys not delivered yet."""
        with self._lock:
            return sum(1 for k in self.acks if k not in self.received)

    def consumer_lag(self) -> int:
        """The most, over the queues, that the newest acknowledged queue offset is ahead of the newest one the
        live consumer received."""
        acked, recv = self._acked_qoff, self._recv_qoff
        return max((off - recv.get(q, -1) for q, off in list(acked.items())), default=0)

    def wait_caught_up(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.missing() == 0:
                return True
            time.sleep(0.2)
        return self.missing() == 0

    def stop_consuming(self) -> None:
        c, self._consumer = self._consumer, None
        if c is not None:
            c.shutdown()

    def close(self) -> None:
        """Stop everything (idempotent); writers are closed by the run record's ``finish``."""
        self._stop.set()
        self._open.set()
        if self._thread.is_alive():
            self._thread.join(30)
        self.stop_consuming()
        self._producer.shutdown()

    def counters(self) -> tuple[int, int]:
        return self.sent_ok, self.deliveries

    def first_ok_after(self, ns: int) -> int | None:
        """End time of the first acknowledged send that ended after ``ns``."""
        with self._lock:
            ends = sorted(self._ok_end_ns)
        i = bisect.bisect_right(ends, ns)
        return ends[i] if i < len(ends) else None

    def first_send_ok_after(self, ns: int) -> int | None:
        """End time of the first send answered with a plain SEND_OK that ended after ``ns``: unlike
        ``first_ok_after``, a SYNC_MASTER's FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE answers do not count."""
        with self._lock:
            ends = sorted(self._send_ok_end_ns)
        i = bisect.bisect_right(ends, ns)
        return ends[i] if i < len(ends) else None

    def answers_between(self, from_ns: int, to_ns: int) -> dict[str, int]:
        """The acknowledged sends that ended in (from_ns, to_ns], counted by SendStatus name."""
        with self._lock:
            return dict(Counter(a.status.name for a in self.acks.values() if from_ns < a.end_ns <= to_ns))

    def record_size(self) -> int:
        """The stored size of one of this workload's records (all are alike: one topic, one key length, one
        body size): the smallest gap between the commit-log offsets of acknowledged sends; 0 until known."""
        if self._record_size == 0:
            with self._lock:
                offsets = sorted({a.commit_log_offset for a in self.acks.values() if a.commit_log_offset >= 0})
            gaps = [b - a for a, b in itertools.pairwise(offsets) if b > a]
            if gaps and len(offsets) >= 16:
                self._record_size = min(gaps)
        return self._record_size

    def max_acked_end(self, before_ns: int, record_size: int) -> int:
        """The commit-log end of the acknowledged sends that ended before ``before_ns``: an upper bound of
        what the broker had written by then (-1 when none). ``record_size`` is a record's stored size."""
        with self._lock:
            offsets = [a.commit_log_offset for a in self.acks.values() if a.end_ns <= before_ns]
        return max(offsets) + record_size if offsets else -1

    # ---- producing --------------------------------------------------------------------------------------

    def set_rate(self, rate: float) -> None:
        """Change the send rate (0 = unlimited) from now on."""
        self.rate = rate

    def _produce(self) -> None:
        spec = self.spec
        seq = 0
        next_ns = 0  # intended start of the next send when paced
        last_send = 0.0  # monotonic time of the last send started
        while not self._stop.is_set():
            if not self._open.is_set():
                self._open.wait(0.1)
                next_ns = 0  # a hold is the harness's pause, not the client's: the schedule starts afresh
                continue
            if self._last_failed:
                self._last_failed = False
                time.sleep(spec.fail_backoff_s)
            if (spec.max_lag and self.consumer_lag() > spec.max_lag
                    and time.monotonic() - last_send < LAG_PROBE_INTERVAL_S):
                # Held for the consumer, but one send a second still goes out: the experiment times the
                # broker's return to service by the first acknowledged send after a fault.
                time.sleep(0.01)
                self.lag_held_s += 0.01
                next_ns = 0
                continue
            last_send = time.monotonic()
            intended = -1
            if self.rate > 0:
                now = self.clock.now_ns()
                # A schedule more than a second behind (the window was full, the broker stalled) is reset rather
                # than caught up in a burst; the recorded intended times still show the delay up to then.
                if next_ns == 0 or now - next_ns > 1_000_000_000:
                    next_ns = now
                if next_ns > now:
                    time.sleep((next_ns - now) / 1e9)
                intended = next_ns
                next_ns += int(1e9 / self.rate)
            if not self._slots.acquire(timeout=0.1):
                continue
            with self._lock:
                self._in_flight += 1
            seq += 1
            key = make_key(self.worker, seq)
            body = make_body(key, spec.msg_size)
            msg = Message(spec.topic, body, keys=key)
            start = self.clock.now_ns()
            try:
                self._producer.send_async(msg, callback=self._callback(key, intended, start, len(body)))
            except MQClientError as e:  # not started / invalid: nothing was sent
                self._done(key, intended, start, len(body), None, e)

    def _callback(self, key: str, intended: int, start: int,
                  nbytes: int) -> Callable[[SendResult | None, MQClientError | None], None]:
        def cb(result: SendResult | None, error: MQClientError | None) -> None:
            self._done(key, intended, start, nbytes, result, error)
        return cb

    def _done(self, key: str, intended: int, start: int, nbytes: int, result: SendResult | None,
              error: MQClientError | None) -> None:
        end = self.clock.now_ns()
        try:
            o = outcome_of(result, error)
            record_send(self._send_events, key, self.spec.topic, o, start, end, nbytes, intended)
            if result is not None:
                try:
                    phys = decode_message_id(result.offset_msg_id or "")[2]
                except MessageIdError:
                    phys = -1
                with self._lock:
                    q = result.message_queue.queue_id
                    self.acks.setdefault(key, Ack(phys, end, result.send_status, result.msg_id, q,
                                                  result.queue_offset))
                    self._acked_qoff[q] = max(self._acked_qoff.get(q, -1), result.queue_offset)
                    self._ok_end_ns.append(end)
                    if result.send_status is SendStatus.SEND_OK:
                        self._send_ok_end_ns.append(end)
                    self.sent_ok += 1
                return
            assert error is not None
            self.recent_errors.append((end, int(error.code), error.remark))
            with self._lock:
                if o.outcome is Outcome.UNKNOWN:
                    self.sent_unknown += 1
                else:
                    self.sent_fail += 1
            self._last_failed = True
        finally:
            with self._lock:
                self._in_flight -= 1
            self._slots.release()

    # ---- consuming --------------------------------------------------------------------------------------

    def _record_delivery(self, writer: EventWriter, m: MessageExt, session: str, drain: bool = False) -> None:
        now = self.clock.now_ns()
        d = classify(m.keys, m.body, m.offset_msg_id)
        if drain and d.verdict is BodyVerdict.INTACT:
            with self._lock:
                self.drained.add(d.key)
                if self.drained_min_offset < 0 or m.commit_log_offset < self.drained_min_offset:
                    self.drained_min_offset = m.commit_log_offset
                if d.key in self.received:
                    return
                self.drain_first.add(d.key)
        writer.record_receive(d.key, m.topic, m.queue_id, m.queue_offset, now, now,
                              born_ns=m.born_timestamp * 1_000_000, store_ns=m.store_timestamp * 1_000_000,
                              nbytes=len(m.body), session=session)
        with self._lock:
            self.deliveries += 1
            if d.verdict is BodyVerdict.INTACT:
                self.received.add(d.key)
                if not drain:
                    self._recv_qoff[m.queue_id] = max(self._recv_qoff.get(m.queue_id, -1), m.queue_offset)
            else:
                self.corrupted.append(d.key)

    def _on_messages(self, msgs: list[MessageExt], _ctx: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        for m in msgs:
            self._record_delivery(self._recv_events, m, "c0")
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def drain(self, max_pull_errors: int = 20, source: DrainSource | None = None) -> DrainStats:
        """Read every queue of the topic from its min offset to its max offset: with a fresh pull consumer
        through the name server's route, or from ``source`` (chaos.slave_read: one broker's address, a slave
        whose master is gone).

        Every body is checked and every intact key found goes into ``drained`` (what the broker holds at the
        end). A delivery is recorded as an event only for a key not delivered before (or a corrupted one), so
        the run's ``duplicated`` counts the live consumer's re-deliveries, not the drain's second reading."""
        t0 = time.monotonic()
        stats = DrainStats()
        writer = self._drain_events = self._record.events_writer("drain")
        if source is None:
            source = ConsumerSource(PullConsumer(self.spec.drain_group, self.namesrv,
                                                  client_config=_client_config(self.namesrv, "chaos-drain")))
        source.start()
        try:
            mqs = sorted(source.queues(self.spec.topic))
            stats.queues = len(mqs)
            for mq in mqs:
                errors = 0
                offset = source.min_offset(mq)
                high = source.max_offset(mq)
                while offset < high:
                    try:
                        r = source.pull(mq, offset, 32)
                    except MQClientError as e:
                        errors += 1
                        if errors > max_pull_errors:
                            stats.complete = False
                            stats.problems.append(f"{mq}: pull at {offset} of {high} kept failing: {e}")
                            break
                        time.sleep(0.2)
                        continue
                    if r.pull_status is PullStatus.FOUND:
                        for m in r.msg_found_list:
                            self._record_delivery(writer, m, "drain", drain=True)
                        stats.messages += len(r.msg_found_list)
                    if r.next_begin_offset <= offset and r.pull_status is not PullStatus.FOUND:
                        stats.complete = False
                        stats.problems.append(f"{mq}: stuck at {offset} of {high} ({r.pull_status.value})")
                        break
                    offset = max(offset + (len(r.msg_found_list) if r.pull_status is PullStatus.FOUND else 0),
                                 r.next_begin_offset)
        except MQClientError as e:
            stats.complete = False
            stats.problems.append(f"drain failed: {e}")
        finally:
            source.shutdown()
        stats.seconds = time.monotonic() - t0
        return stats
