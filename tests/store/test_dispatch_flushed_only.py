"""dispatchFlushedOnly (an extension, off by default as 4.9.8 has no such key): dispatch reads the commit log
only up to the flushed offset, so no consumer can read a record that a power cut may still take. Off, dispatch
follows the written position (4.9.8's ReputMessageService)."""

from __future__ import annotations

import time

import pytest

from reference_broker.store.config import ROCKETMQ_KEYS, FlushDiskType, MessageStoreConfig, coerce_value
from tests.store.store_helpers import TOPIC, Stores, make_config, make_msg, put_ok, stores_fixture, wait_until

SLOW_FLUSH = {"flush_interval_commit_log_ms": 60_000, "flush_commit_log_thorough_interval_ms": 3_600_000,
              "mapped_file_size_commit_log": 64 * 1024}


@pytest.fixture
def stores():
    yield from stores_fixture()


def test_the_key_is_read_from_broker_conf_and_off_by_default() -> None:
    assert MessageStoreConfig().dispatch_flushed_only is False
    assert ROCKETMQ_KEYS["dispatchFlushedOnly"] == "dispatch_flushed_only"
    assert coerce_value("dispatch_flushed_only", "true") is True


def test_off_dispatch_follows_the_written_position_before_any_flush(stores: Stores, tmp_path) -> None:
    store = stores.open(make_config(tmp_path / "s", **SLOW_FLUSH))
    for i in range(3):
        put_ok(store, make_msg(f"m{i}"))
    wait_until(lambda: store.get_max_offset_in_queue(TOPIC, 0) == 3, what="dispatch of unflushed records")
    assert store.commit_log.flushed_where < store.get_max_phy_offset()


def test_on_nothing_unflushed_is_dispatched_and_a_flush_releases_it(stores: Stores, tmp_path) -> None:
    store = stores.open(make_config(tmp_path / "s", dispatch_flushed_only=True, **SLOW_FLUSH))
    for i in range(3):
        put_ok(store, make_msg(f"m{i}"))
    time.sleep(0.2)  # the dispatch thread looks every 1 ms: it has had time to read them if it would
    assert store.commit_log.flushed_where == 0
    assert store.get_max_offset_in_queue(TOPIC, 0) == 0
    store.commit_log.mapped_file_queue.flush(0)
    wait_until(lambda: store.get_max_offset_in_queue(TOPIC, 0) == 3, what="dispatch after the flush")
    assert store.reput.reput_from_offset == store.commit_log.flushed_where == store.get_max_phy_offset()


def test_on_under_sync_flush_every_acknowledged_put_is_dispatched(stores: Stores, tmp_path) -> None:
    store = stores.open(make_config(tmp_path / "s", dispatch_flushed_only=True,
                                    flush_disk_type=FlushDiskType.SYNC_FLUSH, mapped_file_size_commit_log=64 * 1024))
    for i in range(20):
        put_ok(store, make_msg(f"m{i}"))  # returns once flushed (GroupCommitService)
    wait_until(lambda: store.get_max_offset_in_queue(TOPIC, 0) == 20, what="dispatch of the flushed puts")
    assert store.reput.reput_from_offset <= store.commit_log.flushed_where
