"""ConsumeQueue: the per topic-queue index of commit-log positions.

Unit format (ConsumeQueue.java, 4.9.8, CQ_STORE_UNIT_SIZE = 20), big-endian:

| @  | field            | bytes | notes                                                    |
|----|------------------|-------|----------------------------------------------------------|
| 0  | commitLogOffset  | 8     | physical offset of the record                            |
| 8  | size             | 4     | record size                                              |
| 12 | tagsCode         | 8     | Java String.hashCode of TAGS; delivery time for delays   |

A unit's logical offset is ``(file_from_offset + pos) / 20``. A queue whose first file starts past
offset 0 is pre-filled with blank units ``(0, Integer.MAX_VALUE, 0)`` (fillPreBlank).

With ``enableConsumeQueueExt`` each queue has an extension (consume_queue_ext.py) and a unit's tagsCode slot
holds the address of the message's ext unit (which keeps the tags code, the store time and the filter bit
map); readers resolve it with ``get_ext``.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from reference_broker.common.dispatch import DispatchRequest
from reference_broker.store.consume_queue_ext import ConsumeQueueExt, CqExtUnit, is_ext_addr
from reference_broker.store.mapped_file import MappedFile, SelectMappedBufferResult
from reference_broker.store.mapped_file_queue import MappedFileQueue

log = logging.getLogger(__name__)

CQ_STORE_UNIT_SIZE: Final = 20
UNIT: Final = struct.Struct(">qiq")
BLANK_UNIT: Final = UNIT.pack(0, 0x7FFFFFFF, 0)


_SIGN_BIT_TO_ZERO: Final = bytes(0 if b & 0x80 else 1 for b in range(256))


def first_invalid_unit(buf: memoryview, n_units: int) -> int:
    """Index of the first unit whose offset is negative or whose size is <= 0 (``n_units`` if none).

    Works on strided byte columns of the units instead of unpacking each one: the top byte of the
    offset and of the size carry the sign bits, and a size is zero when its four bytes OR to zero.
    """
    span = buf[: n_units * CQ_STORE_UNIT_SIZE]
    found = [n_units]
    for top in (bytes(span[0::CQ_STORE_UNIT_SIZE]), bytes(span[8::CQ_STORE_UNIT_SIZE])):
        i = top.translate(_SIGN_BIT_TO_ZERO).find(0)
        if i >= 0:
            found.append(i)
    ored = 0
    for k in range(8, 12):
        ored |= int.from_bytes(bytes(span[k::CQ_STORE_UNIT_SIZE]), "big")
    i = ored.to_bytes(n_units, "big").find(0)
    if i >= 0:
        found.append(i)
    return min(found)


class ConsumeQueue:
    def __init__(self, topic: str, queue_id: int, store_path: Path, mapped_file_size: int,
                 alloc_chunk: int = 64 * 1024, ext: ConsumeQueueExt | None = None) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.mapped_file_size = mapped_file_size
        self.queue_dir = store_path / topic / str(queue_id)
        self.mapped_file_queue = MappedFileQueue(self.queue_dir, mapped_file_size,
                                                 alloc_chunk=min(alloc_chunk, mapped_file_size) if alloc_chunk else 0,
                                                 random_access=True)
        self.max_physic_offset = -1  # offset + size of the last unit written
        self.min_logic_offset = 0  # bytes; correctMinOffset moves it past deleted commit-log data
        self.ext = ext  # enableConsumeQueueExt: the extension (isExtReadEnable / isExtWriteEnable)

    # ---- lifecycle ------------------------------------------------------------------------------
    def load(self) -> bool:
        ok = self.mapped_file_queue.load()
        if self.ext is not None:
            ok = self.ext.load() and ok
        log.debug("load consume queue %s-%d %s", self.topic, self.queue_id, "OK" if ok else "Failed")
        return ok

    def recover(self) -> None:
        """Scan from the third-from-last file while units are valid (ConsumeQueue.recover)."""
        files = self.mapped_file_queue.mapped_files
        if not files:
            return
        index = max(0, len(files) - 3)
        # Deliberate difference: when the third-from-last file holds no valid unit (its units were lost
        # with a power loss), step back to the last file that does. RocketMQ starts there regardless,
        # finds maxPhysicOffset -1, and so never truncates the earlier units that point past the log.
        while index > 0 and first_invalid_unit(files[index].buf, 1) == 0:
            index -= 1
        process_offset = files[index].file_from_offset
        max_ext = -1
        for mf in files[index:]:
            pos, last_end = self._scan_units(mf)
            process_offset = mf.file_from_offset + pos
            if last_end >= 0:
                max_ext = last_end
            if pos < self.mapped_file_size:
                break
        self.max_physic_offset = max_ext
        self.mapped_file_queue.flushed_where = process_offset
        # No quarantine here (unlike the commit log's cut, quarantine.py): units are derived data, which
        # dispatch rebuilds from the commit log; nothing a producer sent is lost with them.
        self.mapped_file_queue.truncate_dirty_files(process_offset)
        if self.ext is not None:
            self.ext.recover()
            self._truncate_ext()

    def _last_ext_addr(self) -> int | None:
        """The ext address in the last unit that holds one (None: no unit does). Reads the tagsCode column's
        top bytes at C speed: an address has 0x80 there (offset + Long.MIN_VALUE, offsets below 2^56)."""
        for mf in reversed(self.mapped_file_queue.mapped_files):
            n = mf.wrote_position // CQ_STORE_UNIT_SIZE
            top = bytes(mf.buf[12:n * CQ_STORE_UNIT_SIZE:CQ_STORE_UNIT_SIZE])
            i = top.rfind(0x80)
            while i >= 0:
                tags: int = UNIT.unpack_from(mf.buf, i * CQ_STORE_UNIT_SIZE)[2]
                if is_ext_addr(tags):
                    return tags
                i = top.rfind(0x80, 0, i)
        return None

    def _truncate_ext(self) -> None:
        """The ext units after the last one a unit of this queue points to go (4.9.8 truncates by the max
        address after recover and truncateDirtyLogicFiles)."""
        assert self.ext is not None
        addr = self._last_ext_addr()
        if addr is not None:
            self.ext.truncate_by_max_address(addr)

    def _scan_units(self, mf: MappedFile) -> tuple[int, int]:
        """(bytes of valid units from the file start, end offset of the last real unit or -1).

        Valid while ``offset >= 0 and size > 0`` (ConsumeQueue.recover), found at C speed: a 6 MB
        file is 300,000 units, which a per-unit Python loop takes a tenth of a second to read.
        """
        n = first_invalid_unit(mf.buf, self.mapped_file_size // CQ_STORE_UNIT_SIZE)
        last_end = -1
        for i in range(n - 1, -1, -1):  # the last real unit; pre-blank units only lead a queue
            offset, sz, _tags = UNIT.unpack_from(mf.buf, i * CQ_STORE_UNIT_SIZE)
            if sz != 0x7FFFFFFF:
                last_end = offset + sz
                break
        return n * CQ_STORE_UNIT_SIZE, last_end

    # ---- writes -----------------------------------------------------------------------------------
    def put_message_position_info(self, offset: int, size: int, tags_code: int, cq_offset: int) -> bool:
        """Write one unit at logical ``cq_offset`` (ConsumeQueue.putMessagePositionInfo).

        Idempotent: a unit already covered (re-dispatch after recovery) is skipped and reported as
        written. Raises OSError when space cannot be reserved (the store retries, then goes read-only).
        """
        if offset + size <= self.max_physic_offset and not self._stale_at(cq_offset, offset, size):
            return True  # already built, e.g. re-dispatched during recovery
        expect = cq_offset * CQ_STORE_UNIT_SIZE
        mfq = self.mapped_file_queue
        mf = mfq.get_last_mapped_file()
        if mf is None or mf.is_full:
            mf = mfq.last_file_for_write(expect)
            if mf.first_create_in_queue and cq_offset != 0 and mf.wrote_position == 0:
                self._fill_pre_blank(mf, expect)
                mfq.flushed_where = expect
                self.min_logic_offset = expect
        current = mf.file_from_offset + mf.wrote_position
        if cq_offset != 0 or current != 0:
            if expect < current:
                if self._stale_at(cq_offset, offset, size):
                    return self.put_message_position_info(offset, size, tags_code, cq_offset)
                log.warning("build consume queue repeatedly, expect %d < current %d, topic %s queue %d",
                            expect, current, self.topic, self.queue_id)
                return True
            if expect != current:
                log.warning("[BUG]logic queue order maybe wrong, expect %d, current %d, topic %s queue %d",
                            expect, current, self.topic, self.queue_id)
        pos = mf.wrote_position
        mf.ensure_allocated(pos + CQ_STORE_UNIT_SIZE)
        UNIT.pack_into(mf.buf, pos, offset, size, tags_code)
        mf.wrote_position = pos + CQ_STORE_UNIT_SIZE
        self.max_physic_offset = offset + size
        return True

    def put_message_positions(self, run: Sequence[DispatchRequest], start: int) -> int:
        """Append the units of ``run[start:]`` that continue this queue exactly, in one write: how many
        were written (0 when the first one needs ``put_message_position_info``'s per-unit rules).

        The fast path of a run's dispatch: each unit is one the per-unit path would append at the
        current end — the next logical offset, past every record already indexed, in the current file
        — so both paths leave the same bytes. An error reserving space writes nothing.
        """
        files = self.mapped_file_queue.mapped_files
        if not files:
            return 0
        mf = files[-1]
        pos = mf.wrote_position
        first = run[start]
        expect = first.consume_queue_offset
        if pos >= mf.file_size or expect * CQ_STORE_UNIT_SIZE != mf.file_from_offset + pos or \
                first.commit_log_offset + first.msg_size <= self.max_physic_offset:
            return 0
        if start + 1 == len(run):  # the usual case with many queues: one unit per queue in a run
            return 1 if self.append_unit(first) else 0
        room = (mf.file_size - pos) // CQ_STORE_UNIT_SIZE
        pack = UNIT.pack
        units: list[bytes] = []
        last = first
        for req in run[start:start + room]:
            if req.consume_queue_offset != expect:
                break
            units.append(pack(req.commit_log_offset, req.msg_size, req.tags_code))
            expect += 1
            last = req
        n = len(units)
        end = pos + n * CQ_STORE_UNIT_SIZE
        try:
            mf.ensure_allocated(end)
        except OSError:
            return 0
        mf.buf[pos:end] = b"".join(units)
        mf.wrote_position = end
        self.max_physic_offset = last.commit_log_offset + last.msg_size
        return n

    def append_unit(self, req: DispatchRequest) -> bool:
        """``put_message_positions`` for a run holding one unit of this queue, without the run: append it
        if it continues the queue exactly (the same conditions), else False and nothing is written."""
        files = self.mapped_file_queue.mapped_files
        if not files:
            return False
        mf = files[-1]
        pos = mf.wrote_position
        end = pos + CQ_STORE_UNIT_SIZE
        offset = req.commit_log_offset
        if pos >= mf.file_size or req.consume_queue_offset * CQ_STORE_UNIT_SIZE != mf.file_from_offset + pos or \
                offset + req.msg_size <= self.max_physic_offset:
            return False
        try:
            mf.ensure_allocated(end)
        except OSError:
            return False
        UNIT.pack_into(mf.buf, pos, offset, req.msg_size, req.tags_code)
        mf.wrote_position = end
        self.max_physic_offset = offset + req.msg_size
        return True

    def put_with_ext(self, req: DispatchRequest, bit_map: bytes | None) -> bool:
        """putMessagePositionInfoWrapper with the extension: the ext unit first (tags code, store time, bit
        map), its address in the unit's tagsCode slot; if the ext unit cannot be written, the tags code.
        As in 4.9.8 the ext unit is written before the "already built" check: a re-dispatched record leaves
        an unreferenced ext unit behind (harmless: nothing points to it)."""
        assert self.ext is not None
        tags = req.tags_code
        addr = self.ext.put(tags, req.store_timestamp, bit_map)
        if is_ext_addr(addr):
            tags = addr
        else:
            log.warning("Save consume queue extend fail, So just save tagsCode! topic:%s, queueId:%d, offset:%d",
                        self.topic, self.queue_id, req.commit_log_offset)
        return self.put_message_position_info(req.commit_log_offset, req.msg_size, tags, req.consume_queue_offset)

    def get_ext(self, tags_code: int) -> CqExtUnit | None:
        """getExt: the ext unit a tagsCode slot points to (None: not an address, or no unit there)."""
        ext = self.ext
        return ext.get(tags_code) if ext is not None and is_ext_addr(tags_code) else None

    def _stale_at(self, cq_offset: int, offset: int, size: int) -> bool:
        """A unit already at ``cq_offset`` that names another record than (offset, size) is stale — left
        by a truncation that never reached the disk, or damage. It and everything after it are dropped
        (and True returned) so dispatch rebuilds them; RocketMQ skips such a unit ("build consume queue
        repeatedly") and the message it should point to becomes unreachable."""
        if cq_offset * CQ_STORE_UNIT_SIZE < self.min_logic_offset:
            return False  # expired or pre-blank region: nothing to compare
        unit = self.get_unit(cq_offset)
        if unit is None or (unit[0] == offset and unit[1] == size):
            return False
        log.warning("consume queue %s-%d: unit %d names (%d, %d), the log has (%d, %d) there: dropping the queue "
                    "from this unit on and rebuilding it", self.topic, self.queue_id, cq_offset, unit[0], unit[1],
                    offset, size)
        self.mapped_file_queue.truncate_dirty_files(cq_offset * CQ_STORE_UNIT_SIZE)
        self.max_physic_offset = -1
        if cq_offset > 0:
            prev = self.get_unit(cq_offset - 1)
            if prev is not None and prev[0] >= 0 and prev[1] > 0 and prev[1] != 0x7FFFFFFF:
                self.max_physic_offset = prev[0] + prev[1]
        return True

    def _fill_pre_blank(self, mf: MappedFile, until_where: int) -> None:
        until = until_where % self.mapped_file_size
        mf.ensure_allocated(until)
        for pos in range(0, until, CQ_STORE_UNIT_SIZE):
            mf.buf[pos : pos + CQ_STORE_UNIT_SIZE] = BLANK_UNIT
        mf.wrote_position = until

    def flush(self, least_pages: int) -> bool:
        result = self.mapped_file_queue.flush(least_pages)
        if self.ext is not None:
            result = self.ext.flush(least_pages) and result
        return result

    # ---- a view of a queue the dispatch process writes (dispatchInSeparateProcess) ------------------
    def follow(self, max_offset: int) -> None:
        """The writer (dispatchd.py) published that this queue ends at unit ``max_offset``: map the files it
        created and move the end there. Units below it were written before it was published, so reads up
        to it see whole units; nothing here writes the files."""
        mfq = self.mapped_file_queue
        end = max_offset * CQ_STORE_UNIT_SIZE
        size = self.mapped_file_size
        last = mfq.get_last_mapped_file()
        if last is None or end > last.file_from_offset + size:
            mfq.map_new_files()
        files = mfq.mapped_files
        for i in range(len(files) - 1, -1, -1):
            mf = files[i]
            pos = min(size, max(0, end - mf.file_from_offset))
            if mf.wrote_position == pos:
                break  # files before it are already where they should be
            mf.set_positions(pos)  # flushed there too: the writer flushes, a view never does

    def follow_min(self, min_logic_offset: int) -> None:
        """The writer deleted this queue's files below ``min_logic_offset`` (bytes) and moved its min there."""
        self.mapped_file_queue.forget_below(min_logic_offset)
        self.min_logic_offset = min_logic_offset

    # ---- reads ----------------------------------------------------------------------------------
    def get_min_offset_in_queue(self) -> int:
        return self.min_logic_offset // CQ_STORE_UNIT_SIZE

    def get_max_offset_in_queue(self) -> int:
        return self.mapped_file_queue.get_max_offset() // CQ_STORE_UNIT_SIZE

    def get_index_buffer(self, start_index: int) -> SelectMappedBufferResult | None:
        """Units from ``start_index`` to the end of their file (ConsumeQueue.getIndexBuffer)."""
        offset = start_index * CQ_STORE_UNIT_SIZE
        if offset < self.min_logic_offset:
            return None
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mf is None:
            return None
        return mf.select(offset % self.mapped_file_size)

    def get_unit(self, index: int) -> tuple[int, int, int] | None:
        res = self.get_index_buffer(index)
        if res is None:
            return None
        try:
            if res.size < CQ_STORE_UNIT_SIZE:
                return None
            offset, size, tags = UNIT.unpack_from(res.data, 0)
            return int(offset), int(size), int(tags)
        finally:
            res.release()

    def get_offset_in_queue_by_time(self, timestamp: int,
                                    store_time_of: Callable[[int, int], int], min_physic_offset: int) -> int:
        """Binary search of units by store time (ConsumeQueue.getOffsetInQueueByTime).

        Returns the offset of a message stored at ``timestamp``, else of the closer of its two neighbours
        (the earlier one on a tie; DefaultMessageStoreTest's skewing cases), the first or last unit when
        ``timestamp`` is outside the queue, and 0 when the file cannot be read.
        """
        files = [mf for mf in self.mapped_file_queue.iter_files() if mf.last_modified_ms >= timestamp]
        mf = files[0] if files else self.mapped_file_queue.get_last_mapped_file()
        if mf is None:
            return 0
        res = mf.select(0)
        if res is None:
            return 0
        try:
            data = res.data
            low = self.min_logic_offset - mf.file_from_offset if self.min_logic_offset > mf.file_from_offset else 0
            high = res.size - CQ_STORE_UNIT_SIZE
            if high < low:
                return 0
            left_offset = right_offset = -1
            left_ts = right_ts = -1
            target = -1
            while high >= low:
                mid = (low + high) // (2 * CQ_STORE_UNIT_SIZE) * CQ_STORE_UNIT_SIZE
                phy, size, _ = UNIT.unpack_from(data, mid)
                if phy < min_physic_offset:
                    low = mid + CQ_STORE_UNIT_SIZE
                    left_offset = mid
                    continue
                ts = store_time_of(phy, size)
                if ts < 0:
                    return 0
                if ts == timestamp:
                    target = mid
                    break
                if ts > timestamp:
                    high = mid - CQ_STORE_UNIT_SIZE
                    right_offset, right_ts = mid, ts
                else:
                    low = mid + CQ_STORE_UNIT_SIZE
                    left_offset, left_ts = mid, ts
            if target == -1:
                if right_offset == -1:
                    target = left_offset
                elif left_ts == -1:  # leftIndexValue: left of it only units below the commit log's min offset
                    target = right_offset
                else:
                    # RocketMQ picks the closer neighbour; we keep its rule.
                    target = left_offset if abs(timestamp - left_ts) <= abs(timestamp - right_ts) else right_offset
            return (mf.file_from_offset + target) // CQ_STORE_UNIT_SIZE
        finally:
            res.release()

    # ---- truncation and cleaning -------------------------------------------------------------------
    def truncate_dirty_logic_files(self, phy_offset: int) -> None:
        """Drop units pointing at or past ``phy_offset`` (ConsumeQueue.truncateDirtyLogicFiles), and the ext
        units only they pointed to.

        What this drops is not quarantined (quarantine.py keeps the commit log's cuts): units are derived
        data, rebuilt from the commit log by dispatch."""
        self._truncate_units(phy_offset)
        if self.ext is not None:
            if self.mapped_file_queue.get_max_offset() == 0:
                self.ext.truncate_all()
            else:
                self._truncate_ext()

    def _truncate_units(self, phy_offset: int) -> None:
        mfq = self.mapped_file_queue
        while True:
            mf = mfq.get_last_mapped_file()
            if mf is None:
                break
            if mf.wrote_position == 0 and len(mfq.mapped_files) > 1:
                # An empty newest file (recover() stopped at its start, e.g. its units never reached
                # the disk): the units to check are in the file before it, which returning here would
                # leave pointing past the cut. Dropping it keeps the queue's max offset the same.
                mfq.delete_last_mapped_file()
                continue
            pos = 0
            cut = False
            self.max_physic_offset = -1
            while pos + CQ_STORE_UNIT_SIZE <= mf.wrote_position:
                offset, size, _ = UNIT.unpack_from(mf.buf, pos)
                if pos == 0 and offset >= phy_offset and size != 0x7FFFFFFF:
                    mfq.delete_last_mapped_file()
                    cut = True
                    break
                if offset >= 0 and size > 0:
                    if offset + size > phy_offset and size != 0x7FFFFFFF:
                        mf.set_positions(pos)
                        mf.zero_tail(pos)
                        mf.force()  # durable before new units land here (see MappedFileQueue.truncate_dirty_files)
                        log.info("consume queue %s-%d truncated at unit %d (it pointed past %d)", self.topic,
                                 self.queue_id, (mf.file_from_offset + pos) // CQ_STORE_UNIT_SIZE, phy_offset)
                        return
                    if size != 0x7FFFFFFF:
                        self.max_physic_offset = offset + size
                    pos += CQ_STORE_UNIT_SIZE
                else:
                    return
            if not cut:
                return

    def correct_min_offset(self, phy_min_offset: int) -> None:
        """Move the queue's min offset past units whose commit-log data is gone (correctMinOffset)."""
        mf = self.mapped_file_queue.get_first_mapped_file()
        if mf is None:
            return
        res = mf.select(0)
        if res is None:
            return
        try:
            for pos in range(0, res.size - CQ_STORE_UNIT_SIZE + 1, CQ_STORE_UNIT_SIZE):
                offset, size, _ = UNIT.unpack_from(res.data, pos)
                if offset >= phy_min_offset and size != 0x7FFFFFFF:
                    self.min_logic_offset = mf.file_from_offset + pos
                    tags = UNIT.unpack_from(res.data, pos)[2]
                    if self.ext is not None and is_ext_addr(tags):
                        self.ext.truncate_by_min_address(tags)  # 4.9.8: truncateByMinAddress(minExtAddr)
                    return
            self.min_logic_offset = mf.file_from_offset + res.size
        finally:
            res.release()

    def delete_expired_file(self, offset: int) -> int:
        n = self.mapped_file_queue.delete_expired_file_by_offset(offset, CQ_STORE_UNIT_SIZE)
        self.correct_min_offset(offset)
        return n

    def destroy(self) -> None:
        self.max_physic_offset = -1
        self.min_logic_offset = 0
        self.mapped_file_queue.destroy()
        if self.ext is not None:
            self.ext.destroy()

    def shutdown(self) -> None:
        self.mapped_file_queue.shutdown(0)
        if self.ext is not None:
            self.ext.shutdown()
