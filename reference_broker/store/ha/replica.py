"""Replication as a durability condition: a SYNC_MASTER put waits for a slave's acknowledgement.

RocketMQ 4.9.8: CommitLog.submitReplicaRequest (handleHA) and HAService's bookkeeping — push2SlaveMaxOffset,
isSlaveOK, notifyTransferSome, GroupTransferService, and the WaitNotifyObject that wakes the senders.

- Only under SYNC_MASTER, and only for a put that waits (``WAIT`` is not false): others answer at once.
- No slave connected, or the slave more than haSlaveFallbehindMax behind the put: SLAVE_NOT_AVAILABLE at once.
- Else a request for the put's end offset, completed with PUT_OK once a slave acknowledged that offset
  (push2SlaveMaxOffset ≥ end: one report releases every put it covers, on the thread that brought it), or
  FLUSH_SLAVE_TIMEOUT after slaveTimeout (the GroupTransferService thread). The message stays stored on the
  master in every case.

The sockets that carry reports and frames live a layer up (reference_broker/ha); they call ``ReplicaState``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from reference_broker.store.config import MessageStoreConfig
from reference_broker.store.flush import GroupCommitRequest
from reference_broker.store.service_thread import ServiceThread
from reference_broker.store.status import AppendMessageResult, PutMessageStatus

log = logging.getLogger(__name__)


class ReplicaRequest(GroupCommitRequest):
    """A put waiting for a slave's acknowledgement of ``next_offset``."""

    __slots__ = ()
    timeout_status = PutMessageStatus.FLUSH_SLAVE_TIMEOUT


