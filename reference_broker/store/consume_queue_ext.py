"""ConsumeQueueExt: the consume queue's extension file, with each message's store time and filter bit map
(RocketMQ 4.9.8 store/.../ConsumeQueueExt.java). Written only with ``enableConsumeQueueExt``.

Files: ``{storePathRootDir}/consumequeue_ext/{topic}/{queueId}/{offset}``, ``mappedFileSizeConsumeQueueExt``
bytes each (48 MiB). A unit (CqExtUnit), big-endian, 20 bytes + the bit map:

| @  | field        | bytes | notes                                                             |
|----|--------------|-------|-------------------------------------------------------------------|
| 0  | size         | 2     | the whole unit (MIN_EXT_UNIT_SIZE 20 + bitMapSize), at most 32767 |
| 2  | tagsCode     | 8     | what the consume-queue unit would have held                       |
| 10 | msgStoreTime | 8     | the message's store timestamp                                     |
| 18 | bitMapSize   | 2     | bytes of the bit map; 0 when the topic had no SQL92 filter        |
| 20 | filterBitMap | n     | BitsArray bytes: bit p is bit p % 8 of byte p // 8                |

A unit that does not fit in the rest of a file (keeping END_BLANK_DATA_LENGTH 4 bytes free) closes the file
with size -1 and goes to the next one. The consume-queue unit of a message with an ext unit holds the unit's
*address* in its tagsCode slot: ``offset + Long.MIN_VALUE``, always <= MAX_ADDR (Integer.MIN_VALUE - 1), so
no tags hash (a Java int) or delivery time can be taken for one.
"""

from __future__ import annotations

import logging
import struct
from pathlib import Path
from typing import Final, NamedTuple

from reference_broker.store.mapped_file_queue import MappedFileQueue

log = logging.getLogger(__name__)

END_BLANK_DATA_LENGTH: Final = 4
LONG_MIN: Final = -(1 << 63)
MAX_ADDR: Final = -(1 << 31) - 1  # Integer.MIN_VALUE - 1L
MAX_REAL_OFFSET: Final = MAX_ADDR - LONG_MIN
MIN_EXT_UNIT_SIZE: Final = 2 + 8 * 2 + 2
MAX_EXT_UNIT_SIZE: Final = 0x7FFF  # Short.MAX_VALUE
HEAD: Final = struct.Struct(">hqqh")
_SIZE: Final = struct.Struct(">h")
PUT_FAILED: Final = 1  # put's answer when the unit was not written (4.9.8 returns 1: not an address)


def is_ext_addr(address: int) -> bool:
    """isExtAddr: a tagsCode slot holding an ext address."""
    return address <= MAX_ADDR


def decorate(offset: int) -> int:
    return offset + LONG_MIN if not is_ext_addr(offset) else offset


def undecorate(address: int) -> int:
    return address - LONG_MIN if is_ext_addr(address) else address


class CqExtUnit(NamedTuple):
    tags_code: int
    msg_store_time: int
    filter_bit_map: bytes | None  # None when bitMapSize is 0 (getFilterBitMap)


def encode_unit(tags_code: int, msg_store_time: int, bit_map: bytes | None) -> bytes:
    n = len(bit_map) if bit_map else 0
    return HEAD.pack(MIN_EXT_UNIT_SIZE + n, tags_code, msg_store_time, n) + (bit_map or b"")


