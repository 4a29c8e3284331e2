"""This module owns a push consumer's per-queue buffer of pulled, not yet consumed messages (ProcessQueue,
4.9.8). Sans-IO apart from its locks; the clock is passed in.

Messages are kept by queue offset (Java's TreeMap; here a dict plus min- and max-heaps with lazy deletion),
so the offset to commit after a concurrent consume is the smallest offset still buffered, or one past the
largest offset ever buffered when none is left (removeMessage). An orderly consumer instead takes the
lowest offsets out (takeMessages), and on success commits one past the last one it took (commit), or puts
them back to be consumed again (makeMessageToConsumeAgain).

Flags read by the other threads: ``dropped`` (the queue was reassigned; stop pulling and consuming it),
``locked`` (an orderly consumer holds the broker lock), ``consuming`` (an orderly consume task is queued or
running, so put_messages does not start another).
"""

from __future__ import annotations

import heapq
import threading
import time
from typing import Final

from reference_broker.common import message as mc
from reference_broker.common.record import MessageExt

REBALANCE_LOCK_MAX_LIVE_TIME_S: Final = 30.0  # rocketmq.client.rebalance.lockMaxLiveTime 30000
REBALANCE_LOCK_INTERVAL_S: Final = 20.0  # rocketmq.client.rebalance.lockInterval 20000
PULL_MAX_IDLE_TIME_S: Final = 120.0  # rocketmq.client.pull.pullMaxIdleTime 120000


class ProcessQueue:
    def __init__(self) -> None:
        self._lock = threading.RLock()  # treeMapLock
        self._msgs: dict[int, MessageExt] = {}
        self._low: list[int] = []  # min-heap of offsets; stale entries are skipped
        self._high: list[int] = []  # max-heap (negated offsets)
        self._consuming_orderly: dict[int, MessageExt] = {}  # consumingMsgOrderlyTreeMap
        self.consume_lock = threading.Lock()  # lockConsume: held while an orderly listener runs
        self.msg_count = 0
        self.msg_size = 0
        self.queue_offset_max = 0
        self.msg_acc_cnt = 0  # backlog behind the last pulled message (MAX_OFFSET - its offset)
        self.dropped = False
        self.locked = False
        self.consuming = False
        self.try_unlock_times = 0
        now = time.monotonic()
        self.last_pull_ts = now
        self.last_consume_ts = now
        self.last_lock_ts = now

    # ---- both modes ---------------------------------------------------------------------------

    def put_messages(self, msgs: list[MessageExt]) -> bool:
        """putMessage; True when the caller should start a consume task (an orderly queue that was idle)."""
        with self._lock:
            added = 0
            for msg in msgs:
                offset = msg.queue_offset
                if offset in self._msgs:
                    continue
                self._msgs[offset] = msg
                heapq.heappush(self._low, offset)
                heapq.heappush(self._high, -offset)
                added += 1
                self.queue_offset_max = offset
                self.msg_size += len(msg.body)
            self.msg_count += added
            dispatch = False
            if self._msgs and not self.consuming:
                dispatch = True
                self.consuming = True
            if msgs:
                raw = msgs[-1].properties.get(mc.PROPERTY_MAX_OFFSET)
                if raw is not None:
                    acc = int(raw) - msgs[-1].queue_offset
                    if acc > 0:
                        self.msg_acc_cnt = acc
            return dispatch

    def _first(self) -> int | None:
        low, msgs = self._low, self._msgs
        while low and low[0] not in msgs:
            heapq.heappop(low)
        return low[0] if low else None

    def _last(self) -> int | None:
        high, msgs = self._high, self._msgs
        while high and -high[0] not in msgs:
            heapq.heappop(high)
        return -high[0] if high else None

    def max_span(self) -> int:
        """getMaxSpan: last buffered offset minus the first (0 when empty)."""
        with self._lock:
            first, last = self._first(), self._last()
            return 0 if first is None or last is None else last - first

    @property
    def msg_size_mib(self) -> int:
        # Whole MiB, as pullMessage's getMsgSize() / (1024 * 1024): a 100 MiB threshold pauses at 101 MiB.
        return self.msg_size // (1024 * 1024)

    def is_empty(self) -> bool:
        return not self._msgs

    def offsets(self) -> list[int]:
        with self._lock:
            return sorted(self._msgs)

    # ---- concurrent consumption -----------------------------------------------------------------

    def remove_messages(self, msgs: list[MessageExt], now: float | None = None) -> int:
        """removeMessage: drop consumed messages; the offset safe to commit, or -1 if nothing was buffered."""
        with self._lock:
            self.last_consume_ts = time.monotonic() if now is None else now
            if not self._msgs:
                return -1
            result = self.queue_offset_max + 1
            removed = 0
            for msg in msgs:
                if self._msgs.pop(msg.queue_offset, None) is not None:
                    removed += 1
                    self.msg_size -= len(msg.body)
            self.msg_count -= removed
            first = self._first()
            return first if first is not None else result

    # ---- orderly consumption ------------------------------------------------------------------

    def take_messages(self, batch_size: int) -> list[MessageExt]:
        """takeMessages: the lowest ``batch_size`` offsets move to the consuming set; none left clears
        ``consuming``."""
        with self._lock:
            self.last_consume_ts = time.monotonic()
            taken: list[MessageExt] = []
            while len(taken) < batch_size:
                first = self._first()
                if first is None:
                    break
                heapq.heappop(self._low)
                msg = self._msgs.pop(first)
                self._consuming_orderly[first] = msg
                taken.append(msg)
            if not taken:
                self.consuming = False
            return taken

    def commit(self) -> int:
        """The offset after the last message taken (-1 if none); the taken messages are done."""
        with self._lock:
            if not self._consuming_orderly:
                return -1
            last = max(self._consuming_orderly)
            self.msg_count -= len(self._consuming_orderly)
            self.msg_size -= sum(len(m.body) for m in self._consuming_orderly.values())
            self._consuming_orderly.clear()
            return last + 1

    def make_messages_to_consume_again(self, msgs: list[MessageExt]) -> None:
        """makeMessageToConsumeAgain: back into the buffer, to be taken first next time."""
        with self._lock:
            for msg in msgs:
                offset = msg.queue_offset
                self._consuming_orderly.pop(offset, None)
                self._msgs[offset] = msg
                heapq.heappush(self._low, offset)
                heapq.heappush(self._high, -offset)

    def rollback(self) -> None:
        with self._lock:
            self.make_messages_to_consume_again(list(self._consuming_orderly.values()))

    def has_temp_message(self) -> bool:
        return bool(self._msgs)

    # ---- liveness ---------------------------------------------------------------------------

    def is_lock_expired(self, now: float | None = None) -> bool:
        return (time.monotonic() if now is None else now) - self.last_lock_ts > REBALANCE_LOCK_MAX_LIVE_TIME_S

    def is_pull_expired(self, now: float | None = None) -> bool:
        return (time.monotonic() if now is None else now) - self.last_pull_ts > PULL_MAX_IDLE_TIME_S

    def clear(self) -> None:
        with self._lock:
            self._msgs.clear()
            self._low.clear()
            self._high.clear()
            self._consuming_orderly.clear()
            self.msg_count = 0
            self.msg_size = 0
            self.queue_offset_max = 0
