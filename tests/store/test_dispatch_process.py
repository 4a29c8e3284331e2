"""dispatchInSeparateProcess: the store with its dispatch in a real child process (store/dispatchd.py).

The child writes the same consume queues and index as the dispatch thread (byte for byte), cleans them when the
commit log's files go (and lets go of those files), reports its flushes into the broker's checkpoint, and the
combinations it cannot serve are refused with the key to blame. (test_message_store.py runs the store's
behaviour tests in both modes; tests/broker/test_dispatch_process_e2e.py kills the processes.)
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reference_broker.broker.broker_config import BrokerConfError, load_broker_conf
from reference_broker.store.config import BrokerRole
from reference_broker.store.dispatchd import Dispatchd
from reference_broker.store.message_store import MessageStore
from tests.store.store_helpers import (
    CQ_UNITS_PER_FILE,
    TOPIC,
    Stores,
    make_config,
    make_msg,
    put_ok,
    stores_fixture,
    wait_dispatched,
)

QUEUES = 3


@pytest.fixture
def stores() -> Iterator[Stores]:
    yield from stores_fixture()


def _fill(store: MessageStore, n: int) -> None:
    for i in range(n):
        put_ok(store, make_msg(f"body-{i}", queue_id=i % QUEUES, keys=f"key-{i % 40}", uniq_key=f"U{i:06d}"))
    wait_dispatched(store)


def _queue_bytes(root: Path) -> dict[str, bytes]:
    base = root / "consumequeue"
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}


def test_the_process_writes_what_the_thread_writes(tmp_path: Path, stores: Stores) -> None:
    n = 3 * QUEUES * CQ_UNITS_PER_FILE + 17  # several consume-queue files per queue, many commit-log files
    now = int(time.time() * 1000) + 60_000
    answers = {}
    for mode in ("thread", "process"):
        root = tmp_path / mode
        store = stores.open(make_config(root, mapped_file_size_commit_log=16 * 1024,
                                        dispatch_in_separate_process=mode == "process"))
        _fill(store, n)
        assert store.get_max_offset_in_queue(TOPIC, 1) == len(range(1, n, QUEUES))
        answers[mode] = [sorted(m.queue_offset for m in store.query_message(TOPIC, f"key-{k}", 64, 0, now))
                         for k in range(40)]
        store.shutdown()
        assert store.shutdown_normally
    assert answers["process"] == answers["thread"]
    assert sum(map(len, answers["process"])) == min(n, 40 * 64)
    thread_q, process_q = _queue_bytes(tmp_path / "thread"), _queue_bytes(tmp_path / "process")
    assert len(process_q) >= 3 * QUEUES
    assert process_q == thread_q  # the same units, the same files


def test_shutdown_writes_the_processes_flushed_state_into_the_checkpoint(tmp_path: Path, stores: Stores) -> None:
    store = stores.open(make_config(tmp_path, dispatch_in_separate_process=True))
    _fill(store, 100)
    end = store.get_max_phy_offset()
    store.shutdown()
    cp = store.checkpoint
    assert cp.logics_msg_offset == end  # every unit below the log's end is on disk, and the checkpoint says so
    assert cp.logics_msg_timestamp > 0
    assert cp.index_safe_point is not None and cp.index_safe_point.covered_offset == end
    again = stores.open(make_config(tmp_path))  # the dispatch thread takes over where the process left off
    assert again.get_max_offset_in_queue(TOPIC, 0) == 34
    assert [m.body for m in again.query_message(TOPIC, "key-3", 64, 0, int(time.time() * 1000))] == [
        b"body-3", b"body-43", b"body-83"]


def _deleted_commit_log_maps(pid: int) -> list[str]:
    with open(f"/proc/{pid}/maps") as f:
        return [line for line in f if "commitlog" in line and "(deleted)" in line]


def test_cleaning_runs_in_the_process_and_it_lets_go_of_deleted_files(tmp_path: Path, stores: Stores) -> None:
    store = stores.open(make_config(tmp_path, dispatch_in_separate_process=True))
    assert store.link is not None
    _fill(store, 3 * CQ_UNITS_PER_FILE + 5)  # queue 0 spans two consume-queue files; the log 1 KiB files
    pid = store.link.pid
    files = sorted(store.config.store_path_commit_log.iterdir())
    old = time.time() - (store.config.file_reserved_time_hours + 1) * 3600
    for p in files[: len(files) // 2]:
        os.utime(p, (old, old))
    store.clean_commit_log.used_ratio = lambda _path: 0.1  # type: ignore[method-assign]
    store.execute_delete_files_manually()
    store.clean_files()
    min_phy = store.get_min_phy_offset()
    assert min_phy > 0
    assert _deleted_commit_log_maps(pid) == []  # the child unmapped what the broker deleted
    cq = store.find_consume_queue(TOPIC, 0, create=False)
    assert cq is not None
    first = store.get_min_offset_in_queue(TOPIC, 0)
    assert first > 0  # the child moved the queue's min past the deleted records, and the view follows it
    unit = cq.get_unit(first)
    assert unit is not None and unit[0] >= min_phy
    assert len(list(cq.mapped_file_queue.iter_files())) == len(list(
        (store.config.store_path_consume_queue / TOPIC / "0").iterdir()))
    _fill(store, 10)  # the child is still there and dispatching
    assert store.link.pid == pid and store.link.restarts == 0


@pytest.mark.parametrize(("overrides", "blamed"), [
    ({"broker_role": BrokerRole.SLAVE}, "brokerRole"),
    ({"enable_consume_queue_ext": True}, "enableConsumeQueueExt"),
    ({"transient_store_pool_enable": True}, "transientStorePoolEnable"),
    ({"dispatch_flushed_only": True}, "dispatchFlushedOnly"),
])
def test_combinations_the_process_cannot_serve_are_refused(tmp_path: Path, overrides: dict[str, object],
                                                           blamed: str) -> None:
    with pytest.raises(ValueError, match=f"dispatchInSeparateProcess cannot be used with {blamed}"):
        MessageStore(make_config(tmp_path, dispatch_in_separate_process=True, **overrides))
    assert not (tmp_path / "dispatch.shm").exists()


def test_a_broker_conf_that_combines_them_names_its_line(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=b\ndispatchInSeparateProcess=true\nbrokerId=1\nbrokerRole=SLAVE\n")
    with pytest.raises(BrokerConfError, match=r"broker.conf:4: brokerRole: cannot be used with "
                                              r"dispatchInSeparateProcess=true: a slave"):
        load_broker_conf(conf)
    conf.write_text("dispatchInSeparateProcess=true\n")
    _broker, store = load_broker_conf(conf)
    assert store.dispatch_in_separate_process


def test_the_process_forces_every_file_it_takes_over(tmp_path: Path, stores: Stores,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """What the broker's recovery wrote may be only in the page cache when the child maps it, and the child's
    positions take it as flushed: unless the child forces every queue and index file once, a later safe point
    claims index entries that a power loss then takes (a 10-cycle power-loss run found two zero entries)."""
    store = stores.open(make_config(tmp_path))  # the thread writes queues and index files
    _fill(store, 2 * QUEUES * CQ_UNITS_PER_FILE)  # two consume-queue files per queue
    store.shutdown()
    synced: list[str] = []
    real = os.fdatasync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fdatasync", spy)
    control_r, control_w = os.pipe()
    events_r, events_w = os.pipe()
    try:
        child = Dispatchd(make_config(tmp_path, dispatch_in_separate_process=True), control_r, events_w, 0)
        assert child.load()
    finally:
        for fd in (control_r, control_w, events_r, events_w):
            os.close(fd)
    files = [str(p) for p in (tmp_path / "consumequeue").rglob("*") if p.is_file()] + [
        str(p) for p in (tmp_path / "index").iterdir()]
    assert len(files) > 2 * QUEUES
    assert sorted(set(synced)) == sorted(files)


def test_a_read_after_shutdown_does_not_touch_the_unmapped_page(tmp_path: Path, stores: Stores) -> None:
    store = stores.open(make_config(tmp_path, dispatch_in_separate_process=True))
    _fill(store, 5)
    store.shutdown()
    assert store.link is not None
    store.link.nudge()  # a pull that arrives while the broker stops reads, finds nothing and nudges
    store.link.publish(10**9)
    assert store.get_message("G", TOPIC, 0, 99, 32).status is not None