class ConsumeQueueExt:
    def __init__(self, topic: str, queue_id: int, store_path: Path, mapped_file_size: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.mapped_file_size = mapped_file_size
        self.mapped_file_queue = MappedFileQueue(store_path / topic / str(queue_id), mapped_file_size,
                                                 random_access=True)

    def load(self) -> bool:
        return self.mapped_file_queue.load()

    # ---- writes (the dispatch thread) ------------------------------------------------------------
    def put(self, tags_code: int, msg_store_time: int, bit_map: bytes | None) -> int:
        """Append a unit; its address (< 0), or PUT_FAILED (logged) — the caller then keeps the tags code."""
        unit = encode_unit(tags_code, msg_store_time, bit_map)
        size = len(unit)
        if size > MAX_EXT_UNIT_SIZE:
            log.error("Size of cq ext unit is greater than %d, %d", MAX_EXT_UNIT_SIZE, size)
            return PUT_FAILED
        mfq = self.mapped_file_queue
        if mfq.get_max_offset() + size > MAX_REAL_OFFSET:
            log.warning("Capacity of ext is maximum!%d, %d", mfq.get_max_offset(), size)
            return PUT_FAILED
        try:
            for _ in range(3):
                mf = mfq.last_file_for_write(0)
                pos = mf.wrote_position
                if size > self.mapped_file_size - pos - END_BLANK_DATA_LENGTH:
                    # fullFillToEnd: an end mark, and the file counts as full
                    mf.ensure_allocated(pos + 2)
                    _SIZE.pack_into(mf.buf, pos, -1)
                    mf.wrote_position = self.mapped_file_size
                    continue
                mf.ensure_allocated(pos + size)
                mf.buf[pos:pos + size] = unit
                mf.wrote_position = pos + size
                return decorate(mf.file_from_offset + pos)
        except OSError as exc:
            log.error("Save consume queue extend error, %s-%d: %s", self.topic, self.queue_id, exc)
        return PUT_FAILED

    def flush(self, least_pages: int) -> bool:
        return self.mapped_file_queue.flush(least_pages)

    # ---- reads ----------------------------------------------------------------------------------
    def get(self, address: int) -> CqExtUnit | None:
        """The unit at ``address``, or None (not an ext address, no such file, or no unit there)."""
        if not is_ext_addr(address):
            return None
        real = undecorate(address)
        mf = self.mapped_file_queue.find_mapped_file_by_offset(real, real == 0)
        if mf is None:
            return None
        pos = real % self.mapped_file_size
        end = mf.wrote_position
        if pos + MIN_EXT_UNIT_SIZE > end:
            return None
        size, tags_code, store_time, n = HEAD.unpack_from(mf.buf, pos)
        if size < MIN_EXT_UNIT_SIZE or n < 0 or pos + MIN_EXT_UNIT_SIZE + n > end:
            return None
        bits = bytes(mf.buf[pos + MIN_EXT_UNIT_SIZE:pos + MIN_EXT_UNIT_SIZE + n]) if n > 0 else None
        return CqExtUnit(tags_code, store_time, bits)

    def get_max_address(self) -> int:
        return decorate(self.mapped_file_queue.get_max_offset())

    def get_min_address(self) -> int:
        first = self.mapped_file_queue.get_first_mapped_file()
        return decorate(first.file_from_offset if first is not None else 0)

    # ---- recovery and cleaning ------------------------------------------------------------------
    def recover(self) -> None:
        """Walk the units by their sizes to where writing stopped (ConsumeQueueExt.recover); the consume queue
        then cuts what no unit of its own points to (``truncate_by_max_address``)."""
        files = self.mapped_file_queue.mapped_files
        if not files:
            return
        process = files[0].file_from_offset
        for mf in files:
            pos = 0
            while pos + 2 <= self.mapped_file_size:
                (size,) = _SIZE.unpack_from(mf.buf, pos)
                if size <= 0:
                    break
                pos += size
            mf.set_positions(min(pos, self.mapped_file_size))
            process = mf.file_from_offset + min(pos, self.mapped_file_size)
        self.mapped_file_queue.flushed_where = process
        self.mapped_file_queue.truncate_dirty_files(process)

    def truncate_by_max_address(self, max_address: int) -> None:
        """Drop the units after the one at ``max_address`` (the last a consume-queue unit points to)."""
        if not is_ext_addr(max_address):
            return
        unit = self.get(max_address)
        if unit is None:
            log.error("[BUG] address %d of consume queue extend not found!", max_address)
            return
        n = len(unit.filter_bit_map) if unit.filter_bit_map else 0
        self.mapped_file_queue.truncate_dirty_files(undecorate(max_address) + MIN_EXT_UNIT_SIZE + n)

    def truncate_all(self) -> None:
        """No consume-queue unit points here any more: every file goes."""
        self.mapped_file_queue.truncate_dirty_files(0)
        self.mapped_file_queue.flushed_where = 0

    def truncate_by_min_address(self, min_address: int) -> None:
        """Delete the files wholly before ``min_address`` (the first unit the consume queue still has)."""
        if not is_ext_addr(min_address):
            return
        real = undecorate(min_address)
        mfq = self.mapped_file_queue
        gone = [mf for mf in mfq.mapped_files if mf.file_from_offset + self.mapped_file_size < real]
        mfq._remove([mf for mf in gone if mf.destroy(1000)])

    def destroy(self) -> None:
        self.mapped_file_queue.destroy()

    def shutdown(self) -> None:
        self.mapped_file_queue.shutdown(0)
