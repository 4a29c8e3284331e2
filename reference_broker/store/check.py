"""An offline check of a stopped broker's store (``python -m reference_broker admin checkStore DIR``).

RocketMQ 4.9.8 has no such tool (its closest is recovery itself, which repairs instead of reporting); this
one reads a store with the store's own format code and reports what recovery would cut or a consumer would
trip over, without changing a byte: every file is opened read-only and mapped with ``ACCESS_READ``; no
recovery, no truncation, no ``lock`` and no ``abort`` file is created. It accepts what RocketMQ writes: the
next commit-log file pre-allocated (all zeros) ahead of the writer, and consume-queue and index files
pre-sized with zeros.

What it checks (each problem is reported with its file, offset and reason; see ``check_report.py``):

- the commit log: 20-digit file names that are start offsets, each the previous plus the file size, one
  size for all; every record decodes (CommitLog.checkMessageAndReturnSize, ``record.scan_records``) with a
  matching BODYCRC, a matching whole-record CRC where the record carries one (``__CRC32#``) and wherever
  the store promised one (``propCrcSince``), and its PHYSICALOFFSET names where it lies; an end-of-file
  blank ends a file; after the last record of the data the rest is zeros, and so is every later file;
- each consume queue (``consumequeue/<topic>/<queueId>/``): files as for the log; every unit names a record
  of its topic and queue whose size matches and whose queue offset is the unit's index, in increasing
  commit-log order; pre-blank units ``(0, Integer.MAX_VALUE, 0)`` only lead a queue
  (ConsumeQueue.fillPreBlank); units below the log's first file are expired, not wrong; and the queue
  reaches the last record the log holds for it (needs a clean stop);
- each index file: a layout that matches its length, slots and chains that name existing entries, and every
  entry names a record carrying a key (UNIQ_KEY, or a KEYS token) whose ``topic#key`` hash is the entry's
  (IndexService.buildIndex, IndexFile.indexKeyHashMethod);
- the checkpoint: no time past the newest record's store time, no offset (this project's extension, see
  checkpoint.py) past the end of the data.

An ``abort`` file means the broker did not stop cleanly: reported as a warning, and the checks that only
hold after a clean stop (consume queues and index complete up to the end of the log, nothing past it,
logicsMsgTimestamp) become warnings. Only ``commitlog/``, ``consumequeue/``, ``index/``, ``checkpoint``,
``abort`` and ``propCrcSince`` are read: ``quarantine/`` (bytes recovery cut, kept for inspection),
``config/``, ``logs/`` and the ``lock`` file are not store data and are ignored.

Not checked: consume-queue tag codes, and whether every keyed record has its index entries (RocketMQ itself
does not promise that after a crash: IndexService.load drops files past the checkpoint).
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np

from reference_broker.common import message as mc
from reference_broker.common.java_hash import hash_codes
from reference_broker.store import record as rec
from reference_broker.store.check_report import CheckReport, ProblemKind
from reference_broker.store.commit_log import PROP_CRC_SINCE_FILE
from reference_broker.store.consume_queue import CQ_STORE_UNIT_SIZE, UNIT
from reference_broker.store.dispatch import DispatchRequest
from reference_broker.store.index_file import HEADER_SIZE, INDEX_SIZE

_ZERO_CHUNK: Final = 1 << 20
_ZEROS: Final = bytes(_ZERO_CHUNK)
_REC_HEAD: Final = struct.Struct(">iiiiiqqi")  # TOTAL MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG
_INDEX_HEADER: Final = struct.Struct(">qqqqii")
_ENTRY_DTYPE: Final = np.dtype([("hash", ">i4"), ("phy", ">i8"), ("diff", ">i4"), ("prev", ">i4")])
_CKPT: Final = struct.Struct(">qqq")
_CKPT_OFFSETS: Final = struct.Struct(">qq")
_CKPT_OFFSETS_AT: Final = 40
_PRE_BLANK_SIZE: Final = 0x7FFFFFFF  # ConsumeQueue.fillPreBlank: (0, Integer.MAX_VALUE, 0)
_RUN: Final = 4096
_TRAN_MASK: Final = mc.TRANSACTION_ROLLBACK_TYPE
_DISPATCHED: Final = (mc.TRANSACTION_NOT_TYPE, mc.TRANSACTION_COMMIT_TYPE)  # CommitLogDispatcherBuildConsumeQueue
# RocketMQ's default index layout keeps maxIndexNum = 4 x maxHashSlotNum (5,000,000 / 20,000,000), and so do
# this project's test and chaos settings: a length alone then names the layout.
_INDEX_NUM_PER_SLOT: Final = 4
_INDEX_CHUNK: Final = 8192  # index entries checked together
_INDEX_RUN: Final = 32  # records parsed per run while looking for the ones entries name
_INT_MIN: Final = -(2**31)


@dataclass(frozen=True)
class CheckOptions:
    index_hash_slot_num: int | None = None  # maxHashSlotNum; None: inferred from the file length
    index_num: int | None = None  # maxIndexNum
    max_per_kind: int = 50


def _is_offset_name(name: str) -> bool:
    return len(name) == 20 and name.isdigit()


@contextmanager
def _mapped(path: Path) -> Iterator[mmap.mmap | None]:
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


def _first_nonzero(mm: mmap.mmap, start: int, end: int) -> int:
    """Offset of the first non-zero byte in [start, end), or -1."""
    pos = start
    while pos < end:
        n = min(_ZERO_CHUNK, end - pos)
        chunk = mm[pos:pos + n]
        if chunk != _ZEROS[:n]:
            return pos + len(chunk) - len(chunk.lstrip(b"\0"))
        pos += n
    return -1


def _offset_files(d: Path, report: CheckReport, what: str) -> list[Path]:
    """The 20-digit files of a directory in offset order; anything else is noted and skipped."""
    out = []
    for p in sorted(d.iterdir()):
        if p.is_file() and _is_offset_name(p.name):
            out.append(p)
        elif not p.name.endswith(".tmp"):
            report.warn(f"{what}: ignored {p.name} (not a 20-digit offset file)")
    return out


def _check_names(files: list[Path], root: Path, report: CheckReport, kind: ProblemKind) -> int:
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


class _Log:
    """The commit log, mapped read-only, scanned once; then asked for the record at an offset."""

    def __init__(self, root: Path, report: CheckReport) -> None:
        self.root = root
        self.report = report
        self.maps: dict[int, tuple[mmap.mmap, memoryview, str]] = {}  # start offset -> (map, view, rel path)
        self.starts: list[int] = []
        self.file_size = 0
        self.min_offset = 0
        self.end = 0  # end of the data: one past the last record
        self.max_store_ts = 0
        self.queues: dict[tuple[str, int], tuple[int, int]] = {}  # last dispatched record: (queue offset, phy)
        self.since: int | None = None
        self._ended_at: int | None = None  # where zeros began, if data ended before the last file

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
        files = _offset_files(d, r, "commitlog")
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
        self.file_size = _check_names(files, self.root, r, ProblemKind.LOG_FILES)
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
            nz = _first_nonzero(mm, 0, size)
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
                nz = _first_nonzero(mm, pos, size)
                if nz >= 0:
                    r.add(ProblemKind.LOG_TAIL, rel, nz, f"non-zero bytes after the end of the data at {pos}")
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


def check_store(root: Path, options: CheckOptions | None = None) -> CheckReport:
    """Check the store at ``root`` (storePathRootDir) without modifying it."""
    opts = options or CheckOptions()
    report = CheckReport(str(root), max_per_kind=opts.max_per_kind)
    t0 = time.monotonic()
    if not root.is_dir() or not (root / "commitlog").is_dir():
        report.add(ProblemKind.NOT_A_STORE, str(root), -1, "not a store: no commitlog/ directory here")
        return report
    if (root / "abort").exists():
        report.clean_stop = False
        report.warn("abort file present: the broker was not cleanly stopped (recovery will run at its next start)")
        report.relaxed += ["consume queues complete up to the end of the log", "units and index entries past the "
                           "end of the log", "logicsMsgTimestamp not past the data"]
    log = _Log(root, report)
    try:
        log.load()
        report.log_bytes = sum(len(v) for _, v, _ in log.maps.values())
        _check_consume_queues(root, log, report)
        _check_index(root, log, report, opts)
        _check_checkpoint(root, log, report)
    except OSError as e:  # permissions, an I/O error: nothing can be judged
        report.add(ProblemKind.UNREADABLE, str(e.filename or root), -1, f"cannot read: {e.strerror or e}")
    finally:
        log.close()
    report.seconds = time.monotonic() - t0
    return report


# ---- consume queues ------------------------------------------------------------------------------------------


def _check_consume_queues(root: Path, log: _Log, report: CheckReport) -> None:
    cq_root = root / "consumequeue"
    seen: set[tuple[str, int]] = set()
    if cq_root.is_dir():
        for tdir in sorted(cq_root.iterdir()):
            if not tdir.is_dir():
                report.warn(f"consumequeue: ignored {tdir.name} (not a topic directory)")
                continue
            for qdir in sorted(tdir.iterdir()):
                if not (qdir.is_dir() and qdir.name.isdigit()):
                    report.warn(f"consumequeue/{tdir.name}: ignored {qdir.name} (not a queue id)")
                    continue
                key = (tdir.name, int(qdir.name))
                seen.add(key)
                _check_queue(root, qdir, key, log, report)
    log.drop_pages()
    for topic, qid in sorted(set(log.queues) - seen):
        qoff, phy = log.queues[(topic, qid)]
        _incomplete(report, f"consumequeue/{topic}/{qid}", -1,
                    f"no consume queue, but the log holds its queue offset {qoff} at {phy}")


def _incomplete(report: CheckReport, rel: str, offset: int, reason: str) -> None:
    if report.clean_stop:
        report.add(ProblemKind.CQ_INCOMPLETE, rel, offset, reason)
    else:
        report.warn(f"{rel}: {reason} (recovery re-dispatches it)")


def _past_end(report: CheckReport, kind: ProblemKind, rel: str, offset: int, reason: str) -> None:
    if report.clean_stop:
        report.add(kind, rel, offset, reason)
    else:
        report.warn(f"{rel} @ {offset}: {reason} (recovery truncates it)")


def _check_queue(root: Path, qdir: Path, key: tuple[str, int], log: _Log, r: CheckReport) -> None:
    topic, qid = key
    topic_b = topic.encode("utf-8")
    files = _offset_files(qdir, r, str(qdir.relative_to(root)))
    r.counts["cq_queues"] += 1
    r.counts["cq_files"] += len(files)
    qrel = str(qdir.relative_to(root))
    if files:
        _check_names(files, root, r, ProblemKind.CQ_FILES)
    prev_phy = -1
    real_seen = False
    end_index: int | None = None  # units [.., end_index) hold data; zeros from there
    last_index = int(files[0].name) // CQ_STORE_UNIT_SIZE if files else 0
    counts = r.counts
    for p in files:
        rel = str(p.relative_to(root))
        start = int(p.name)
        with _mapped(p) as mm:
            if mm is None:
                continue
            if end_index is not None:
                nz = _first_nonzero(mm, 0, len(mm))
                if nz >= 0:
                    r.add(ProblemKind.CQ_FILES, rel, nz, f"holds units, but the queue's units ended at unit "
                                                         f"{end_index} (zeros in the middle of the queue)")
                continue
            n = len(mm) // CQ_STORE_UNIT_SIZE
            data = mm[:n * CQ_STORE_UNIT_SIZE]
            first = start // CQ_STORE_UNIT_SIZE
            for i, (phy, sz, tags) in enumerate(UNIT.iter_unpack(data)):
                index = first + i
                pos = i * CQ_STORE_UNIT_SIZE
                if phy == 0 and sz == 0 and tags == 0:
                    end_index = index
                    nz = _first_nonzero(mm, pos, len(mm))
                    if nz >= 0:
                        r.add(ProblemKind.CQ_FILES, rel, nz, f"non-zero bytes after the queue's last unit {index - 1}")
                    break
                if phy == 0 and sz == _PRE_BLANK_SIZE:
                    counts["cq_units_pre_blank"] += 1
                    if real_seen:
                        r.add(ProblemKind.CQ_UNIT, rel, pos, f"unit {index}: a pre-blank unit after real units")
                    continue
                real_seen = True
                if phy < 0 or sz <= 0:
                    r.add(ProblemKind.CQ_UNIT, rel, pos, f"unit {index}: invalid (offset {phy}, size {sz})")
                    continue
                if phy <= prev_phy:
                    r.add(ProblemKind.CQ_UNIT, rel, pos, f"unit {index}: offset {phy} is not after the previous "
                                                         f"unit's {prev_phy}")
                prev_phy = phy
                if phy < log.min_offset:
                    counts["cq_units_expired"] += 1
                    continue
                counts["cq_units"] += 1
                if phy + sz > log.end:
                    _past_end(r, ProblemKind.CQ_UNIT, rel, pos,
                              f"unit {index}: record ({phy}, {sz}) ends past the end of the log's data {log.end}")
                    continue
                got = log.header_at(phy)
                if isinstance(got, str):
                    r.add(ProblemKind.CQ_UNIT, rel, pos, f"unit {index}: names offset {phy}, but {got}")
                    continue
                total, rqid, rqoff, rtopic = got
                if rtopic != topic_b or rqid != qid:
                    r.add(ProblemKind.CQ_UNIT, rel, pos, f"unit {index}: the record at {phy} belongs to "
                                                         f"{rtopic.decode('utf-8', 'replace')}/{rqid}")
                elif total != sz:
                    r.add(ProblemKind.CQ_UNIT, rel, pos, f"unit {index}: size {sz}, the record at {phy} has {total}")
                elif rqoff != index:
                    r.add(ProblemKind.CQ_UNIT, rel, pos, f"unit {index}: the record at {phy} has queue offset {rqoff}")
            if end_index is None:
                last_index = first + n
    if end_index is None:
        end_index = last_index
    last = log.queues.get(key)
    if last is not None and end_index <= last[0]:
        _incomplete(r, qrel, -1, f"the queue ends at unit {end_index}, but the log holds its queue offset {last[0]} "
                                 f"at {last[1]}")


# ---- index ----------------------------------------------------------------------------------------------------


def _index_layout(size: int, opts: CheckOptions) -> tuple[int, int] | None:
    """(hash slots, entries) of an index file of this length: the given ones when they fit, else inferred."""
    if opts.index_hash_slot_num is not None and opts.index_num is not None:
        slots, num = opts.index_hash_slot_num, opts.index_num
        return (slots, num) if HEADER_SIZE + slots * 4 + num * INDEX_SIZE == size else None
    per = 4 + _INDEX_NUM_PER_SLOT * INDEX_SIZE
    if size <= HEADER_SIZE or (size - HEADER_SIZE) % per:
        return None
    slots = (size - HEADER_SIZE) // per
    return slots, slots * _INDEX_NUM_PER_SLOT


def _record_keys(q: DispatchRequest) -> list[str]:
    """What IndexService.buildIndex files a record under (after ``topic#``): UNIQ_KEY and each KEYS token."""
    keys = [q.uniq_key] if q.uniq_key is not None else []
    keys += [k for k in q.keys.split(mc.KEY_SEPARATOR) if k]
    return keys


def _check_index(root: Path, log: _Log, r: CheckReport, opts: CheckOptions) -> None:
    d = root / "index"
    if not d.is_dir():
        return
    for p in sorted(d.iterdir()):
        if not (p.is_file() and p.name.isdigit()):
            r.warn(f"index: ignored {p.name} (not an index file name)")
            continue
        r.counts["index_files"] += 1
        _check_index_file(p, str(p.relative_to(root)), log, r, opts)
        log.drop_pages()


def _check_index_file(p: Path, rel: str, log: _Log, r: CheckReport, opts: CheckOptions) -> None:
    with _mapped(p) as mm:
        if mm is None:
            r.warn(f"{rel}: empty (a crash while creating it; the broker deletes it at load)")
            return
        layout = _index_layout(len(mm), opts)
        if layout is None:
            r.add(ProblemKind.INDEX_FILE, rel, -1, f"length {len(mm)} fits no index layout (give --index-slots and "
                                                   "--index-num: maxHashSlotNum, maxIndexNum)")
            return
        slots_n, num = layout
        _b_ts, _e_ts, _b_phy, _e_phy, _slot_count, count = _INDEX_HEADER.unpack_from(mm, 0)
        count = max(count, 1)  # IndexHeader.load: a count <= 0 reads as 1
        if count > num:
            r.add(ProblemKind.INDEX_FILE, rel, 36, f"indexCount {count} exceeds the file's {num} entries")
            count = num
        entries_at = HEADER_SIZE + slots_n * 4
        slots = np.frombuffer(mm, ">i4", slots_n, HEADER_SIZE)
        ents = np.frombuffer(mm, _ENTRY_DTYPE, count - 1, entries_at + INDEX_SIZE)  # entry 0 is never written
        try:
            bad = np.flatnonzero((slots < 0) | (slots >= count))
            for s in bad[: r.max_per_kind].tolist():
                r.add(ProblemKind.INDEX_FILE, rel, HEADER_SIZE + 4 * s, f"slot {s} names entry {int(slots[s])}, "
                                                                        f"past the {count - 1} entries")
            r.totals[ProblemKind.INDEX_FILE] += max(0, len(bad) - r.max_per_kind)
            used = np.flatnonzero((slots > 0) & (slots < count))
            wrong = used[(ents["hash"][slots[used] - 1].astype(np.int64) % slots_n) != used]
            for s in wrong[: r.max_per_kind].tolist():
                r.add(ProblemKind.INDEX_FILE, rel, HEADER_SIZE + 4 * s, f"slot {s} heads a chain whose entry "
                                                                        f"{int(slots[s])} hashes to another slot")
            r.totals[ProblemKind.INDEX_FILE] += max(0, len(wrong) - r.max_per_kind)
            numbers = np.arange(1, count, dtype=np.int64)
            prev = ents["prev"].astype(np.int64)
            for n in numbers[(prev < 0) | (prev >= numbers)][: r.max_per_kind].tolist():
                r.add(ProblemKind.INDEX_FILE, rel, entries_at + n * INDEX_SIZE + 16,
                      f"entry {n}: chain link {int(prev[n - 1])} is not an older entry")
            hashes = ents["hash"].astype(np.int64)
            phys = ents["phy"].astype(np.int64)
        finally:
            del slots, ents
    _check_index_entries(rel, entries_at, hashes, phys, log, r)


def _check_index_entries(rel: str, entries_at: int, hashes: np.ndarray, phys: np.ndarray, log: _Log,
                         r: CheckReport) -> None:
    """Each entry's hash against the keys of the record it names, a chunk of entries at a time: the records are
    parsed in runs, their ``topic#key`` strings hashed together (``hash_codes``) as IndexService builds them,
    and the entries matched against them with array operations."""
    counts = r.counts
    numbers = np.arange(1, len(phys) + 1, dtype=np.int64)
    expired = phys < log.min_offset
    past = ~expired & (phys >= log.end)
    counts["index_entries_expired"] += int(expired.sum())
    counts["index_entries"] += int((~expired).sum())
    for n, phy in zip(numbers[past][: r.max_per_kind].tolist(), phys[past][: r.max_per_kind].tolist(), strict=True):
        _past_end(r, ProblemKind.INDEX_ENTRY, rel, entries_at + n * INDEX_SIZE,
                  f"entry {n}: offset {phy} is past the end of the log's data {log.end}")
    if r.clean_stop:
        r.totals[ProblemKind.INDEX_ENTRY] += max(0, int(past.sum()) - r.max_per_kind)
    live = ~expired & ~past
    for lo in range(0, len(phys), _INDEX_CHUNK):
        sel = live[lo:lo + _INDEX_CHUNK]
        e_phy, e_hash, e_num = phys[lo:lo + _INDEX_CHUNK][sel], hashes[lo:lo + _INDEX_CHUNK][sel], \
            numbers[lo:lo + _INDEX_CHUNK][sel]
        if not len(e_phy):
            continue
        wanted_sorted = np.unique(e_phy).tolist()
        wanted = set(wanted_sorted)
        reqs: dict[int, DispatchRequest] = {}
        for phy in wanted_sorted:
            if phy not in reqs:
                reqs.update(log.requests_from(phy, wanted, _INDEX_RUN))
        strings: list[str] = []
        owners: list[int] = []
        for phy in sorted(reqs):
            q = reqs[phy]
            for k in _record_keys(q):
                strings.append(f"{q.topic}#{k}")
                owners.append(phy)
        k_phy = np.array(owners, dtype=np.int64)
        k_hash = np.abs(np.array(hash_codes(strings), dtype=np.int64))
        k_hash[k_hash == -_INT_MIN] = 0  # IndexFile.indexKeyHashMethod: abs, and 0 for Integer.MIN_VALUE
        first = np.searchsorted(k_phy, e_phy, "left")
        stop = np.searchsorted(k_phy, e_phy, "right")
        found = np.zeros(len(e_phy), dtype=bool)
        for d in range(int((stop - first).max(initial=0))):  # a record's keys lie side by side
            at = first + d
            inside = at < stop
            found[inside] |= k_hash[at[inside]] == e_hash[inside]
        for i in np.flatnonzero(~found).tolist():
            n, phy, h = int(e_num[i]), int(e_phy[i]), int(e_hash[i])
            pos = entries_at + n * INDEX_SIZE
            if first[i] == stop[i]:
                why = "no record starts there" if phy not in reqs else "the record there has no keys"
                r.add(ProblemKind.INDEX_ENTRY, rel, pos, f"entry {n}: names offset {phy}, but {why}")
            else:
                r.add(ProblemKind.INDEX_ENTRY, rel, pos, f"entry {n}: hash {h} matches no topic#key of the record "
                                                         f"at {phy}")


# ---- checkpoint -----------------------------------------------------------------------------------------------


def _check_checkpoint(root: Path, log: _Log, r: CheckReport) -> None:
    p = root / "checkpoint"
    if not p.is_file():
        if r.counts["commitlog_records"]:
            r.warn("no checkpoint file")
        return
    raw = p.read_bytes()
    if len(raw) < _CKPT.size:
        r.add(ProblemKind.CHECKPOINT, "checkpoint", -1, f"length {len(raw)} is short of the {_CKPT.size} bytes of "
                                                        "its three times")
        return
    physic, logics, index = _CKPT.unpack_from(raw, 0)
    newest = log.max_store_ts
    for name, ts, strict in (("physicMsgTimestamp", physic, True), ("logicsMsgTimestamp", logics, r.clean_stop),
                             ("indexMsgTimestamp", index, True)):
        if ts > newest:
            reason = f"{name} {ts} is after the newest record's store time {newest}"
            if strict:
                r.add(ProblemKind.CHECKPOINT, "checkpoint", 0, reason)
            else:
                r.warn(f"checkpoint: {reason}")
    if len(raw) >= _CKPT_OFFSETS_AT + _CKPT_OFFSETS.size:
        for name, off, at in zip(("physicMsgOffset", "logicsMsgOffset"),
                                 _CKPT_OFFSETS.unpack_from(raw, _CKPT_OFFSETS_AT), (40, 48), strict=True):
            if off > log.end:
                r.add(ProblemKind.CHECKPOINT, "checkpoint", at, f"{name} {off} is past the end of the log's data "
                                                                f"{log.end}")
