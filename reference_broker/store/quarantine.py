"""Quarantine: the commit-log bytes recovery cuts are copied aside, fsynced, and only then cut.

RocketMQ 4.9.8 (CommitLog.recoverNormally / recoverAbnormally, then MappedFileQueue.truncateDirtyFiles) ends
the log at the first record that fails its check and drops everything after it: one damaged record in the
middle of a file takes every intact record behind it. Deliberate difference: before the cut, this module
copies every non-zero byte it would remove into ``{storePathRootDir}/quarantine/`` (names and sidecar in
common/quarantine_names.py), fsyncs the copy and the directory, and logs at ERROR how many bytes and how many
intact records were cut. All-zero tails (the normal end of written data, pre-allocated space) are not
copied. When the copy cannot be made (no space, I/O error) recovery raises ``QuarantineError`` and the store
refuses to load: cutting without a copy would destroy data, and starting without cutting would append new
records where the damaged ones are.

Consume-queue truncation (consume_queue.py) needs no quarantine: its units are derived data, rebuilt from
the commit log.
"""

from __future__ import annotations

import json
import logging
import mmap
import os
import time
from dataclasses import dataclass
from pathlib import Path

from reference_broker.common import quarantine_names as qn
from reference_broker.common import record as rec
from reference_broker.store.mapped_file import MappedFile, fsync_dir

log = logging.getLogger(__name__)

_CHUNK = 1 << 20
_MAGIC = rec.INT.pack(rec.MESSAGE_MAGIC_CODE)
_MAGIC_V2 = rec.INT.pack(rec.MESSAGE_MAGIC_CODE_V2)


class QuarantineError(RuntimeError):
    """The bytes recovery must cut could not be preserved: the store refuses to cut them (and to load)."""


@dataclass(frozen=True, slots=True)
class IntactCount:
    records: int
    bytes: int
    first_offset: int  # -1: none


# ---- sans-IO -------------------------------------------------------------------------------------------
def count_intact(data: bytes | mmap.mmap, base_offset: int, start: int = 0, end: int | None = None) -> IntactCount:
    """Records in ``data[start:end]`` (commit-log bytes, ``data[0]`` at absolute ``base_offset``) that parse
    with a good BODYCRC and carry their own offset in PHYSICALOFFSET: intact messages. After damage the next
    record boundary is unknown, so it is searched for by magic code; the offset check rules out records
    quoted inside bodies. ``data`` may be a mapping: nothing is copied but the records themselves."""
    with memoryview(data) as view:  # released on return: a mapping with a live view cannot be closed
        return _count_intact(data, view, base_offset, start, len(data) if end is None else end)


def _count_intact(data: bytes | mmap.mmap, view: memoryview, base_offset: int, start: int, n: int) -> IntactCount:
    records = total = 0
    first = -1
    pos = start
    while pos < n:
        cands = [p for p in (data.find(_MAGIC, pos + 4, n), data.find(_MAGIC_V2, pos + 4, n)) if p >= 0]
        if not cands:
            break
        at = min(cands) - 4
        while at < n:
            req = rec.check_message_and_return_size(view, at, n, True)
            if not req.success or req.msg_size <= 0 or req.commit_log_offset != base_offset + at:
                break
            records += 1
            total += req.msg_size
            if first < 0:
                first = base_offset + at
            at += req.msg_size
        pos = at + 1
    return IntactCount(records, total, first)


# ---- I/O -----------------------------------------------------------------------------------------------
def data_end(mf: MappedFile, pos: int) -> int:
    """One past the last non-zero byte of ``mf`` at or after ``pos`` (``pos`` when there is none).

    Holes (sparse or never-written space) are skipped with SEEK_DATA/SEEK_HOLE where the file system knows
    them; the rest is read backwards a chunk at a time, so a zero tail costs one pass over its pages."""
    size = mf.file_size
    regions: list[tuple[int, int]] = []
    try:
        fd = os.open(mf.path, os.O_RDONLY)
        try:
            p = pos
            while p < size:
                try:
                    s = os.lseek(fd, p, os.SEEK_DATA)
                except OSError:  # ENXIO: only a hole from here
                    break
                if s >= size:
                    break
                e = min(size, os.lseek(fd, s, os.SEEK_HOLE))
                regions.append((max(s, pos), e))
                p = e
        finally:
            os.close(fd)
    except OSError:
        regions = [(pos, size)]
    buf = mf.buf
    for s, e in reversed(regions):
        hi = e
        while hi > s:
            lo = max(s, hi - _CHUNK)
            chunk = bytes(buf[lo:hi])
            stripped = len(chunk.rstrip(b"\x00"))
            if stripped:
                return lo + stripped
            hi = lo
    return pos


