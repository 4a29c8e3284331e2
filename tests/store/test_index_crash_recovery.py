"""After an abnormal exit every message in the recovered log is found by key, by UNIQ_KEY and by offset.

A forked child writes keyed messages, takes a thorough queue flush (the checkpoint moves: offset-based
recovery will start there) and exits with ``os._exit`` — no shutdown, so ``abort`` stays and the page
cache holds everything, as after a kill -9. The parent recovers the store and looks every message up.
Before the index safe point, the index file being written was destroyed on load and the replay from the
checkpoint never rebuilt the entries before it: messages before the checkpoint were not found by key.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from reference_broker.common import record as rec
from reference_broker.store.config import MessageStoreConfig
from reference_broker.store.index_format import HEADER_SIZE, INDEX_SIZE
from tests.store.store_helpers import TOPIC, Stores, make_config, make_msg, put_ok, stores_fixture, wait_dispatched

HUGE = 2**63 - 1
N = 300


@pytest.fixture
def stores() -> Iterator[Stores]:
    yield from stores_fixture()


def config(root: Path) -> MessageStoreConfig:
    # 64 KiB commit-log files (several of them), an index with room for every key in one file.
    return make_config(root, mapped_file_size_commit_log=64 << 10, max_hash_slot_num=64, max_index_num=2000)


def _child(cfg: MessageStoreConfig, before: int, after: int, first: int) -> None:
    store = Stores().open(cfg)
    for i in range(first, first + before + after):
        if i == first + before:
            wait_dispatched(store)
            # A commit-log flush and a thorough queue round: the checkpoint's offsets (and the index safe
            # point) move here, so recovery replays from here on.
            mfq = store.commit_log.mapped_file_queue
            while not mfq.flush(0):
                pass
            store.checkpoint.note_physic_offset(mfq.flushed_where)
            store.flush_cq_service.do_flush(0)
            assert store.checkpoint.get_recover_offset() > 0
        put_ok(store, make_msg(f"body{i}", keys=f"key{i} alt{i}", uniq_key=f"UNIQ{i:08d}"))
    wait_dispatched(store)
    os._exit(0)


def crash_after_writing(cfg: MessageStoreConfig, before: int, after: int, first: int = 0) -> None:
    """Messages ``first ..``: ``before`` of them, a thorough flush round, ``after`` more; then a crash."""
    ctx = multiprocessing.get_context("fork")
    p = ctx.Process(target=_child, args=(cfg, before, after, first))
    p.start()
    p.join(120)
    assert p.exitcode == 0
    assert (cfg.store_path_root_dir / "abort").exists()


def assert_all_found(store_root_cfg: MessageStoreConfig, stores: Stores, n: int) -> None:
    store = stores.open(store_root_cfg)
    missing_key, missing_uniq, missing_offset = [], [], []
    for i in range(n):
        by_key = store.query_message(TOPIC, f"key{i}", 32, 0, HUGE)
        if [m.body for m in by_key] != [f"body{i}".encode()]:
            missing_key.append(i)
        by_uniq = store.query_message(TOPIC, f"UNIQ{i:08d}", 32, 0, HUGE)
        if len(by_uniq) != 1:
            missing_uniq.append(i)
            continue
        m = store.look_message_by_offset(by_uniq[0].commit_log_offset)
        if m is None or m.body != f"body{i}".encode():
            missing_offset.append(i)
    assert (missing_key, missing_uniq, missing_offset) == ([], [], [])
    # And the index keeps working for messages written after recovery.
    put_ok(store, make_msg("after", keys="later", uniq_key="UNIQLATER"))
    wait_dispatched(store)
    assert [m.body for m in store.query_message(TOPIC, "later", 32, 0, HUGE)] == [b"after"]


def test_kill_after_a_checkpoint_keeps_every_message_findable(tmp_path: Path, stores: Stores) -> None:
    cfg = config(tmp_path)
    crash_after_writing(cfg, before=200, after=100)
    assert_all_found(cfg, stores, N)


def test_two_crashes_in_a_row_keep_every_message_findable(tmp_path: Path, stores: Stores) -> None:
    cfg = config(tmp_path)
    crash_after_writing(cfg, before=200, after=100)
    crash_after_writing(cfg, before=0, after=50, first=N)  # recovers, writes 50 more, crashes again
    assert_all_found(cfg, stores, N + 50)


def test_power_loss_of_unflushed_index_pages_keeps_every_message_findable(tmp_path: Path, stores: Stores) -> None:
    """After a power loss the index pages written since the safe point may be lost: zero the entries."""
    cfg = config(tmp_path)
    crash_after_writing(cfg, before=200, after=100)
    (index_path,) = sorted((tmp_path / "index").iterdir())
    entries_at = HEADER_SIZE + cfg.max_hash_slot_num * 4
    with open(index_path, "r+b") as f:
        # The first 200 messages' 3 keys each (entries 1..600) were flushed by the safe point.
        f.seek(entries_at + 601 * INDEX_SIZE)
        f.write(bytes(300 * INDEX_SIZE))
    assert_all_found(cfg, stores, N)


def test_clean_restart_keeps_every_message_findable(tmp_path: Path, stores: Stores) -> None:
    cfg = config(tmp_path)
    store = stores.open(cfg)
    for i in range(N):
        put_ok(store, make_msg(f"body{i}", keys=f"key{i} alt{i}", uniq_key=f"UNIQ{i:08d}"))
    wait_dispatched(store)
    stores.opened.remove(store)
    store.shutdown()
    assert store.shutdown_normally
    assert_all_found(cfg, stores, N)


def test_message_id_lookup_after_a_crash(tmp_path: Path, stores: Stores) -> None:
    cfg = config(tmp_path)
    crash_after_writing(cfg, before=50, after=10)
    store = stores.open(cfg)
    for i in (3, 55):
        (m,) = store.query_message(TOPIC, f"UNIQ{i:08d}", 32, 0, HUGE)
        again = store.look_message_by_msg_id(rec.create_message_id(b"\x7f\x00\x00\x01", 10911, m.commit_log_offset))
        assert again is not None and again.body == f"body{i}".encode()


def _child_index_ahead_of_log(cfg: MessageStoreConfig) -> None:
    store = Stores().open(cfg)
    mfq = store.commit_log.mapped_file_queue
    for i in range(150):
        if i == 100:
            wait_dispatched(store)
            while not mfq.flush(0):
                pass
            store.checkpoint.note_physic_offset(mfq.flushed_where)
            (cfg.store_path_root_dir / "durable").write_text(str(mfq.flushed_where))
        put_ok(store, make_msg(f"body{i}", keys=f"key{i}", uniq_key=f"UNIQ{i:08d}"))
    wait_dispatched(store)
    store.flush_cq_service.do_flush(0)  # the index safe point covers all 150; the log is durable for 100 only
    os._exit(0)


def test_index_entries_of_records_a_power_loss_took_are_dropped(tmp_path: Path, stores: Stores) -> None:
    """ASYNC_FLUSH: the index was forced past the durable log. After the power loss recovery ends the log
    earlier; the index must drop those entries, or new records there would never be indexed (build_index
    skips offsets below the index's end)."""
    cfg = config(tmp_path)
    ctx = multiprocessing.get_context("fork")
    p = ctx.Process(target=_child_index_ahead_of_log, args=(cfg,))
    p.start()
    p.join(120)
    assert p.exitcode == 0
    durable = int((tmp_path / "durable").read_text())
    # The power loss: everything past the durable offset never reached the disk.
    file_size = cfg.mapped_file_size_commit_log
    for f in sorted((tmp_path / "commitlog").iterdir()):
        start = int(f.name)
        if start + file_size <= durable:
            continue
        with open(f, "r+b") as fh:
            cut = max(0, durable - start)
            fh.seek(cut)
            fh.write(bytes(file_size - cut))
    store = stores.open(cfg)
    assert store.get_max_phy_offset() == durable
    for i in range(100):
        assert len(store.query_message(TOPIC, f"key{i}", 32, 0, HUGE)) == 1, i
    for i in range(100, 150):
        assert store.query_message(TOPIC, f"key{i}", 32, 0, HUGE) == [], i
    for i in range(20):
        put_ok(store, make_msg(f"new{i}", keys=f"new{i}", uniq_key=f"NEWUNIQ{i:08d}"))
    wait_dispatched(store)
    for i in range(20):
        assert [m.body for m in store.query_message(TOPIC, f"new{i}", 32, 0, HUGE)] == [f"new{i}".encode()], i