class WaitNotify:
    """WaitNotifyObject.allWaitForRunning / wakeupAll: the master's senders sleep until a put that waits for
    replication wakes them (else they look for new bytes every 100 ms).

    A sender takes ``generation()`` before it looks for new bytes and waits only while it is unchanged, so a
    put between its look and its wait is not lost. ``wakeup_all`` runs on every SYNC_MASTER put: it raises the
    generation and takes the lock only when a sender is waiting (a busy sender is not)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._generation = 0
        self._waiting = 0
        self._defer: Callable[[Callable[[], None]], bool] | None = None

    def defer_with(self, defer: Callable[[Callable[[], None]], bool]) -> None:
        """``defer(wake)`` is asked first on every wake-up: True when it took the wake-up over (runs ``wake`` later
        itself). The broker's HA service defers the wake-ups of its event loop's thread to the end of the loop's
        turn, so the puts of one read of requests go to the slave as one frame, not one each as the sender wakes
        in the middle of them (deliberately unlike 4.9.8, whose sender is woken per put)."""
        self._defer = defer

    def generation(self) -> int:
        return self._generation

    def wait(self, timeout_s: float, seen: int | None = None) -> None:
        with self._cond:
            # Counted before the generation is compared: a waker that raised it after the comparison sees
            # the count and notifies (the notify waits for this lock, which wait_for releases).
            self._waiting += 1
            try:
                gen = self._generation if seen is None else seen
                self._cond.wait_for(lambda: self._generation != gen, timeout_s)
            finally:
                self._waiting -= 1

    def wakeup_all(self) -> None:
        defer = self._defer
        if defer is None or not defer(self._wake_now):
            self._wake_now()

    def _wake_now(self) -> None:
        self._generation += 1  # two wakers may both write g + 1: still a change for every waiter
        if self._waiting:
            with self._cond:
                self._cond.notify_all()


class GroupTransferService(ServiceThread):
    """Completes replica requests as the slaves' acknowledgements arrive (HAService.GroupTransferService).

    Deliberate difference from 4.9.8 (whose thread is woken by every put and every acknowledgement and then
    completes the requests): the requests are completed by the thread that brings the acknowledgement
    (``release``, called from notify_transfer_some): one report releases, in one batch, every waiting put it
    covers, with no hand-off to another thread. The requests wait in offset order (puts append in order), so
    a release looks only at the front. This thread only times requests out after slaveTimeout: it sleeps
    until the oldest deadline (at most ``TIMEOUT_CHECK_S``), and no put wakes it."""

    TIMEOUT_CHECK_S = 0.1

    def __init__(self, state: ReplicaState) -> None:
        super().__init__("GroupTransferService")
        self.state = state
        self._lock = threading.Lock()
        self._waiting: deque[ReplicaRequest] = deque()

    def put_request(self, req: ReplicaRequest) -> None:
        with self._lock:
            stopped = self.is_stopped
            covered = self.state.push2slave_max_offset >= req.next_offset  # acknowledged before it got here
            if not stopped and not covered:
                waiting = self._waiting
                if not waiting or waiting[-1].next_offset <= req.next_offset:
                    waiting.append(req)
                else:  # a put from another thread that appended earlier but got here later: keep the order
                    i = len(waiting)
                    while i and waiting[i - 1].next_offset > req.next_offset:
                        i -= 1
                    waiting.insert(i, req)
                return
        # Completed outside the lock: its callback may hand the answer on.
        req.complete(PutMessageStatus.PUT_OK if covered else PutMessageStatus.FLUSH_SLAVE_TIMEOUT)

    def release(self, offset: int) -> None:
        """Complete every waiting request whose end a slave acknowledged (``offset`` = push2SlaveMaxOffset)."""
        waiting = self._waiting  # one deque for the service's life: only ever changed in place, under the lock
        try:
            if waiting[0].next_offset > offset:  # nothing covered: no lock
                return
        except IndexError:  # nothing waits (or the last one just left)
            return
        done: list[ReplicaRequest] = []
        with self._lock:
            while waiting and waiting[0].next_offset <= offset:
                done.append(waiting.popleft())
        for req in done:
            req.complete(PutMessageStatus.PUT_OK)

    def _time_out(self, now: float, final: bool = False) -> float:
        """Complete the requests past their deadline (all of them when ``final``); the time to the next one."""
        expired: list[ReplicaRequest] = []
        with self._lock:
            waiting = self._waiting
            if final:
                expired = list(waiting)
                waiting.clear()
            elif any(r.deadline <= now for r in waiting):
                expired = [r for r in waiting if r.deadline <= now]
                kept = [r for r in waiting if r.deadline > now]
                waiting.clear()
                waiting.extend(kept)
            nxt = min((r.deadline for r in waiting), default=now + self.TIMEOUT_CHECK_S) - now
        push = self.state.push2slave_max_offset
        for req in expired:  # an acknowledgement that came with the deadline still counts
            req.complete(PutMessageStatus.PUT_OK if push >= req.next_offset else PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        return nxt

    def run(self) -> None:
        while not self.is_stopped:
            # A deadline is met within a few ms (4.9.8 looks once a second).
            nxt = self._time_out(time.monotonic())
            self.sleep(min(max(nxt, 0.001), self.TIMEOUT_CHECK_S))
        self._time_out(time.monotonic(), final=True)  # nothing will acknowledge them now

    def make_stop(self) -> None:
        with self._lock:
            super().make_stop()


class ReplicaState:
    """What the put path needs to know of the slaves: how many are connected and the highest offset any of
    them acknowledged (push2SlaveMaxOffset). Updated by the HA connections (reference_broker/ha)."""

    def __init__(self, config: MessageStoreConfig) -> None:
        self.config = config
        self.push2slave_max_offset = 0
        self.connection_count = 0
        self._lock = threading.Lock()
        self.senders = WaitNotify()
        self.group_transfer = GroupTransferService(self)

    def is_slave_ok(self, master_put_where: int) -> bool:
        """HAService.isSlaveOK: a slave is connected and less than haSlaveFallbehindMax behind."""
        return (self.connection_count > 0
                and master_put_where - self.push2slave_max_offset < self.config.ha_slave_fallbehind_max)

    def notify_transfer_some(self, offset: int) -> None:
        """A slave acknowledged ``offset`` (HAService.notifyTransferSome): raise push2SlaveMaxOffset and
        release the puts it covers, on the caller's thread (the HA reader). Never lowered: a slower slave's
        report says nothing about the others."""
        with self._lock:
            if offset <= self.push2slave_max_offset:
                return
            self.push2slave_max_offset = offset
        self.group_transfer.release(offset)

    def add_connection(self) -> None:
        with self._lock:
            self.connection_count += 1

    def remove_connection(self) -> None:
        with self._lock:
            self.connection_count -= 1


def _completed(status: PutMessageStatus) -> ReplicaRequest:
    req = ReplicaRequest(0, 0)
    req.complete(status)
    return req


class ReplicationCondition:
    """The second durability condition (CommitLog.submitReplicaRequest), after the flush; SYNC_MASTER only."""

    name = "replication"

    def __init__(self, config: MessageStoreConfig, state: ReplicaState) -> None:
        self.config = config
        self.state = state

    def submit(self, append: AppendMessageResult, wait_store_ok: bool) -> ReplicaRequest | None:
        if not wait_store_ok:
            return None
        end = append.wrote_offset + append.wrote_bytes
        if not self.state.is_slave_ok(end):
            return _completed(PutMessageStatus.SLAVE_NOT_AVAILABLE)
        req = ReplicaRequest(end, self.config.slave_timeout_ms)
        self.state.group_transfer.put_request(req)
        self.state.senders.wakeup_all()  # the connections send the new bytes now, not at their next look
        return req
