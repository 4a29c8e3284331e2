"""This module owns the transaction check-back (broker/.../transaction/TransactionalMessageCheckService.java and
TransactionalMessageServiceImpl.check, 4.9.8): every ``transactionCheckInterval`` the half messages left
unresolved longer than ``transactionTimeOut`` are appended again to the half queue and their producer group is
asked, with CHECK_TRANSACTION_STATE (39), what became of them.

The decision is sans-IO: ``OpScan`` turns the op messages read into the set of resolved half offsets, and
``judge`` says what to do with one half message at a given time. ``TransactionalMessageCheckService`` is the
thin shell: a thread that reads the two system queues from the store, puts what ``judge`` asks for through
the store's put path, and hands the check requests and its progress to the broker (``CheckHooks``).

One run, per half queue (RMQ_SYS_TRANS_HALF_TOPIC has one, queue 0):

1. from the internal group CID_RMQ_SYS_TRANS's offsets of the half queue (``half``) and of its op queue
   (``op``; RMQ_SYS_TRANS_OP_HALF_TOPIC, same queue id), read every op message from ``op`` on: an op names a
   half offset; offsets below ``half`` were dealt with in an earlier run (their ops are *done*), the others are
   resolved now (*removed*);
2. walk the half queue from ``half``: a removed offset is passed; an unresolved message checked
   ``transactionCheckMax`` times already, or older than ``fileReservedTime``, goes to TRANS_CHECK_MAX_TIME_TOPIC;
   one stored after the run began, or younger than its immunity (``transactionTimeOut``, or its
   CHECK_IMMUNITY_TIME_IN_SECONDS), ends the walk (the queue is in store order); any other is appended again
   with TRANSACTION_CHECK_TIMES + 1 and checked;
3. the half offset moves to where the walk ended, the op offset past the done ops that follow it without a
   gap. Both are committed as the group's consumer offsets, persisted with consumerOffset.json: a restart
   resumes where the last persisted run ended — an open message is never forgotten (at worst checked once
   more) and a resolved one never checked again once its op is past the persisted offsets.

Deliberate differences from 4.9.8, each a fix of a way it gets stuck:
- an op message with another tag than ``d`` or an unreadable body counts as done (4.9.8 logs it and its op
  offset never passes it again);
- a half message exactly ``transactionTimeOut`` old is checked (4.9.8 loops on it until the 60 s limit);
- a failed re-append ends the run (4.9.8 retries it in a loop until the 60 s limit), and so does a failed put
  to TRANS_CHECK_MAX_TIME_TOPIC (4.9.8 moves past the message, which is then nowhere).
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Protocol

from reference_broker.broker import transaction as txb
from reference_broker.common import message as mc
from reference_broker.common import record as rec
from reference_broker.common import transaction as tx

if TYPE_CHECKING:
    from reference_broker.store.message_store import MessageStore

log = logging.getLogger(__name__)

MAX_QUEUE_PROCESS_TIME_MS: Final = 60_000  # TransactionalMessageServiceImpl.MAX_QUEUE_PROCESS_TIME
OP_BATCH: Final = 32  # fillOpRemoveMap pulls 32 op messages at a time
OPS_DISPATCH_WAIT_S: Final = 1.0  # at most this for dispatch to catch up before a run (its own thread: may block)


# ---- sans-IO core ---------------------------------------------------------------------------------------------
@dataclass
class OpScan:
    """fillOpRemoveMap over the op messages read from the op queue, given the half queue's offset ``mini``."""

    mini: int
    removed: dict[int, int] = field(default_factory=dict)  # half offset → op offset (resolved in this run)
    done: list[int] = field(default_factory=list)  # op offsets whose half offset is below ``mini``

    def feed(self, op_offset: int, tags: str | None, body: bytes) -> None:
        try:
            half_offset = int(body.decode(tx.OP_CHARSET))
        except (UnicodeDecodeError, ValueError):
            half_offset = -1  # 4.9.8's getLong of a bad body
        if tags != tx.REMOVE_TAG:
            log.error("op message %d has tag %r, not %r: counted as done", op_offset, tags, tx.REMOVE_TAG)
            self.done.append(op_offset)
        elif half_offset < self.mini:
            self.done.append(op_offset)
        else:
            self.removed[half_offset] = op_offset


