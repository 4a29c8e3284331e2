"""When a put may answer: its durability conditions, and the pending put that waits for them.

RocketMQ 4.9.8's CommitLog.asyncPutMessage appends, then asks each durability step for a future —
``submitFlushRequest`` (handleDiskFlush: the group commit under SYNC_FLUSH) and ``submitReplicaRequest``
(handleHA: the slave's acknowledgement under SYNC_MASTER) — and answers once both complete, a failed step
setting the put's status (the later step's failure wins, as thenCombine applies them in that order).

Here each step is a ``DurabilityCondition`` in one list the store owns; a put gets a ``PendingPut`` that is
done at once when no condition has anything to wait for (ASYNC_FLUSH, or a message sent with
``WAIT=false``), else once every waiter completed. The flush is the first condition; under SYNC_MASTER
replication is the second (store/ha/replica.py), on the same put path.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from reference_broker.store.config import MessageStoreConfig
from reference_broker.store.flush import GroupCommitRequest, GroupCommitService
from reference_broker.store.service_thread import ServiceThread
from reference_broker.store.status import AppendMessageResult, PutMessageResult, PutMessageStatus

log = logging.getLogger(__name__)


class Waiter(Protocol):
    """One condition's wait for one put (GroupCommitRequest is one): completes exactly once, with a status."""

    def done(self) -> bool: ...

    def add_done_callback(self, cb: Callable[[PutMessageStatus], None]) -> None: ...

    def wait(self) -> PutMessageStatus:
        """Block until completed, or until the waiter's own deadline (then its timeout status)."""
        ...


class DurabilityCondition(Protocol):
    name: str

    def submit(self, append: AppendMessageResult, wait_store_ok: bool) -> Waiter | None:
        """Start what makes ``append`` durable under this condition; the waiter to await, or None when the
        put need not wait (the condition holds already, or the message does not wait: ``WAIT=false``)."""
        ...


class FlushCondition:
    """CommitLog.handleDiskFlush: under SYNC_FLUSH a put that waits hands its end offset to the group commit
    (GroupCommitService) and completes with PUT_OK once flushed, or FLUSH_DISK_TIMEOUT at syncFlushTimeout
    (FlushDiskWatcher) — stored either way; a put that does not wait only wakes the service. Under ASYNC_FLUSH
    the put wakes the commit thread (transient store pool) or, unless the flush is timed, the flusher."""

    name = "flush"

    def __init__(self, config: MessageStoreConfig, flush_service: ServiceThread,
                 commit_service: ServiceThread | None) -> None:
        self.config = config
        self.flush_service = flush_service
        self.commit_service = commit_service
        # The store runs the group commit exactly when the flush is SYNC_FLUSH.
        self.group_commit = flush_service if isinstance(flush_service, GroupCommitService) else None

    def submit(self, append: AppendMessageResult, wait_store_ok: bool) -> Waiter | None:
        gc = self.group_commit
        if gc is not None:
            if not wait_store_ok:
                gc.wakeup()
                return None
            req = GroupCommitRequest(append.wrote_offset + append.wrote_bytes, self.config.sync_flush_timeout_ms)
            gc.put_request(req)
            return req
        if self.commit_service is not None:
            self.commit_service.wakeup()  # with the pool, puts wake the commit thread
        elif not self.config.flush_commit_log_timed:
            self.flush_service.wakeup()
        return None


class PendingPut(Protocol):
    """A put's result: ``done`` at once (a ``PutMessageResult`` is its own completed put), or once every
    condition's waiter completed.

    ``add_done_callback`` runs its callback at once when done, else on the thread that completes the last
    waiter (the group-commit or watcher thread): no thread waits per put. ``wait()`` blocks instead.
    """

    @property
    def done(self) -> bool: ...

    @property
    def result(self) -> PutMessageResult:
        """Final once ``done``: the append's result, its status replaced by a failed condition's."""
        ...

    def add_done_callback(self, cb: Callable[[PutMessageResult], None]) -> None: ...

    def wait(self) -> PutMessageResult:
        """Block until every waiter completed or passed its own deadline (then its timeout status)."""
        ...


def _failed(result: PutMessageResult, name: str, status: PutMessageStatus, log_it: bool) -> PutMessageResult:
    append = result.append
    if log_it:
        log.error("put at commit-log offset %d: wait for %s failed: %s",
                  append.wrote_offset if append else -1, name, status.name)
    return PutMessageResult(status, append, result.remark)


