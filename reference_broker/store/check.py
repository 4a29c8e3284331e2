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
  blank ends a file; after the last record of the data the rest is zeros, and so is every later file. The
  log may end inside its last record (a *torn tail*: a valid header, the record's first bytes, then zeros)
  where that is expected — a slave's store (``--slave``: replication sends byte ranges, and a master that
  stops mid-transfer leaves the slave's log inside a record, as 4.9.8's appendData does) or a store not
  cleanly stopped — and recovery cuts it (CommitLog.recoverNormally / recoverAbnormally): a warning then,
  a problem on a cleanly stopped master, whose writer only ever publishes whole records;
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

import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np

from reference_broker.common import message as mc
from reference_broker.common.dispatch import DispatchRequest
from reference_broker.common.java_hash import hash_codes
from reference_broker.store.check_log import CommitLogView, check_names, first_nonzero, mapped, offset_files
from reference_broker.store.check_report import CheckReport, ProblemKind
from reference_broker.store.consume_queue import CQ_STORE_UNIT_SIZE, UNIT
from reference_broker.store.index_format import ENTRY_DTYPE, HEADER, HEADER_SIZE, INDEX_SIZE

_CKPT: Final = struct.Struct(">qqq")
_CKPT_OFFSETS: Final = struct.Struct(">qq")
_CKPT_OFFSETS_AT: Final = 40
_PRE_BLANK_SIZE: Final = 0x7FFFFFFF  # ConsumeQueue.fillPreBlank: (0, Integer.MAX_VALUE, 0)
# RocketMQ's default index layout keeps maxIndexNum = 4 x maxHashSlotNum (5,000,000 / 20,000,000), and so do
# this project's test and chaos settings: a length alone then names the layout.
_INDEX_NUM_PER_SLOT: Final = 4
_INDEX_CHUNK: Final = 8192  # index entries checked together
_INDEX_RUN: Final = 32  # records parsed per run while looking for the ones entries name
_INT_MIN: Final = -(2**31)
_ZERO_TAIL_SLACK: Final = 3  # a torn tail's first bytes, zero for any record shorter than 256 bytes


@dataclass(frozen=True)
class CheckOptions:
    index_hash_slot_num: int | None = None  # maxHashSlotNum; None: inferred from the file length
    index_num: int | None = None  # maxIndexNum
    max_per_kind: int = 50
    slave: bool = False  # a slave's store: a torn tail is expected (check_log.CommitLogView._torn_tail)


def check_store(root: Path, options: CheckOptions | None = None) -> CheckReport:
    """Check the store at ``root`` (storePathRootDir) without modifying it."""
    opts = options or CheckOptions()
    report = CheckReport(str(root), max_per_kind=opts.max_per_kind, slave=opts.slave)
    t0 = time.monotonic()
    if not root.is_dir() or not (root / "commitlog").is_dir():
        report.add(ProblemKind.NOT_A_STORE, str(root), -1, "not a store: no commitlog/ directory here")
        return report
    if (root / "abort").exists():
        report.clean_stop = False
        report.warn("abort file present: the broker was not cleanly stopped (recovery will run at its next start)")
        report.relaxed += ["consume queues complete up to the end of the log", "units and index entries past the "
                           "end of the log", "logicsMsgTimestamp not past the data"]
    log = CommitLogView(root, report)
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


def _check_consume_queues(root: Path, log: CommitLogView, report: CheckReport) -> None:
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


def _check_queue(root: Path, qdir: Path, key: tuple[str, int], log: CommitLogView, r: CheckReport) -> None:
    topic, qid = key
    topic_b = topic.encode("utf-8")
    files = offset_files(qdir, r, str(qdir.relative_to(root)))
    r.counts["cq_queues"] += 1
    r.counts["cq_files"] += len(files)
    qrel = str(qdir.relative_to(root))
    if files:
        check_names(files, root, r, ProblemKind.CQ_FILES)
    prev_phy = -1
    real_seen = False
    end_index: int | None = None  # units [.., end_index) hold data; zeros from there
    last_index = int(files[0].name) // CQ_STORE_UNIT_SIZE if files else 0
    counts = r.counts
    for p in files:
        rel = str(p.relative_to(root))
        start = int(p.name)
        with mapped(p) as mm:
            if mm is None:
                continue
            if end_index is not None:
                nz = first_nonzero(mm, 0, len(mm))
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
                    nz = first_nonzero(mm, pos, len(mm))
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


def _check_index(root: Path, log: CommitLogView, r: CheckReport, opts: CheckOptions) -> None:
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


def _check_index_file(p: Path, rel: str, log: CommitLogView, r: CheckReport, opts: CheckOptions) -> None:
    with mapped(p) as mm:
        if mm is None:
            r.warn(f"{rel}: empty (a crash while creating it; the broker deletes it at load)")
            return
        layout = _index_layout(len(mm), opts)
        if layout is None:
            r.add(ProblemKind.INDEX_FILE, rel, -1, f"length {len(mm)} fits no index layout (give --index-slots and "
                                                   "--index-num: maxHashSlotNum, maxIndexNum)")
            return
        slots_n, num = layout
        _b_ts, _e_ts, _b_phy, _e_phy, _slot_count, count = HEADER.unpack_from(mm, 0)
        count = max(count, 1)  # IndexHeader.load: a count <= 0 reads as 1
        if count > num:
            r.add(ProblemKind.INDEX_FILE, rel, 36, f"indexCount {count} exceeds the file's {num} entries")
            count = num
        entries_at = HEADER_SIZE + slots_n * 4
        slots = np.frombuffer(mm, ">i4", slots_n, HEADER_SIZE)
        ents = np.frombuffer(mm, ENTRY_DTYPE, count - 1, entries_at + INDEX_SIZE)  # entry 0 is never written
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


def _check_index_entries(rel: str, entries_at: int, hashes: np.ndarray, phys: np.ndarray, log: CommitLogView,
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


def _check_checkpoint(root: Path, log: CommitLogView, r: CheckReport) -> None:
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
    # Where a torn tail is expected, its bytes were written and flushed, whole or not; and a tail of up to 3
    # bytes is zeros a scan cannot tell from unwritten space (the high bytes of a record's length).
    slack = _ZERO_TAIL_SLACK if r.slave or not r.clean_stop else 0
    if len(raw) >= _CKPT_OFFSETS_AT + _CKPT_OFFSETS.size:
        for name, off, at in zip(("physicMsgOffset", "logicsMsgOffset"),
                                 _CKPT_OFFSETS.unpack_from(raw, _CKPT_OFFSETS_AT), (40, 48), strict=True):
            if off > log.written_end + slack:
                r.add(ProblemKind.CHECKPOINT, "checkpoint", at, f"{name} {off} is past the end of the log's data "
                                                                f"{log.end}")
