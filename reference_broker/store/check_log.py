"""The commit log as the store check sees it (``check.py``): its files mapped read-only, scanned once, then
asked for the record at an offset; and the file-level rules shared with the consume queues (offset names,
one size, zero tails).

Every file is opened ``O_RDONLY`` and mapped with ``ACCESS_READ``: nothing here can change a byte.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from reference_broker.common import message as mc
from reference_broker.common import record as rec
from reference_broker.common.dispatch import DispatchRequest
from reference_broker.store.check_report import CheckReport, ProblemKind
from reference_broker.store.commit_log import PROP_CRC_SINCE_FILE

_ZERO_CHUNK: Final = 1 << 20
_ZEROS: Final = bytes(_ZERO_CHUNK)
_REC_HEAD: Final = struct.Struct(">iiiiiqqi")  # TOTAL MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG
_RUN: Final = 4096
_TRAN_MASK: Final = mc.TRANSACTION_ROLLBACK_TYPE
_DISPATCHED: Final = (mc.TRANSACTION_NOT_TYPE, mc.TRANSACTION_COMMIT_TYPE)  # CommitLogDispatcherBuildConsumeQueue


def is_offset_name(name: str) -> bool:
    return len(name) == 20 and name.isdigit()


@contextmanager
def mapped(path: Path) -> Iterator[mmap.mmap | None]:
    """The file mapped read-only (None when it is empty): never opened for writing."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ) if size else None
    finally:
        os.close(fd)
    try:
        yield mm
    finally:
        if mm is not None:
            mm.close()


def first_nonzero(mm: mmap.mmap, start: int, end: int) -> int:
    """Offset of the first non-zero byte in [start, end), or -1."""
    pos = start
    while pos < end:
        n = min(_ZERO_CHUNK, end - pos)
        chunk = mm[pos:pos + n]
        if chunk != _ZEROS[:n]:
            return pos + len(chunk) - len(chunk.lstrip(b"\0"))
        pos += n
    return -1


def offset_files(d: Path, report: CheckReport, what: str) -> list[Path]:
    """The 20-digit files of a directory in offset order; anything else is noted and skipped."""
    out = []
    for p in sorted(d.iterdir()):
        if p.is_file() and is_offset_name(p.name):
            out.append(p)
        elif not p.name.endswith(".tmp"):
            report.warn(f"{what}: ignored {p.name} (not a 20-digit offset file)")
    return out


def check_names(files: list[Path], root: Path, report: CheckReport, kind: ProblemKind) -> int:
    """One size for all, names that are start offsets, each the previous plus the size; returns the size."""
    sizes = [p.stat().st_size for p in files]
    size = Counter(s for s in sizes if s > 0).most_common(1)[0][0] if any(sizes) else 0
    prev: int | None = None
    for p, s in zip(files, sizes, strict=True):
        rel = str(p.relative_to(root))
        start = int(p.name)
        if s != size:
            report.add(kind, rel, -1, f"length {s} differs from the other files' {size}")
        if size and prev is None and start % size:
            report.add(kind, rel, -1, f"start offset {start} is not a multiple of the file size {size}")
        if prev is not None and size and start != prev + size:
            if start > prev + size:
                report.add(kind, rel, -1, f"files missing before it: expected {prev + size:020d} after "
                                          f"{prev:020d} (file size {size})")
            else:
                report.add(kind, rel, -1, f"overlaps the previous file {prev:020d} (file size {size})")
        prev = start
    return size

def _torn_tail(mm: mmap.mmap, buf: memoryview, pos: int, size: int) -> tuple[int, int] | None:
    """(bytes written, total size) when the record at ``pos`` is a torn tail: its first bytes, then zeros to the
    end of the file — either no more than its length and magic (the write stopped there), or a record header
    (a message magic, a length within the file, as the writer never lets a record cross files) with zeros from
    somewhere inside the record on; None otherwise (damage, not a tail)."""
    if size - pos < 8:
        return None
    total, magic = struct.unpack_from(">ii", buf, pos)
    if first_nonzero(mm, pos + 8, size) < 0:  # nothing past the length and magic
        written = 8
    elif magic not in (rec.MESSAGE_MAGIC_CODE, rec.MESSAGE_MAGIC_CODE_V2) or not _REC_HEAD.size < total <= size - pos:
        return None
    elif first_nonzero(mm, pos + total, size) >= 0:
        return None  # data after the record's end: not the end of the log
    else:
        written = total
    while written > 0 and buf[pos + written - 1] == 0:
        written -= 1
    return (written, total) if written < total else None


