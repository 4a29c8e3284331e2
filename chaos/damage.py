"""This module owns deliberate damage to a stopped broker's store, for recovery tests beyond what the faults
produce: truncated files, zeroed tails, random bytes in the last pages of the commit log (or in its middle) and the
consume queues, a missing or corrupt checkpoint, a missing ``abort`` after a crash.

Every function works on files only (the broker must not be running) and returns a description of what it
changed, so a test can say what recovery had to cope with. Offsets are absolute commit-log offsets; the file
layout is RocketMQ's (``commitlog/<20-digit start offset>``, ``consumequeue/<topic>/<queueId>/<20-digit>``,
20-byte consume-queue units: long offset, int size, long tags code — ConsumeQueue.CQ_STORE_UNIT_SIZE).
"""

from __future__ import annotations

import enum
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Final

CQ_UNIT: Final = 20
PAGE: Final = 4096


class DamageKind(enum.StrEnum):
    TRUNCATE_COMMIT_LOG = "truncate_commit_log"  # the newest commit-log file cut short (mid-record)
    ZERO_COMMIT_LOG_TAIL = "zero_commit_log_tail"  # the last bytes of written data zeroed
    GARBLE_COMMIT_LOG_TAIL = "garble_commit_log_tail"  # random bytes over the last pages of written data
    GARBLE_COMMIT_LOG_MIDDLE = "garble_commit_log_middle"  # a few random bytes mid-file, intact records after
    TRUNCATE_CONSUME_QUEUE = "truncate_consume_queue"  # each queue's newest file cut short
    ZERO_CONSUME_QUEUE_TAIL = "zero_consume_queue_tail"  # each queue's last units zeroed
    GARBLE_CONSUME_QUEUE_TAIL = "garble_consume_queue_tail"  # random bytes over each queue's last page of units
    REMOVE_CHECKPOINT = "remove_checkpoint"
    CORRUPT_CHECKPOINT = "corrupt_checkpoint"  # random bytes over the whole checkpoint page
    REMOVE_ABORT = "remove_abort"  # after a crash: the store believes it was shut down cleanly


@dataclass(frozen=True)
class Damage:
    kind: DamageKind
    path: str
    start: int  # position in the file
    length: int
    note: str = ""


def commit_log_files(store_root: Path) -> list[Path]:
    return sorted(p for p in (store_root / "commitlog").iterdir() if p.name.isdigit())


def consume_queue_files(store_root: Path, topic: str) -> dict[int, list[Path]]:
    base = store_root / "consumequeue" / topic
    return {int(q.name): sorted(p for p in q.iterdir() if p.name.isdigit())
            for q in sorted(base.iterdir()) if q.name.isdigit()}


def locate(store_root: Path, offset: int) -> tuple[Path, int]:
    """The commit-log file holding absolute ``offset`` and the position in it."""
    files = commit_log_files(store_root)
    for p in reversed(files):
        start = int(p.name)
        if start <= offset:
            return p, offset - start
    raise ValueError(f"offset {offset} is before the first commit-log file")


def _write(path: Path, pos: int, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, pos)
        os.fsync(fd)
    finally:
        os.close(fd)


def truncate_commit_log(store_root: Path, data_end: int, cut_back: int = 100) -> Damage:
    """Cut the file holding ``data_end`` at ``data_end - cut_back`` (inside the last record)."""
    path, pos = locate(store_root, data_end - cut_back)
    os.truncate(path, pos)
    return Damage(DamageKind.TRUNCATE_COMMIT_LOG, str(path), pos, 0, f"file cut to {pos} bytes")


def zero_commit_log_tail(store_root: Path, data_end: int, nbytes: int) -> Damage:
    """Zero the last ``nbytes`` of written data (a tail that never reached the disk)."""
    path, pos = locate(store_root, data_end - nbytes)
    n = min(nbytes, path.stat().st_size - pos)
    _write(path, pos, bytes(n))
    return Damage(DamageKind.ZERO_COMMIT_LOG_TAIL, str(path), pos, n)


