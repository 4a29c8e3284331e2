"""FlushRealTimeService.run (CommitLog.FlushRealTimeService, 4.9.8): the async flush loop's two rules.

Each tick flushes only when at least flushCommitLogLeastPages (4) pages are dirty, counted as
``write/4096 - flushed/4096`` (MappedFile.isAbleToFlush); once flushCommitLogThoroughInterval (10 s) has
passed since the last thorough round, a tick flushes whatever is dirty (least pages 0).

The service runs on its real thread against a real commit log. Its clock is injected (``flush.time``) so
that "the thorough interval passes" is a step of the clock rather than a 10 s wait, and each tick is
observed through ``flush_once``, so nothing here waits for a fixed time.
"""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from reference_broker.common import record as rec
from reference_broker.store import flush as flush_module
from reference_broker.store.checkpoint import StoreCheckpoint
from reference_broker.store.commit_log import CommitLog
from reference_broker.store.config import MessageStoreConfig
from reference_broker.store.flush import FlushRealTimeService
from reference_broker.store.mapped_file import OS_PAGE_SIZE
from reference_broker.store.status import PutMessageStatus

FILE = 64 * 1024  # 16 pages: everything below stays in one file, so "the file is full" never applies
TOPIC = "T"
WAIT_S = 5.0


class Clock:
    """The flush service's wall clock, in ms; moved only by the test."""

    def __init__(self) -> None:
        self.ms = 1_700_000_000_000

    def time(self) -> float:
        return self.ms / 1000


class ObservedFlush(FlushRealTimeService):
    """The real service; each tick's flush_once is counted and its least-pages argument recorded."""

    def __init__(self, commit_log: CommitLog, checkpoint: StoreCheckpoint, config: MessageStoreConfig) -> None:
        super().__init__(commit_log, checkpoint, config)
        self.cond = threading.Condition()
        self.least: list[int] = []

    def flush_once(self, least_pages: int) -> None:
        super().flush_once(least_pages)
        with self.cond:
            self.least.append(least_pages)
            self.cond.notify_all()

    def ticks(self) -> int:
        with self.cond:
            return len(self.least)

    def wait_ticks(self, n: int) -> list[int]:
        """Wait for ``n`` more ticks; the least-pages values they used. With n >= 2 at least one whole tick
        ran after the call (the first may have been under way)."""
        with self.cond:
            target = len(self.least) + n
            assert self.cond.wait_for(lambda: len(self.least) >= target, WAIT_S), "the flush thread stopped ticking"
            return self.least[target - n : target]


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(flush_module, "time", types.SimpleNamespace(time=c.time, monotonic=time.monotonic,
                                                                    sleep=time.sleep))
    return c


@pytest.fixture
def service(tmp_path: Path, clock: Clock) -> Iterator[tuple[ObservedFlush, CommitLog]]:
    config = MessageStoreConfig(store_path_root_dir=tmp_path, mapped_file_size_commit_log=FILE,
                                flush_interval_commit_log_ms=2)
    # The rules under test use RocketMQ's defaults: 4 pages, a thorough round every 10 s.
    assert (config.flush_commit_log_least_pages, config.flush_commit_log_thorough_interval_ms) == (4, 10_000)
    checkpoint = StoreCheckpoint(tmp_path / "checkpoint")
    cl = CommitLog(config, checkpoint)
    svc = ObservedFlush(cl, checkpoint, config)
    svc.start()
    # lastFlushTimestamp starts at 0, so the first tick is a thorough one (with nothing to flush). Counted
    # from the start: on a loaded machine the thread may tick before this line runs.
    with svc.cond:
        assert svc.cond.wait_for(lambda: len(svc.least) >= 2, WAIT_S), "the flush thread stopped ticking"
    assert svc.least[0] == 0
    try:
        yield svc, cl
    finally:
        svc.shutdown()
        cl.shutdown()
        checkpoint.shutdown()


def put_to(cl: CommitLog, end: int) -> int:
    """Append one message whose record ends the log exactly at ``end``; returns ``end``."""
    start = cl.get_max_offset()
    props = rec.stored_props_length(b"", cl.append_prop_crc)
    body_len = end - start - rec.FIXED_PART_V4 - len(TOPIC) - props
    assert body_len >= 0
    body = b"x" * body_len
    r = cl.put_message(rec.MessageExtBrokerInner(TOPIC, body))
    assert r.status is PutMessageStatus.PUT_OK and r.append is not None
    assert cl.get_max_offset() == end
    return end


def dirty_pages(cl: CommitLog) -> int:
    return cl.get_max_offset() // OS_PAGE_SIZE - cl.flushed_where // OS_PAGE_SIZE


def test_fewer_than_least_pages_wait_and_four_are_flushed_at_the_next_tick(
        service: tuple[ObservedFlush, CommitLog]) -> None:
    svc, cl = service
    assert cl.flushed_where == 0

    put_to(cl, 4 * OS_PAGE_SIZE - 1)  # pages 0-3 touched, but 3 whole pages by RocketMQ's count
    assert dirty_pages(cl) == 3
    assert svc.wait_ticks(20) == [4] * 20  # the clock stands still: no thorough round
    assert cl.flushed_where == 0

    end = put_to(cl, 4 * OS_PAGE_SIZE + 200)
    assert dirty_pages(cl) == 4
    svc.wait_ticks(2)
    assert cl.flushed_where == end  # flushed by the least-pages rule (least was 4 on every tick)
    assert set(svc.least[1:]) == {4}
    assert svc.checkpoint.physic_msg_offset == end

    # Counted from the new flushed position: 3 more pages wait, the 4th flushes.
    put_to(cl, 7 * OS_PAGE_SIZE + 10)
    assert dirty_pages(cl) == 3
    svc.wait_ticks(10)
    assert cl.flushed_where == end
    end = put_to(cl, 8 * OS_PAGE_SIZE)
    assert dirty_pages(cl) == 4
    svc.wait_ticks(2)
    assert cl.flushed_where == end


def test_fewer_than_least_pages_are_flushed_once_the_thorough_interval_passes(
        service: tuple[ObservedFlush, CommitLog], clock: Clock) -> None:
    svc, cl = service
    end = put_to(cl, 2 * OS_PAGE_SIZE + 500)
    assert dirty_pages(cl) == 2

    svc.wait_ticks(10)
    assert cl.flushed_where == 0
    clock.ms += 10_000 - 1  # not yet: the last thorough round was 9,999 ms ago
    assert svc.wait_ticks(10) == [4] * 10
    assert cl.flushed_where == 0

    clock.ms += 1  # flushCommitLogThoroughInterval has passed: the next tick flushes with least pages 0
    ticks = svc.wait_ticks(2)
    assert 0 in ticks
    assert cl.flushed_where == end
    assert svc.checkpoint.physic_msg_offset == end

    # The thorough round restarts the 10 s: a single dirty page waits again.
    end2 = put_to(cl, end + 300)
    assert svc.wait_ticks(10) == [4] * 10
    assert cl.flushed_where == end
    clock.ms += 10_000
    svc.wait_ticks(2)
    assert cl.flushed_where == end2
