"""PendingPut and the durability conditions: ready at once, or once every waiter completed; a failed
condition sets the put's status (the later condition's failure wins, as CommitLog.asyncPutMessage's
thenCombine applies them)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from reference_broker.store.config import FlushDiskType, MessageStoreConfig
from reference_broker.store.durability import (
    FlushCondition,
    PendingPut,
    Waiter,
    _AllWaiters,
    _OneWaiter,
    submit_all,
)
from reference_broker.store.flush import GroupCommitRequest, GroupCommitService
from reference_broker.store.service_thread import ServiceThread
from reference_broker.store.status import AppendMessageResult, AppendMessageStatus, PutMessageResult, PutMessageStatus

OK = PutMessageStatus.PUT_OK


def appended(offset: int = 100, size: int = 50) -> PutMessageResult:
    return PutMessageResult(OK, AppendMessageResult(AppendMessageStatus.PUT_OK, offset, size))


class Condition:
    """A condition whose waiters the test completes by hand."""

    def __init__(self, name: str, timeout_ms: int = 60_000) -> None:
        self.name = name
        self.timeout_ms = timeout_ms
        self.waiters: list[GroupCommitRequest] = []

    def submit(self, append: AppendMessageResult, wait_store_ok: bool) -> Waiter | None:
        if not wait_store_ok:
            return None
        req = GroupCommitRequest(append.wrote_offset + append.wrote_bytes, self.timeout_ms)
        self.waiters.append(req)
        return req


def collect(put: PendingPut) -> list[PutMessageResult]:
    out: list[PutMessageResult] = []
    put.add_done_callback(out.append)
    return out


def test_no_waiter_is_done_at_once() -> None:
    result = appended()
    put = submit_all([Condition("a")], result, wait_store_ok=False)
    assert put.done
    assert put.result is result
    assert collect(put) == [result]
    assert put.wait() is result


def test_a_refused_put_submits_nothing() -> None:
    cond = Condition("a")
    refused = PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, None, "no")
    put = submit_all([cond], refused, wait_store_ok=True)
    assert put.done and put.result is refused
    assert cond.waiters == []


def test_done_once_every_waiter_completed_and_callbacks_run_once() -> None:
    a, b = Condition("a"), Condition("b")
    result = appended()
    put = submit_all([a, b], result, wait_store_ok=True)
    got = collect(put)
    assert not put.done and got == []
    a.waiters[0].complete(OK)
    assert not put.done and got == []
    b.waiters[0].complete(OK)
    b.waiters[0].complete(PutMessageStatus.FLUSH_DISK_TIMEOUT)  # a late second completion is ignored
    assert put.done
    assert got == [result]
    assert put.result.status is OK


def test_the_later_failed_condition_sets_the_status_and_the_append_is_kept() -> None:
    flush, replica = Condition("flush"), Condition("replica")
    result = appended()
    put = submit_all([flush, replica], result, wait_store_ok=True)
    got = collect(put)
    replica.waiters[0].complete(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
    flush.waiters[0].complete(PutMessageStatus.FLUSH_DISK_TIMEOUT)
    assert got[0].status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
    assert got[0].append is result.append
    assert put.wait() == got[0]


def test_wait_blocks_until_another_thread_completes() -> None:
    cond = Condition("flush")
    put = submit_all([cond], appended(), wait_store_ok=True)
    timer = threading.Timer(0.05, lambda: cond.waiters[0].complete(PutMessageStatus.FLUSH_DISK_TIMEOUT))
    timer.start()
    assert put.wait().status is PutMessageStatus.FLUSH_DISK_TIMEOUT
    timer.join(5)


def test_wait_ends_at_the_waiters_own_deadline() -> None:
    put = submit_all([Condition("flush", timeout_ms=30)], appended(), wait_store_ok=True)  # nobody completes it
    assert put.wait().status is PutMessageStatus.FLUSH_DISK_TIMEOUT


def test_callbacks_run_on_the_completing_thread() -> None:
    cond = Condition("flush")
    put = submit_all([cond], appended(), wait_store_ok=True)
    threads: list[str] = []
    put.add_done_callback(lambda _r: threads.append(threading.current_thread().name))
    t = threading.Thread(target=lambda: cond.waiters[0].complete(OK), name="completer")
    t.start()
    t.join(5)
    assert threads == ["completer"]


# ---- FlushCondition (CommitLog.handleDiskFlush) -------------------------------------------------------

class Recorder(ServiceThread):
    """A flush or commit service that is never started: counts wake-ups."""

    def __init__(self) -> None:
        super().__init__("Recorder")
        self.wakeups = 0

    def wakeup(self) -> None:
        self.wakeups += 1


class FakeGroupCommit(GroupCommitService):
    def __init__(self) -> None:  # never started, holds no commit log
        ServiceThread.__init__(self, "FakeGroupCommit")
        self.wakeups = 0
        self.requests: list[GroupCommitRequest] = []

    def wakeup(self) -> None:
        self.wakeups += 1

    def put_request(self, req: GroupCommitRequest) -> None:
        self.requests.append(req)


def config(tmp_path: Path, **kw: Any) -> MessageStoreConfig:
    return MessageStoreConfig(store_path_root_dir=tmp_path, **kw)


def submit(cond: FlushCondition, wait: bool) -> Waiter | None:
    append = appended(1000, 24).append
    assert append is not None
    return cond.submit(append, wait)


def test_sync_flush_hands_the_end_offset_to_the_group_commit(tmp_path: Path) -> None:
    gc = FakeGroupCommit()
    cond = FlushCondition(config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH), gc, None)
    w = submit(cond, True)
    assert isinstance(w, GroupCommitRequest) and gc.requests == [w]
    assert w.next_offset == 1024


def test_sync_flush_without_wait_only_wakes_the_service(tmp_path: Path) -> None:
    gc = FakeGroupCommit()
    cond = FlushCondition(config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH), gc, None)
    assert submit(cond, False) is None
    assert gc.requests == [] and gc.wakeups == 1


def test_async_flush_wakes_the_flusher_unless_timed_and_never_waits(tmp_path: Path) -> None:
    flusher = Recorder()
    assert submit(FlushCondition(config(tmp_path, flush_commit_log_timed=False), flusher, None), True) is None
    assert flusher.wakeups == 1
    timed = Recorder()
    assert submit(FlushCondition(config(tmp_path, flush_commit_log_timed=True), timed, None), True) is None
    assert timed.wakeups == 0


def test_async_flush_with_the_pool_wakes_the_commit_thread(tmp_path: Path) -> None:
    flusher, committer = Recorder(), Recorder()
    cfg = config(tmp_path, flush_commit_log_timed=False)
    assert submit(FlushCondition(cfg, flusher, committer), True) is None
    assert (flusher.wakeups, committer.wakeups) == (0, 1)


def _cycles_of(types: tuple[type, ...], make: Callable[[], None]) -> list[object]:
    """Objects of ``types`` that only the cyclic collector could free once ``make`` returned."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        make()
        gc.collect()
        return [o for o in gc.garbage if isinstance(o, types)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


@pytest.mark.parametrize("conditions", [1, 2])
def test_a_completed_waiting_put_is_freed_by_reference_counting(conditions: int) -> None:
    """A put that waited (SYNC_FLUSH's group commit; with replication too) and whose callback ran leaves no
    reference cycle: the request drops its callbacks once it has run them (each kept list made a cycle
    through the put, ~17 objects a send for the cyclic collector)."""

    def one_put() -> None:
        conds = [Condition(f"c{i}") for i in range(conditions)]
        put = submit_all(conds, appended(), wait_store_ok=True)
        got = collect(put)
        for c in conds:
            c.waiters[0].complete(OK)
        assert [r.status for r in got] == [OK]

    assert _cycles_of((GroupCommitRequest, _OneWaiter, _AllWaiters), one_put) == []
