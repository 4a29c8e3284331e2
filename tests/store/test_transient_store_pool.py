"""transientStorePoolEnable: records are staged in memory and committed into the commit log by a thread.

RocketMQ 4.9.8 (TransientStorePool, MappedFile.commit, CommitLog.CommitRealTimeService): with the pool,
only an ASYNC_FLUSH master writes through it; readers see a record once it is committed, and a kill -9
loses whatever was staged but not yet committed (the page cache keeps only committed bytes).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reference_broker.store.config import BrokerRole, FlushDiskType, MessageStoreConfig
from reference_broker.store.mapped_file import MappedFile
from reference_broker.store.mapped_file_queue import MappedFileQueue
from reference_broker.store.status import GetMessageStatus
from tests.store.store_helpers import TOPIC, Stores, make_config, make_msg, put_ok, stores_fixture, wait_until

REPO = Path(__file__).resolve().parents[2]
NEVER_MS = 3_600_000  # a commit interval that no test outlives: nothing is committed unless asked


@pytest.fixture
def stores() -> Iterator[Stores]:
    yield from stores_fixture()


def pool_config(root: Path, **overrides: object) -> MessageStoreConfig:
    return make_config(root, mapped_file_size_commit_log=64 * 1024, transient_store_pool_enable=True, **overrides)


# ---- the rule: ASYNC_FLUSH masters only ------------------------------------------------------------

@pytest.mark.parametrize(("flush", "role", "expected"), [
    (FlushDiskType.ASYNC_FLUSH, BrokerRole.ASYNC_MASTER, True),
    (FlushDiskType.ASYNC_FLUSH, BrokerRole.SYNC_MASTER, True),
    (FlushDiskType.SYNC_FLUSH, BrokerRole.ASYNC_MASTER, False),
    (FlushDiskType.ASYNC_FLUSH, BrokerRole.SLAVE, False),
])
def test_pool_is_used_only_by_async_flush_masters(tmp_path: Path, flush: FlushDiskType, role: BrokerRole,
                                                  expected: bool) -> None:
    config = pool_config(tmp_path, flush_disk_type=flush, broker_role=role)
    assert config.is_transient_store_pool_enable() is expected
    assert MessageStoreConfig(transient_store_pool_enable=False).is_transient_store_pool_enable() is False


def test_sync_flush_ignores_the_pool(stores: Stores, tmp_path: Path) -> None:
    store = stores.open(pool_config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH))
    assert store.commit_service is None
    put_ok(store, make_msg("synced"))  # returns once flushed: through the mapping, no commit step
    assert store.commit_log.get_max_offset() > 0
    wait_until(lambda: store.get_message("G", TOPIC, 0, 0, 32).status is GetMessageStatus.FOUND,
               what="dispatch")


# ---- MappedFile / MappedFileQueue ----------------------------------------------------------------

def test_staged_bytes_reach_the_file_only_when_committed(tmp_path: Path) -> None:
    mf = MappedFile(tmp_path / f"{0:020d}", 4 * 4096)
    try:
        mf.enable_staging()
        assert mf.stage is not None and mf.write_position == 0
        mf.wbuf[0:5] = b"hello"
        mf.staged_position = 5
        assert bytes(mf.buf[0:5]) == bytes(5)  # the mapping (the file) has nothing yet
        assert mf.wrote_position == 0  # nor does a reader
        assert mf.commit(4) == 0  # fewer than 4 pages pending: not yet
        assert mf.commit(0) == 5
        assert bytes(mf.buf[0:5]) == b"hello" and mf.wrote_position == 5
        assert (tmp_path / f"{0:020d}").read_bytes()[:5] == b"hello"
        mf.wbuf[5:mf.file_size] = b"x" * (mf.file_size - 5)
        mf.staged_position = mf.file_size
        assert mf.commit(4) == mf.file_size  # a full file is committed whatever is pending
        assert mf.stage is None and mf.wbuf is mf.buf  # and its buffer is given back
    finally:
        mf.shutdown(0)


def test_queue_commits_older_files_before_newer_ones(tmp_path: Path) -> None:
    q = MappedFileQueue(tmp_path, 4096)
    q.staging = True
    try:
        first = q.last_file_for_write()
        first.wbuf[:] = b"a" * 4096
        first.staged_position = 4096
        second = q.last_file_for_write()  # the writer moved on before anything was committed
        assert second is not first and second.stage is not None
        second.wbuf[0:10] = b"b" * 10
        second.staged_position = 10
        assert q.get_max_offset() == 4096  # the reader's end: the second file's committed position
        assert q.staged_behind() == 4096 + 10
        assert q.commit(0) is False
        assert bytes(first.buf[:]) == b"a" * 4096 and bytes(second.buf[0:10]) == b"b" * 10
        assert q.get_max_offset() == 4096 + 10 and q.staged_behind() == 0
        assert q.commit(0) is True  # nothing left
    finally:
        q.shutdown(0)


# ---- the store ---------------------------------------------------------------------------------

def test_a_put_is_readable_once_committed(stores: Stores, tmp_path: Path) -> None:
    store = stores.open(pool_config(tmp_path, commit_interval_commit_log_ms=NEVER_MS,
                                    commit_commit_log_least_pages=1 << 20,
                                    commit_commit_log_thorough_interval_ms=NEVER_MS))
    put_ok(store, make_msg("staged"))
    assert store.get_message("G", TOPIC, 0, 0, 32).status is not GetMessageStatus.FOUND
    assert store.commit_log.get_max_offset() == 0
    assert store.commit_log.mapped_file_queue.commit(0) is False
    wait_until(lambda: store.get_message("G", TOPIC, 0, 0, 32).status is GetMessageStatus.FOUND,
               what="the committed message to be dispatched")


def test_the_commit_thread_commits_within_its_interval(stores: Stores, tmp_path: Path) -> None:
    store = stores.open(pool_config(tmp_path))  # 200 ms, as in RocketMQ
    for i in range(20):
        put_ok(store, make_msg(f"m{i}"))
    wait_until(lambda: store.get_max_offset_in_queue(TOPIC, 0) == 20, timeout_s=5,
               what="the commit thread to commit and dispatch")
    assert store.commit_log.mapped_file_queue.staged_behind() == 0


def test_shutdown_commits_what_is_staged(stores: Stores, tmp_path: Path) -> None:
    config = pool_config(tmp_path, commit_interval_commit_log_ms=NEVER_MS, commit_commit_log_least_pages=1 << 20,
                         commit_commit_log_thorough_interval_ms=NEVER_MS)
    store = stores.open(config)
    for i in range(100):  # several 64 KiB files' worth of rolls are not needed: 100 small records
        put_ok(store, make_msg(f"m{i}"))
    store.shutdown()
    assert store.shutdown_normally
    again = stores.open(config)
    assert again.get_max_offset_in_queue(TOPIC, 0) == 100
    res = again.get_message("G", TOPIC, 0, 0, 32)
    assert res.status is GetMessageStatus.FOUND and len(res.messages) == 32


_WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from tests.store.store_helpers import make_config, make_msg, new_store, put_ok
    root, interval = Path(sys.argv[1]), int(sys.argv[2])
    store = new_store(make_config(root, mapped_file_size_commit_log=64 * 1024, transient_store_pool_enable=True,
                                  commit_interval_commit_log_ms=interval, commit_commit_log_least_pages=1 << 20,
                                  commit_commit_log_thorough_interval_ms=interval))
    assert store.load()
    store.start()
    for i in range(50):
        put_ok(store, make_msg(f"m{i}"))
    print("acked", flush=True)
    time.sleep(3600)
""")


@pytest.mark.e2e
@pytest.mark.parametrize(("interval_ms", "survivors"), [(NEVER_MS, 0), (20, 50)])
def test_kill9_loses_what_was_staged_and_keeps_what_was_committed(stores: Stores, tmp_path: Path, interval_ms: int,
                                                                   survivors: int) -> None:
    """The pool's known trade-off: acknowledged ASYNC_FLUSH sends live in process memory until committed."""
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path), str(interval_ms)],
                            stdout=subprocess.PIPE, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"acked"
        if survivors:
            wait_until(lambda: _committed_bytes(tmp_path) > 0, what="the writer's commit")
            time.sleep(10 * interval_ms / 1000)  # a few more commit rounds
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
    store = stores.open(pool_config(tmp_path))
    assert not store.last_exit_ok
    assert store.get_max_offset_in_queue(TOPIC, 0) == survivors


def _committed_bytes(root: Path) -> int:
    files = sorted((root / "commitlog").glob("*"))
    if not files:
        return 0
    data = files[-1].read_bytes()
    return len(data.rstrip(b"\0"))