class CommitLogView:
    """The commit log, mapped read-only, scanned once; then asked for the record at an offset."""

    def __init__(self, root: Path, report: CheckReport) -> None:
        self.root = root
        self.report = report
        self.maps: dict[int, tuple[mmap.mmap, memoryview, str]] = {}  # start offset -> (map, view, rel path)
        self.starts: list[int] = []
        self.file_size = 0
        self.min_offset = 0
        self.end = 0  # end of the data: one past the last record
        self.torn_bytes = 0  # a torn tail's bytes past ``end`` (written, never completed)
        self.max_store_ts = 0
        self.queues: dict[tuple[str, int], tuple[int, int]] = {}  # last dispatched record: (queue offset, phy)
        self.since: int | None = None
        self._ended_at: int | None = None  # where zeros began, if data ended before the last file

    @property
    def written_end(self) -> int:
        """One past the last byte written: the end of the data plus a torn tail's bytes."""
        return self.end + self.torn_bytes

    def drop_pages(self) -> None:
        """Unmap the pages read so far (MADV_DONTNEED on a read-only mapping: they stay in the page cache, and a
        later read maps them again). Between phases only: each queue's units and each index file's entries
        reach across the whole log, and mapping its pages again for every queue would cost more than it saves.
        The pages are clean file pages the kernel reclaims at will; the check's own memory is a few tens of MB."""
        for mm, _, _ in self.maps.values():
            mm.madvise(mmap.MADV_DONTNEED)

    def close(self) -> None:
        for mm, mv, _ in self.maps.values():
            mv.release()
            mm.close()
        self.maps.clear()

    def load(self) -> None:
        r = self.report
        d = self.root / "commitlog"
        files = offset_files(d, r, "commitlog")
        r.counts["commitlog_files"] = len(files)
        since = self.root / PROP_CRC_SINCE_FILE
        if since.is_file():
            text = since.read_text(encoding="ascii", errors="replace").strip()
            if text.isdigit():
                self.since = int(text)
            else:
                r.warn(f"{PROP_CRC_SINCE_FILE}: {text[:40]!r} is not an offset: ignored")
        if not files:
            return
        self.file_size = check_names(files, self.root, r, ProblemKind.LOG_FILES)
        self.min_offset = int(files[0].name)
        self.end = self.min_offset
        for p in files:
            rel = str(p.relative_to(self.root))
            fd = os.open(p, os.O_RDONLY)
            try:
                size = os.fstat(fd).st_size
                if not size:
                    continue
                mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
            finally:
                os.close(fd)
            mm.madvise(mmap.MADV_SEQUENTIAL)
            start = int(p.name)
            self.maps[start] = (mm, memoryview(mm), rel)
            self.starts.append(start)
            self._scan_file(start)
            mm.madvise(mmap.MADV_RANDOM)  # later reads (units, index entries) hop about
            mm.madvise(mmap.MADV_DONTNEED)  # see drop_pages

    def _scan_file(self, start: int) -> None:
        mm, buf, rel = self.maps[start]
        r = self.report
        size = len(buf)
        if self._ended_at is not None:
            nz = first_nonzero(mm, 0, size)
            if nz < 0:
                return  # pre-allocated ahead of the writer (AllocateMappedFileService): all zeros
            r.add(ProblemKind.LOG_FILES, rel, nz, f"holds data, but the log's data ended at {self._ended_at} "
                                                  "(zeros in the middle of the log)")
            self._ended_at = None
        pos = 0
        while pos < size:
            reqs, end_pos, why = rec.scan_records(buf, pos, size, True, None, _RUN, False)
            self._take(reqs, buf, start, pos, rel)
            pos = end_pos
            if why is rec.ScanEnd.LIMIT:
                continue
            if why is rec.ScanEnd.BLANK:
                self.end = start + size  # the rest of the file is the blank's padding
                return
            if size - pos >= 4 and mm[pos:pos + 4] == b"\0\0\0\0":
                self.end = start + pos
                self._ended_at = start + pos
                nz = first_nonzero(mm, pos, size)
                if nz >= 0:
                    r.add(ProblemKind.LOG_TAIL, rel, nz, f"non-zero bytes after the end of the data at {pos}")
                return
            torn = _torn_tail(mm, buf, pos, size)
            if torn is not None:
                self._torn(start, pos, torn, rel)
                return
            try:
                rec.decode_message(buf, pos, size, check_crc=True)
                reason = "record does not decode (topic or properties)"
            except rec.RecordError as e:
                reason = str(e)
            r.add(ProblemKind.LOG_RECORD, rel, pos, reason)
            try:  # a record whose fields still add up (a flipped byte in its body): step over it
                pos += rec.decode_message(buf, pos, size).store_size
            except (rec.RecordError, UnicodeDecodeError, ValueError):
                r.warn(f"{rel}: the rest of the file after {pos} cannot be parsed and was not checked")
                self.end = max(self.end, start + pos)
                return
        self.end = start + size

    def _torn(self, start: int, pos: int, torn: tuple[int, int], rel: str) -> None:
        """The log ends inside the record at ``pos``: ``written`` of its ``total`` bytes are there."""
        written, total = torn
        self.end = self._ended_at = start + pos
        self.torn_bytes = written
        r = self.report
        words = (f"the log ends inside its last record at {pos}: {written} of its {total} bytes written, then "
                 "zeros (recovery cuts it)")
        if r.slave:
            r.warn(f"{rel}: {words}; a slave's log ends so when its master stopped in the middle of a transfer")
        elif not r.clean_stop:
            r.warn(f"{rel}: {words}")
        else:
            r.add(ProblemKind.LOG_TAIL, rel, pos, f"{words}, after a clean stop")

    def _take(self, reqs: list[DispatchRequest], buf: memoryview, base: int, pos: int, rel: str) -> None:
        r = self.report
        since = self.since
        head = rec.PROP_CRC_HEAD
        queues = self.queues
        max_ts = self.max_store_ts
        for q in reqs:
            at = base + pos
            total = q.msg_size
            if q.commit_log_offset != at:
                r.add(ProblemKind.LOG_RECORD, rel, pos, f"PHYSICALOFFSET {q.commit_log_offset} does not name where "
                                                        f"the record lies ({at})")
            t = pos + total - rec.CRC32_RESERVED_LEN
            if t > pos and buf[t:t + len(head)] == head:
                if not rec.prop_crc_ok(buf, pos, total):
                    r.add(ProblemKind.LOG_RECORD, rel, pos, "whole-record CRC (__CRC32#) mismatch")
            elif since is not None and at >= since:
                r.add(ProblemKind.LOG_RECORD, rel, pos, f"whole-record CRC (__CRC32#) missing; every record from "
                                                        f"{PROP_CRC_SINCE_FILE} {since} on carries one")
            if q.store_timestamp > max_ts:
                max_ts = q.store_timestamp
            if q.sys_flag & _TRAN_MASK in _DISPATCHED:
                queues[(q.topic, q.queue_id)] = (q.consume_queue_offset, at)
            pos += total
        self.max_store_ts = max_ts
        r.counts["commitlog_records"] += len(reqs)
        r.counts["commitlog_bytes"] += sum(q.msg_size for q in reqs)

    def _locate(self, phy: int) -> tuple[memoryview, int] | None:
        if not self.file_size or phy < 0:
            return None
        start = phy - phy % self.file_size
        m = self.maps.get(start)
        if m is None:
            return None
        return m[1], phy - start

    def header_at(self, phy: int) -> tuple[int, int, int, bytes] | str:
        """(total size, queue id, queue offset, topic bytes) of the record at ``phy``, or why there is none."""
        loc = self._locate(phy)
        if loc is None:
            return "no commit-log file holds that offset"
        buf, pos = loc
        if pos + rec.FIXED_PART_V4 > len(buf):
            return "no record fits there"
        total, magic, _crc, qid, _flag, qoff, phys, sys_flag = _REC_HEAD.unpack_from(buf, pos)
        if magic not in (rec.MESSAGE_MAGIC_CODE, rec.MESSAGE_MAGIC_CODE_V2) or phys != phy:
            return "no record starts there"
        hdr = rec.HEADERS[(bool(sys_flag & mc.BORNHOST_V6_FLAG), bool(sys_flag & mc.STOREHOSTADDRESS_V6_FLAG))]
        (body_len,) = rec.INT.unpack_from(buf, pos + hdr.size - 4)
        p = pos + hdr.size + body_len
        if body_len < 0 or p + 2 > min(len(buf), pos + total):
            return "the record there does not decode"
        if magic == rec.MESSAGE_MAGIC_CODE:
            topic = bytes(buf[p + 1:p + 1 + buf[p]])
        else:
            topic = bytes(buf[p + 2:p + 2 + int.from_bytes(buf[p:p + 2], "big")])
        return total, qid, qoff, topic

    def requests_from(self, phy: int, wanted: set[int], max_records: int) -> dict[int, DispatchRequest]:
        """The records among ``wanted`` found parsing up to ``max_records`` consecutive records from ``phy``
        (``scan_records``' fast path: index entries name runs of neighbouring records)."""
        loc = self._locate(phy)
        if loc is None:
            return {}
        buf, pos = loc
        reqs, _end, _why = rec.scan_records(buf, pos, len(buf), False, None, max_records, False)
        out = {}
        at = phy
        for q in reqs:
            if q.commit_log_offset != at:
                break
            if at in wanted:
                out[at] = q
            at += q.msg_size
        return out