class _OneWaiter:
    """The put of one waiting condition (SYNC_FLUSH's group commit, or replication under ASYNC_FLUSH): the waiter's
    completion maps straight to the result, on the completing thread, with no lock or callback of its own
    unless someone asks for a callback. The common SYNC_FLUSH put takes this path."""

    __slots__ = ("_appended", "_final", "_name", "_waiter")

    def __init__(self, appended: PutMessageResult, waiter: Waiter, name: str) -> None:
        self._appended = appended
        self._waiter = waiter
        self._name = name
        self._final: PutMessageResult | None = None

    def _outcome(self, status: PutMessageStatus) -> PutMessageResult:
        final = self._final
        if final is None:
            ok = status is PutMessageStatus.PUT_OK
            final = self._appended if ok else _failed(self._appended, self._name, status, True)
            self._final = final  # two threads may both compute it: the same value, logged twice at worst
        return final

    @property
    def done(self) -> bool:
        return self._waiter.done()

    @property
    def result(self) -> PutMessageResult:
        return self._outcome(self._waiter.wait()) if self._waiter.done() else self._appended

    def add_done_callback(self, cb: Callable[[PutMessageResult], None]) -> None:
        outcome = self._outcome
        self._waiter.add_done_callback(lambda status: cb(outcome(status)))

    def wait(self) -> PutMessageResult:
        return self._outcome(self._waiter.wait())


_LOCK = threading.Lock()  # the few puts that wait for more than one condition


class _AllWaiters:
    """The put of several waiting conditions (flush and replication): done once the last one completed."""

    __slots__ = ("_callbacks", "_left", "_names", "_waiters", "result")

    def __init__(self, result: PutMessageResult, waiters: Sequence[Waiter], names: Sequence[str]) -> None:
        self.result = result  # final once done: a failed condition replaces it
        self._waiters = waiters
        self._names = names
        self._left = len(waiters)
        self._callbacks: list[Callable[[PutMessageResult], None]] | None = None
        for w in waiters:
            w.add_done_callback(self._one_done)

    @property
    def done(self) -> bool:
        return self._left == 0

    def _one_done(self, _status: PutMessageStatus) -> None:
        with _LOCK:
            left = self._left - 1
            if left:
                self._left = left
                return
            # Every waiter has completed, so wait() returns its status at once. The result is final before
            # ``done`` turns true: the loop thread reads both without the lock.
            self.result = self._combined([w.wait() for w in self._waiters], True)
            self._left = 0
            callbacks, self._callbacks = self._callbacks, None
        if callbacks:
            for cb in callbacks:
                cb(self.result)

    def _combined(self, statuses: list[PutMessageStatus], log_failure: bool) -> PutMessageResult:
        """The append's result, its status replaced by each failed condition in list order."""
        result = self.result
        for name, status in zip(self._names, statuses, strict=True):
            if status is not PutMessageStatus.PUT_OK:
                result = _failed(result, name, status, log_failure)
        return result

    def add_done_callback(self, cb: Callable[[PutMessageResult], None]) -> None:
        with _LOCK:
            if self._left:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(cb)
                return
        cb(self.result)

    def wait(self) -> PutMessageResult:
        statuses = [w.wait() for w in self._waiters]
        with _LOCK:
            if self._left:  # the completing thread has not combined yet: the statuses are final all the same
                return self._combined(statuses, False)  # logged by the completing thread
            return self.result


def submit_all(conditions: Sequence[DurabilityCondition], result: PutMessageResult,
               wait_store_ok: bool) -> PendingPut:
    """The pending put of an append: every condition submitted, in list order. With nothing to wait for
    (ASYNC_FLUSH, ``WAIT=false``, a refused put) it is the result itself."""
    append = result.append
    if result.status is not PutMessageStatus.PUT_OK or append is None:
        return result
    if len(conditions) == 1:  # every store but a SYNC_MASTER's (the flush alone): no lists per put
        cond = conditions[0]
        w = cond.submit(append, wait_store_ok)
        return result if w is None else _OneWaiter(result, w, cond.name)
    waiters: list[Waiter] = []
    names: list[str] = []
    for cond in conditions:
        w = cond.submit(append, wait_store_ok)
        if w is not None:
            waiters.append(w)
            names.append(cond.name)
    if not waiters:
        return result
    if len(waiters) == 1:
        return _OneWaiter(result, waiters[0], names[0])
    return _AllWaiters(result, waiters, names)
