"""CommitLog recovery: normal and abnormal (CommitLog.recoverNormally / recoverAbnormally, 4.9.8).

Scans the log from a starting file (the last three, or the one the checkpoint or the min-timestamp rule
picks), re-dispatches what abnormal recovery finds, stops at the first record that fails its check and
cuts the log there, after quarantine.py has copied the cut bytes aside (a deliberate difference: 4.9.8 drops
them). Records from the commit log's ``prop_crc_since`` marker on must carry the whole-record CRC.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from reference_broker.common import record as rec
from reference_broker.common.dispatch import DispatchRequest
from reference_broker.store.mapped_file import MappedFile
from reference_broker.store.quarantine import preserve_cut

if TYPE_CHECKING:
    from reference_broker.store.commit_log import CommitLog

log = logging.getLogger(__name__)

RECOVER_RUN_RECORDS: Final = 4096  # records parsed (and re-dispatched) together while recovering


class CommitLogRecovery:
    """One recovery of one commit log (owned by the log; holds no state of its own)."""

    def __init__(self, commit_log: CommitLog) -> None:
        self.log = commit_log

    def _scan_file(self, mf: MappedFile, check_crc: bool,
                   on_batch: Callable[[list[DispatchRequest]], None] | None, pos: int = 0) -> tuple[int, bool]:
        """Scan one file from ``pos``: (valid bytes, reached a clean end of file).

        Records from ``prop_crc_since`` on must carry a matching whole-record CRC; those before it are
        checked by BODYCRC. Notes the last store timestamp seen, which seeds the monotonic store clock.
        """
        buf = mf.buf
        size = mf.file_size
        delay = self.log.delay_table_ms
        since = self.log.prop_crc_since if self.log.verify_prop_crc else None
        split = size if since is None else min(size, max(0, since - mf.file_from_offset))
        while pos < size:
            strict = since is not None and pos >= split
            limit = size if strict or since is None else split
            reqs, pos, end = rec.scan_records(buf, pos, limit, check_crc, delay, RECOVER_RUN_RECORDS, strict)
            if end is rec.ScanEnd.BAD and limit < size:
                # A record that crosses the marker (a marker off a record boundary): check it the old way.
                reqs2, pos, end = rec.scan_records(buf, pos, size, check_crc, delay, 1, False)
                reqs = reqs + reqs2
            if reqs:
                if on_batch is not None:
                    on_batch(reqs)
                self.log.last_store_ts = max(self.log.last_store_ts, max(r.store_timestamp for r in reqs))
            if end is rec.ScanEnd.BLANK:
                return size, True  # blank: the rest of this file is padding
            if end is rec.ScanEnd.BAD:
                return pos, False
        return pos, True

    def _recover_from(self, index: int, check_crc: bool,
                      on_batch: Callable[[list[DispatchRequest]], None] | None, start_pos: int = 0) -> int:
        """Scan files from ``index`` (at ``start_pos`` in the first) until the first damaged record.

        Returns the process offset. Everything scanned is forced to disk: after a kill -9 the tail may
        sit only in the page cache, and the flush position set from the result promises it is durable.
        """
        files = self.log.mapped_file_queue.mapped_files
        process_offset = files[index].file_from_offset + start_pos
        pos = start_pos
        for mf in files[index:]:
            valid, clean_end = self._scan_file(mf, check_crc, on_batch, pos)
            pos = 0
            process_offset = mf.file_from_offset + valid
            mf.force()
            if not clean_end:
                if valid < mf.file_size:
                    log.info("recover commit log: stop at %d in %s (%s)", process_offset, mf.file_name,
                             "end of data" if self._is_zero_tail(mf, valid) else "damaged record: cut after quarantine")
                break
        return process_offset

    @staticmethod
    def _is_zero_tail(mf: MappedFile, pos: int) -> bool:
        return pos + 8 > mf.file_size or bytes(mf.buf[pos : pos + 8]) == bytes(8)

    def _recover_empty(self, truncate_logics: Callable[[int], None]) -> int:
        """A log with no files: nothing to scan, every consume queue emptied."""
        self.log.mapped_file_queue.flushed_where = 0
        self._clamp_prop_crc_since(0)
        truncate_logics(-1)
        return 0

    def recover_normally(self, max_phy_offset_of_cq: int,
                         truncate_logics: Callable[[int], None]) -> int:
        """CommitLog.recoverNormally: scan the last three files with CRC, truncate at the first bad record."""
        files = self.log.mapped_file_queue.mapped_files
        if not files:
            return self._recover_empty(truncate_logics)
        index = max(0, len(files) - 3)
        process_offset = self._recover_from(index, self.log.config.check_crc_on_recover, None)
        self._finish_recovery(process_offset, max_phy_offset_of_cq, truncate_logics, "normal recovery")
        return process_offset

    def recover_abnormally(self, max_phy_offset_of_cq: int, dispatch: Callable[[list[DispatchRequest]], None],
                           truncate_logics: Callable[[int], None]) -> int:
        """CommitLog.recoverAbnormally: from the newest file older than the checkpoint, re-dispatch all
        (``dispatch`` takes runs of records, in log order)."""
        files = self.log.mapped_file_queue.mapped_files
        if not files:
            return self._recover_empty(truncate_logics)
        start = self._checkpoint_recover_start()
        if start is not None:
            index, start_pos = start
            log.info("recover abnormally from offset %d (checkpoint)", files[index].file_from_offset + start_pos)
        else:
            index, start_pos = 0, 0
            for i in range(len(files) - 1, -1, -1):
                if self._is_mapped_file_matched_recover(files[i]):
                    index = i
                    break
            log.info("recover abnormally from file %s", files[index].file_name)
        process_offset = self._recover_from(index, self.log.config.check_crc_on_recover, dispatch, start_pos)
        self._finish_recovery(process_offset, max_phy_offset_of_cq, truncate_logics, "abnormal recovery")
        return process_offset

    def _checkpoint_recover_start(self) -> tuple[int, int] | None:
        """(file index, position) of the checkpoint's recover offset when it can be trusted, else None.

        Our checkpoint extension (checkpoint.py): the offset below which the log and its consume-queue
        units were flushed. It is used only when it falls inside the log on a record boundary (or at
        the end of the data); otherwise RocketMQ's time-based file choice applies. With the index on,
        the offset is also capped by the index safe point's covered offset (index_recovery.py), which
        is what makes messageIndexSafe's promise hold here too; with no safe point yet, the time rule.
        """
        cfg = self.log.config
        if not cfg.recover_from_checkpoint_offset:
            return None
        offset = self.log.checkpoint.get_recover_offset()
        if cfg.message_index_enable:
            sp = self.log.checkpoint.index_safe_point
            if sp is None:
                return None
            offset = min(offset, sp.covered_offset)
        if offset < 0 or offset < self.log.get_min_offset():
            return None
        files = self.log.mapped_file_queue.mapped_files
        for i, mf in enumerate(files):
            if mf.file_from_offset <= offset < mf.file_from_offset + mf.file_size:
                pos = offset - mf.file_from_offset
                since = self.log.prop_crc_since
                strict = self.log.verify_prop_crc and since is not None and offset >= since
                req = rec.check_message_and_return_size(mf.buf, pos, mf.file_size, cfg.check_crc_on_recover,
                                                        verify_prop_crc=strict)
                if req.success or self._is_zero_tail(mf, pos):
                    return i, pos
                log.warning("checkpoint recover offset %d is not a record boundary: using the time rule", offset)
                return None
        return None

    def _is_mapped_file_matched_recover(self, mf: MappedFile) -> bool:
        """The file's first record is intact and older than the checkpoint's min timestamp."""
        buf = mf.buf
        try:
            (magic,) = rec.INT.unpack_from(buf, 4)
            if magic not in (rec.MESSAGE_MAGIC_CODE, rec.MESSAGE_MAGIC_CODE_V2):
                return False
            ts = rec.store_timestamp_at(buf, 0)
        except (struct.error, ValueError):  # a short or released file: not a candidate
            return False
        if ts == 0:
            return False
        cfg = self.log.config
        # With no index safe point yet (a crash before the first thorough queue flush, or a checkpoint
        # written before safe points existed) IndexService.load destroys the file being written, as 4.9.8
        # does: the replay must then reach back over the index too, as with messageIndexSafe. (4.9.8 would
        # lose the lookups of the records before the chosen file; deliberate difference, index_recovery.py.)
        no_safe_point = cfg.recover_from_checkpoint_offset and self.log.checkpoint.index_safe_point is None
        if cfg.message_index_enable and (cfg.message_index_safe or no_safe_point):
            min_ts = self.log.checkpoint.get_min_timestamp_index()
        else:
            min_ts = self.log.checkpoint.get_min_timestamp()
        return ts <= min_ts

    def _finish_recovery(self, process_offset: int, max_phy_offset_of_cq: int,
                         truncate_logics: Callable[[int], None], reason: str) -> None:
        mfq = self.log.mapped_file_queue
        # Deliberate difference (quarantine.py): what the cut below removes is first copied aside; raises
        # QuarantineError, with nothing cut, when the copy cannot be made.
        preserve_cut(list(mfq.mapped_files), process_offset, self.log.config.store_path_root_dir, reason)
        self._clamp_prop_crc_since(process_offset)
        mfq.flushed_where = process_offset
        mfq.truncate_dirty_files(process_offset)
        self.log.checkpoint.clamp_offsets(process_offset)
        if max_phy_offset_of_cq >= process_offset:
            log.info("consume queues reach the commit log end (%d >= %d): truncating them there",
                        max_phy_offset_of_cq, process_offset)
            truncate_logics(process_offset)

    def _clamp_prop_crc_since(self, end: int) -> None:
        """Everything written from the recovered end on carries the CRC: the marker may not lie beyond it."""
        if self.log.prop_crc_since is not None and self.log.prop_crc_since > end:
            self.log.set_prop_crc_since(end)

