"""StoreCheckpoint (RocketMQ's StoreCheckpointTest, 4.9.8): one page, three big-endian longs."""

from __future__ import annotations

import struct
from pathlib import Path

from reference_broker.store.checkpoint import PAGE, StoreCheckpoint


def test_three_timestamps_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    cp = StoreCheckpoint(path)
    assert not cp.loaded and not cp.is_valid()
    cp.physic_msg_timestamp = 0xAABB
    cp.logics_msg_timestamp = 0xCCDD
    cp.index_msg_timestamp = 1_700_000_000_123
    cp.flush()
    assert path.stat().st_size == PAGE == 4096
    assert struct.unpack_from(">qqq", path.read_bytes(), 0) == (0xAABB, 0xCCDD, 1_700_000_000_123)
    cp.shutdown()
    cp.shutdown()  # idempotent

    again = StoreCheckpoint(path)
    try:
        assert again.loaded and again.is_valid()
        assert (again.physic_msg_timestamp, again.logics_msg_timestamp, again.index_msg_timestamp) == (
            0xAABB, 0xCCDD, 1_700_000_000_123)
    finally:
        again.shutdown()


def test_shutdown_writes_without_explicit_flush(tmp_path: Path) -> None:
    cp = StoreCheckpoint(tmp_path / "checkpoint")
    cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp = 1, 2, 3
    cp.shutdown()
    again = StoreCheckpoint(tmp_path / "checkpoint")
    try:
        assert (again.physic_msg_timestamp, again.logics_msg_timestamp, again.index_msg_timestamp) == (1, 2, 3)
    finally:
        again.shutdown()


def test_values_not_flushed_are_not_on_disk(tmp_path: Path) -> None:
    cp = StoreCheckpoint(tmp_path / "checkpoint")
    cp.physic_msg_timestamp = 5
    cp.flush()
    cp.physic_msg_timestamp = 6  # in memory only
    assert struct.unpack_from(">q", (tmp_path / "checkpoint").read_bytes(), 0)[0] == 5
    cp.shutdown()


def test_min_timestamp_is_min_minus_3000(tmp_path: Path) -> None:
    cp = StoreCheckpoint(tmp_path / "checkpoint")
    try:
        cp.physic_msg_timestamp = 0xAABB
        cp.logics_msg_timestamp = 0xCCDD
        assert cp.physic_msg_timestamp - cp.get_min_timestamp() == 3000
        cp.physic_msg_timestamp, cp.logics_msg_timestamp = 0xCCDD, 0xAABB  # min of the two, either way
        assert cp.get_min_timestamp() == 0xAABB - 3000
    finally:
        cp.shutdown()


def test_min_timestamp_never_below_zero(tmp_path: Path) -> None:
    cp = StoreCheckpoint(tmp_path / "checkpoint")
    try:
        assert cp.get_min_timestamp() == 0
        cp.physic_msg_timestamp, cp.logics_msg_timestamp = 1000, 100_000
        assert cp.get_min_timestamp() == 0
        cp.physic_msg_timestamp = 3001
        assert cp.get_min_timestamp() == 1
    finally:
        cp.shutdown()


def test_min_timestamp_index(tmp_path: Path) -> None:
    cp = StoreCheckpoint(tmp_path / "checkpoint")
    try:
        cp.physic_msg_timestamp = cp.logics_msg_timestamp = 10_000
        cp.index_msg_timestamp = 5_000
        assert cp.get_min_timestamp_index() == 5_000
        cp.index_msg_timestamp = 9_000
        assert cp.get_min_timestamp_index() == 7_000  # min(getMinTimestamp(), index)
    finally:
        cp.shutdown()


def test_short_existing_file_is_extended_to_a_page(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "checkpoint"
    path.parent.mkdir()
    path.write_bytes(struct.pack(">qqq", 7, 8, 9))
    cp = StoreCheckpoint(path)
    try:
        assert cp.loaded and (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp) == (7, 8, 9)
        assert path.stat().st_size == PAGE
    finally:
        cp.shutdown()