def next_op_offset(done: list[int], old: int) -> int:
    """calculateOpOffset: past the done op offsets that follow ``old`` without a gap."""
    new = old
    for offset in sorted(done):
        if offset == new:
            new += 1
        elif offset > new:
            break
    return new


class Verdict(enum.Enum):
    """What one run does with an unresolved half message."""

    DISCARD = enum.auto()  # checked transactionCheckMax times, or past fileReservedTime: TRANS_CHECK_MAX_TIME_TOPIC
    STOP = enum.auto()  # stored after the run began, or still immune: this and every later message wait
    DONE_IMMUNE = enum.auto()  # an immune copy whose original offset has an op: resolved
    REAPPEND_IMMUNE = enum.auto()  # immune (own CHECK_IMMUNITY_TIME_IN_SECONDS): appended again, not checked
    CHECK = enum.auto()  # appended again with TRANSACTION_CHECK_TIMES + 1, and its producer asked


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    check_times: int = 0  # the TRANSACTION_CHECK_TIMES the new copy carries (CHECK)
    op_offset: int = -1  # the op that resolved it (DONE_IMMUNE)


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return -1  # 4.9.8's getInt/getLong of a bad value


def judge(props: dict[str, str], born_ms: int, store_ms: int, now_ms: int, start_ms: int, timeout_ms: int,
          check_max: int, reserved_ms: int, removed: dict[int, int]) -> Judgement:
    """The body of TransactionalMessageServiceImpl.check's loop for one half message without an op."""
    times = props.get(mc.PROPERTY_TRANSACTION_CHECK_TIMES)
    check_times = 1 if times is None else _int(times, 1)
    if times is not None:  # isNeedDiscard
        if check_times >= check_max:
            return Judgement(Verdict.DISCARD)
        check_times += 1
    if now_ms - born_ms > reserved_ms:  # isNeedSkip
        return Judgement(Verdict.DISCARD)
    if store_ms >= start_ms:
        return Judgement(Verdict.STOP)  # "Fresh stored": a copy this run appended, or a message after it
    age = now_ms - born_ms
    immunity_text = props.get(mc.PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS)
    if immunity_text is not None:
        seconds = _int(immunity_text, -1)
        immunity = timeout_ms if seconds == -1 else seconds * 1000
        if age < immunity:  # checkPrepareQueueOffset
            prepared = _int(props.get(mc.PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET), -2)
            if prepared == -1:
                return Judgement(Verdict.CHECK, check_times)  # 4.9.8 goes on to the check
            if prepared in removed:
                return Judgement(Verdict.DONE_IMMUNE, op_offset=removed[prepared])
            return Judgement(Verdict.REAPPEND_IMMUNE)
    elif 0 <= age < timeout_ms:
        return Judgement(Verdict.STOP)  # "New arrived": younger than transactionTimeOut
    return Judgement(Verdict.CHECK, check_times)


# ---- I/O shell ------------------------------------------------------------------------------------------------
class CheckHooks(Protocol):
    """What the check service needs of the broker (called from the service's thread)."""

    def query_offset(self, topic: str, queue_id: int) -> int: ...

    def save_progress(self, offsets: list[tuple[str, int, int]]) -> None:
        """Commit (topic, queue id, offset) as CID_RMQ_SYS_TRANS's and return once consumerOffset.json holds
        them (or a few seconds passed)."""

    def check_producer(self, group: str, header: dict[str, str], body: bytes) -> None: ...

    def half_queue_ids(self) -> list[int]: ...


@dataclass
class CheckStats:
    runs: int = 0
    checked: int = 0
    discarded: int = 0
    reappended: int = 0
    last_run_ms: int = 0


