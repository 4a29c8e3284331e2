"""The checkpoint page: RocketMQ's three timestamps at 0, our offsets at 40 and the index safe point at 64."""

from __future__ import annotations

import struct

import pytest

from reference_broker.common import checkpoint_layout as layout
from reference_broker.common.checkpoint_layout import CheckpointFields, IndexSafePoint

SP = IndexSafePoint(20240101000000000, 4096, 1, 2, 100, 990, 7, 101)
FIELDS = CheckpointFields(0xAABB, 0xCCDD, 1_700_000_000_123, 8192, 4096, SP)


def test_byte_positions() -> None:
    page = layout.pack(FIELDS)
    assert len(page) == layout.PAGE == 4096
    assert struct.unpack_from(">qqq", page, 0) == (0xAABB, 0xCCDD, 1_700_000_000_123)  # RocketMQ's
    assert page[24:40] == bytes(16)  # 5.x's masterFlushedOffset, confirmPhyOffset: unused
    assert struct.unpack_from(">qq", page, 40) == (8192, 4096)
    assert page[56:64] == bytes(8)
    assert struct.unpack_from(">qqqqqqii", page, 64) == (20240101000000000, 4096, 1, 2, 100, 990, 7, 101)
    assert layout.LAYOUT_END == 120 and page[120:] == bytes(4096 - 120)


def test_round_trip_and_rocketmq_names() -> None:
    assert layout.unpack(layout.pack(FIELDS)) == FIELDS
    assert FIELDS.rocketmq_names() == {"physicMsgTimestamp": 0xAABB, "logicsMsgTimestamp": 0xCCDD,
                                       "indexMsgTimestamp": 1_700_000_000_123, "physicMsgOffset": 8192,
                                       "logicsMsgOffset": 4096}


def test_a_rocketmq_checkpoint_has_no_offsets_and_no_safe_point() -> None:
    page = struct.pack(">qqq", 5, 6, 7).ljust(layout.PAGE, b"\0")
    assert layout.unpack(page) == CheckpointFields(5, 6, 7)


@pytest.mark.parametrize("sp", [IndexSafePoint(0, 10), IndexSafePoint(5, -1), IndexSafePoint(5, 10, index_count=0)])
def test_an_implausible_safe_point_reads_as_unknown(sp: IndexSafePoint) -> None:
    assert layout.unpack(layout.pack(CheckpointFields(1, 2, 3, index_safe_point=sp))).index_safe_point is None


def test_pack_into_writes_only_the_fields() -> None:
    """As StoreCheckpoint.flush always has: the unused bytes of a page keep whatever they hold."""
    page = bytearray(b"\xff" * layout.PAGE)
    layout.pack_into(page, CheckpointFields())
    assert page[0:24] == bytes(24) and page[40:56] == bytes(16) and page[64:120] == bytes(56)
    assert page[24:40] == b"\xff" * 16 and page[56:64] == b"\xff" * 8 and page[120:] == b"\xff" * 3976


def test_short_buffer_is_refused() -> None:
    with pytest.raises(ValueError, match="120 bytes"):
        layout.unpack(bytes(119))