def garble_commit_log_tail(store_root: Path, data_end: int, pages: int, rng: random.Random) -> Damage:
    """Random bytes over the last ``pages`` 4 KiB pages of written data (page-aligned, within one file)."""
    path, end_pos = locate(store_root, data_end - 1)
    start = max(0, (end_pos // PAGE - pages + 1) * PAGE)
    n = end_pos + 1 - start
    _write(path, start, rng.randbytes(n))
    return Damage(DamageKind.GARBLE_COMMIT_LOG_TAIL, str(path), start, n)


def garble_commit_log_middle(store_root: Path, data_end: int, nbytes: int, rng: random.Random) -> Damage:
    """``nbytes`` random bytes in the middle of the written data of the file holding ``data_end // 2``: one
    damaged record (or two) with intact records after it, which recovery quarantines before it cuts."""
    path, pos = locate(store_root, data_end // 2)
    _write(path, pos, rng.randbytes(nbytes))
    return Damage(DamageKind.GARBLE_COMMIT_LOG_MIDDLE, str(path), pos, nbytes)


def last_unit_end(path: Path) -> int:
    """Bytes up to and including the last consume-queue unit that is not all zeros."""
    data = path.read_bytes()
    n = len(data) // CQ_UNIT
    zero = bytes(CQ_UNIT)
    while n > 0 and data[(n - 1) * CQ_UNIT:n * CQ_UNIT] == zero:
        n -= 1
    return n * CQ_UNIT


def _cq_tails(store_root: Path, topic: str) -> list[tuple[Path, int]]:
    """(newest file, end of its units) of every queue of ``topic`` that has units."""
    out = []
    for files in consume_queue_files(store_root, topic).values():
        for p in reversed(files):
            end = last_unit_end(p)
            if end:
                out.append((p, end))
                break
    return out


def truncate_consume_queues(store_root: Path, topic: str, units_back: int = 3, partial: int = 7) -> list[Damage]:
    """Cut each queue's newest file ``units_back`` units before its end, ``partial`` bytes into a unit."""
    out = []
    for path, end in _cq_tails(store_root, topic):
        pos = max(0, end - units_back * CQ_UNIT + partial)
        os.truncate(path, pos)
        out.append(Damage(DamageKind.TRUNCATE_CONSUME_QUEUE, str(path), pos, 0, f"file cut to {pos} bytes"))
    return out


def zero_consume_queue_tails(store_root: Path, topic: str, units: int = 5) -> list[Damage]:
    out = []
    for path, end in _cq_tails(store_root, topic):
        start = max(0, end - units * CQ_UNIT)
        _write(path, start, bytes(end - start))
        out.append(Damage(DamageKind.ZERO_CONSUME_QUEUE_TAIL, str(path), start, end - start))
    return out


def garble_consume_queue_tails(store_root: Path, topic: str, rng: random.Random) -> list[Damage]:
    """Random bytes over the page holding each queue's last units, up to their end."""
    out = []
    for path, end in _cq_tails(store_root, topic):
        start = ((end - 1) // PAGE) * PAGE
        _write(path, start, rng.randbytes(end - start))
        out.append(Damage(DamageKind.GARBLE_CONSUME_QUEUE_TAIL, str(path), start, end - start))
    return out


def remove_checkpoint(store_root: Path) -> Damage:
    path = store_root / "checkpoint"
    path.unlink(missing_ok=True)
    return Damage(DamageKind.REMOVE_CHECKPOINT, str(path), 0, 0)


def corrupt_checkpoint(store_root: Path, rng: random.Random) -> Damage:
    path = store_root / "checkpoint"
    size = path.stat().st_size
    _write(path, 0, rng.randbytes(size))
    return Damage(DamageKind.CORRUPT_CHECKPOINT, str(path), 0, size)


def remove_abort(store_root: Path) -> Damage:
    path = store_root / "abort"
    existed = path.exists()
    path.unlink(missing_ok=True)
    return Damage(DamageKind.REMOVE_ABORT, str(path), 0, 0, "removed" if existed else "was not there")