def _write_durably(path: Path, data: bytes | memoryview) -> None:
    """Write, fsync, rename (a reader never sees a partial file under the final name)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            for lo in range(0, len(data), _CHUNK * 16):  # from the mapping, 16 MiB at a time: no copy of a file
                f.write(data[lo : lo + _CHUNK * 16])
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _preserve_one(qdir: Path, root: Path, mf: MappedFile, pos: int, end: int, reason: str) -> qn.QuarantineEntry:
    offset = mf.file_from_offset + pos
    intact = count_intact(mf.mm, mf.file_from_offset, pos, end)
    size = end - pos
    now_ms = time.time_ns() // 1_000_000
    stem = qn.quarantine_stem(mf.file_name, offset, now_ms)
    try:
        source = str(mf.path.relative_to(root))
    except ValueError:
        source = str(mf.path)
    entry = qn.QuarantineEntry(stem, source, offset, size, intact.records, intact.bytes,
                               intact.first_offset, now_ms, reason)
    bin_path = qdir / (stem + qn.BIN_SUFFIX)
    meta_path = qdir / (stem + qn.META_SUFFIX)
    try:
        with mf.buf[pos:end] as data:  # released before recovery may unmap the file
            _write_durably(bin_path, data)
        _write_durably(meta_path, json.dumps(entry.to_json(), sort_keys=True).encode())
    except OSError as e:
        bin_path.unlink(missing_ok=True)
        meta_path.unlink(missing_ok=True)
        raise QuarantineError(
            f"cannot quarantine {size:,} bytes of {mf.path} from offset {offset} ({intact.records} intact "
            f"records) into {qdir}: {e}. Recovery refuses to cut them without a copy; free space under {qdir} "
            "(or copy the commit log away) and start again") from e
    return entry


def preserve_cut(files: list[MappedFile], offset: int, root: Path, reason: str) -> list[qn.QuarantineEntry]:
    """Copy what ``truncate_dirty_files(offset)`` is about to remove from ``files`` (the commit log's) into
    the quarantine directory; QuarantineError when a copy cannot be made durable (nothing is cut then)."""
    qdir = root / qn.QUARANTINE_DIR
    out: list[qn.QuarantineEntry] = []
    for mf in files:
        if mf.file_from_offset + mf.file_size <= offset:
            continue
        pos = max(0, offset - mf.file_from_offset)
        end = data_end(mf, pos)
        if end <= pos:
            continue  # an all-zero tail: the normal end of the data
        try:
            qdir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise QuarantineError(f"cannot create {qdir}: {e}; recovery refuses to cut {mf.path}") from e
        entry = _preserve_one(qdir, root, mf, pos, end, reason)
        out.append(entry)
    if out:
        try:
            fsync_dir(qdir)
        except OSError as e:
            raise QuarantineError(f"cannot fsync {qdir}: {e}; recovery refuses to cut") from e
        for entry in out:
            log.error("recovery cut %d bytes of the commit log at offset %d (%s; %d intact records, %d bytes, "
                      "after the damage): preserved in %s", entry.bytes, entry.offset, entry.source,
                      entry.intact_records, entry.intact_bytes, qdir / (entry.name + qn.BIN_SUFFIX))
    return out


def list_quarantine(root: Path) -> list[qn.QuarantineEntry]:
    """The store's quarantined cuts, oldest first (sidecars that do not parse are left out)."""
    qdir = root / qn.QUARANTINE_DIR
    try:
        names = sorted(p for p in qdir.iterdir() if p.name.endswith(qn.META_SUFFIX))
    except OSError:
        return []
    out = []
    for p in names:
        try:
            text = p.read_text(encoding="utf-8")
        except OSError:
            continue
        entry = qn.parse_sidecar(p.name[: -len(qn.META_SUFFIX)], text)
        if entry is not None:
            out.append(entry)
    out.sort(key=lambda e: (e.time_ms, e.offset))
    return out