class TransactionalMessageCheckService:
    def __init__(self, store: MessageStore, hooks: CheckHooks, interval_ms: int, timeout_ms: int, check_max: int,
                 *, now_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000) -> None:
        self.store = store
        self.hooks = hooks
        self.interval_ms = interval_ms
        self.timeout_ms = timeout_ms
        self.check_max = check_max
        self.now_ms = now_ms
        self.stats = CheckStats()
        self._offsets: dict[tuple[str, int], int] = {}  # what this service committed (ahead of the hook's table)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- life cycle ----------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="TransactionalMessageCheckService", daemon=True)
        self._thread.start()

    def shutdown(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_ms / 1000):
            try:
                self.check()
            except Exception:  # the service's loop: the next interval runs again
                log.exception("transaction check failed")

    # ---- one run -------------------------------------------------------------------------------------------
    def _fetch(self, topic: str, queue_id: int) -> int:
        """fetchConsumeOffset: the group's offset, else the queue's min offset."""
        offset = self._offsets.get((topic, queue_id))
        if offset is None:
            offset = self.hooks.query_offset(topic, queue_id)
        if offset < 0:
            offset = max(0, self.store.get_min_offset_in_queue(topic, queue_id))
        return offset

    def _read(self, topic: str, queue_id: int, offset: int) -> rec.MessageExt | None:
        store = self.store
        if offset >= store.get_max_offset_in_queue(topic, queue_id):
            return None
        phy = store.get_commit_log_offset_in_queue(topic, queue_id, offset)
        msg = store.look_message_by_offset(phy)
        if msg is not None and msg.queue_offset != offset:
            msg.queue_offset = offset  # a record read back has its own, but the unit is what was asked
        return msg

    def check(self) -> None:
        """TransactionalMessageServiceImpl.check: one run over every half queue.

        Unlike 4.9.8, the run's progress is on disk before its checks go out: a producer may commit a copy as
        soon as it is asked, and a crash that lost the progress would have the next run ask about the
        original too, and the producer commit it a second time (a duplicate delivery). The copies were put
        waiting as their half messages did, so under SYNC_FLUSH they are on disk before the progress passes
        their originals. Under ASYNC_FLUSH a power loss can take copies of the last run from the unflushed
        tail while its progress is on disk, and those transactions are not checked again — as in 4.9.8,
        which persists the progress every 5 s while an idle log is flushed every 10 s."""
        self.stats.runs += 1
        self.stats.last_run_ms = self.now_ms()
        # The ops and halves put before the run are in their queues before it reads them (unless dispatch is far
        # behind): it may otherwise be up to dispatchIdleIntervalMillis behind, and a half whose op is not
        # dispatched yet would be checked again.
        self.store.wait_dispatched(OPS_DISPATCH_WAIT_S)
        progress: list[tuple[str, int, int]] = []
        asks: list[tuple[str, dict[str, str], bytes]] = []
        for queue_id in self.hooks.half_queue_ids():
            self._check_queue(queue_id, progress, asks)
        if progress:
            for topic, queue_id, offset in progress:
                self._offsets[(topic, queue_id)] = offset
            self.hooks.save_progress(progress)
        for group, header, body in asks:
            self.hooks.check_producer(group, header, body)

    def _scan_ops(self, queue_id: int, op_offset: int, half_offset: int, start: float) -> OpScan:
        scan = OpScan(half_offset)
        offset = op_offset
        end = self.store.get_max_offset_in_queue(tx.OP_TOPIC, queue_id)
        while offset < end and time.monotonic() - start < MAX_QUEUE_PROCESS_TIME_MS / 1000:
            op = self._read(tx.OP_TOPIC, queue_id, offset)
            if op is None:
                scan.done.append(offset)  # an op that cannot be read (cleaned, damaged): nothing to wait for
            else:
                scan.feed(offset, op.tags, op.body)
            offset += 1
        return scan

    def _check_queue(self, queue_id: int, progress: list[tuple[str, int, int]],
                     asks: list[tuple[str, dict[str, str], bytes]]) -> None:
        start = time.monotonic()
        start_ms = self.now_ms()
        half_offset = self._fetch(tx.HALF_TOPIC, queue_id)
        op_offset = self._fetch(tx.OP_TOPIC, queue_id)
        scan = self._scan_ops(queue_id, op_offset, half_offset, start)
        reserved_ms = self.store.config.file_reserved_time_hours * 3600 * 1000
        i = half_offset
        max_offset = self.store.get_max_offset_in_queue(tx.HALF_TOPIC, queue_id)
        while i < max_offset and time.monotonic() - start < MAX_QUEUE_PROCESS_TIME_MS / 1000:
            if scan.removed.pop(i, None) is not None:
                i += 1
                continue
            msg = self._read(tx.HALF_TOPIC, queue_id, i)
            if msg is None:
                low = self.store.get_min_offset_in_queue(tx.HALF_TOPIC, queue_id)
                if i < low:  # cleaned away: go on from the queue's start
                    i = low
                    continue
                log.error("half message %d of queue %d cannot be read: skipped", i, queue_id)
                i += 1
                continue
            j = judge(msg.properties, msg.born_timestamp, msg.store_timestamp, self.now_ms(), start_ms,
                      self.timeout_ms, self.check_max, reserved_ms, scan.removed)
            if j.verdict is Verdict.STOP:
                break
            if j.verdict is Verdict.DONE_IMMUNE:
                scan.done.append(j.op_offset)
            elif j.verdict is Verdict.DISCARD:
                if not self._discard(msg):
                    break  # kept for the next run (4.9.8 moves past it, and the message is gone)
            elif j.verdict is Verdict.REAPPEND_IMMUNE:
                renewed = txb.renew_half(msg)
                if mc.PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET not in renewed.properties:
                    renewed.set_property(mc.PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET, str(i))
                if self._put_back(renewed) is None:
                    break
            else:
                msg.properties[mc.PROPERTY_TRANSACTION_CHECK_TIMES] = str(j.check_times)
                copy = self._put_back(txb.renew_half(msg))
                if copy is None:
                    break
                ask = self._ask(msg, *copy)
                if ask is not None:
                    asks.append(ask)
            i += 1
        if i != half_offset:
            progress.append((tx.HALF_TOPIC, queue_id, i))
        new_op = next_op_offset(scan.done, op_offset)
        if new_op != op_offset:
            progress.append((tx.OP_TOPIC, queue_id, new_op))

    def _put_back(self, inner: rec.MessageExtBrokerInner) -> tuple[int, int, str] | None:
        """putBackHalfMsgQueue: (queue offset, commit-log offset, offsetMsgId) of the new copy, None if refused."""
        result = self.store.put_message(inner)
        a = result.append
        if not result.status.is_stored or a is None:
            log.error("re-append of a half message refused: %s", result.status.name)
            return None
        self.stats.reappended += 1
        return a.logics_offset, a.wrote_offset, a.msg_id

    def _ask(self, msg: rec.MessageExt, queue_offset: int, commit_log_offset: int,
             offset_msg_id: str) -> tuple[str, dict[str, str], bytes] | None:
        """AbstractTransactionalMessageCheckListener.sendCheckMessage for the new copy: (group, header, body); the
        header names the copy, the body is the message with its real topic and queue."""
        group = msg.properties.get(mc.PROPERTY_PRODUCER_GROUP)
        try:
            topic, real_qid = txb.real_target(msg)
        except txb.UnusableHalfError as exc:
            log.error("cannot check: %s", exc)
            return None
        uniq = msg.properties.get(mc.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        header = tx.check_state_header(queue_offset, commit_log_offset, uniq, offset_msg_id)
        msg.topic, msg.queue_id = topic, real_qid
        msg.queue_offset, msg.commit_log_offset = queue_offset, commit_log_offset
        self.stats.checked += 1
        return (group, header, tx.encode_message(msg)) if group else None

    def _discard(self, msg: rec.MessageExt) -> bool:
        """DefaultTransactionalMessageCheckListener.resolveDiscardMsg; False when the store refused the put."""
        log.error("half message %s has been checked too many times (or is too old): moved to %s", msg.msg_id,
                  tx.CHECK_MAX_TIME_TOPIC)
        result = self.store.put_message(txb.discard_message(msg))
        if not result.status.is_stored:
            log.error("put of a discarded half message to %s failed: %s", tx.CHECK_MAX_TIME_TOPIC, result.status.name)
            return False
        self.stats.discarded += 1
        return True
