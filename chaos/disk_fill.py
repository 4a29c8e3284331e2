"""This module owns the disk-fill fault: the store on a small loop-mounted filesystem, a filler file that takes
space until use passes 90 %, and the checks of RocketMQ's self-protection (docs/claims.md, `disk-full-protection`;
4.9.8 DefaultMessageStore.CleanCommitLogService.isSpaceToDelete):

- each cycle: fill past diskSpaceWarningLevelRatio (0.90); the broker must refuse sends with
  SERVICE_NOT_AVAILABLE (14) and RocketMQ's remark ("... the broker's disk is full ..."), keep serving pulls,
  and accept sends again once the filler is gone;
- ENOSPC phase: leave less free space than one commit-log file but stay under the watermarks, and produce
  until the broker must create its next commit-log file: the creation fails (CREATE_MAPEDFILE_FAILED →
  SYSTEM_ERROR, "create mapped file failed ..."), the broker stays up, and writes resume when space is freed;
- cleaning phase: fill into the 85-90 % band (diskSpaceCleanForciblyRatio): the cleaner must delete old
  commit-log files (whatever their age) and bring use down. The store's cleaner first runs 60 s after the
  broker starts (RocketMQ's initial delay; not configurable here), so the phase waits for that if needed.

The disk use is measured as the broker measures it (UtilAll.getDiskPartitionSpaceUsedPercent: total minus
all free blocks, over total). The producer is paced (``rate``) so the store itself does not fill the small
disk between the cycles; the ENOSPC phase lifts the pace to reach the end of the current file quickly.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from chaos.experiment import Cell, CycleRecord, Fault, FaultName, FlushMode
from chaos.leftovers import Ledger
from chaos.load import LoadSpec
from chaos.loopfs import LoopFs, unsupported_reason
from harness.records import FaultKind
from reference_broker.client import MQClientError, PullConsumer, PullStatus
from reference_broker.remoting.codes import ResponseCode

DISK_FULL_REMARK = "disk is full"  # in SERVICE_NOT_AVAILABLE's remark (DefaultMessageStore, 4.9.8)
CREATE_FILE_REMARK = "create mapped file failed"  # CREATE_MAPEDFILE_FAILED's remark (SendMessageProcessor)
CLEAN_INITIAL_DELAY_S = 60.0  # DefaultMessageStore.addScheduleTask: cleanFilesPeriodically starts after 60 s
WATERMARK_FULL = 0.90  # diskSpaceWarningLevelRatio
WATERMARK_FORCIBLY = 0.85  # diskSpaceCleanForciblyRatio
DISK_FREE_KIND = "disk_free"  # faults.jsonl kind closing a disk_fill interval


def used_ratio(path: Path) -> float:
    st = os.statvfs(path)
    total = st.f_blocks * st.f_frsize
    return (total - st.f_bfree * st.f_frsize) / total if total else -1.0


class Filler:
    """A file on the filesystem under test that takes space on demand (fallocate, as ChaosBlade's disk fill)."""

    def __init__(self, mountpoint: Path) -> None:
        self.mountpoint = mountpoint
        self.path = mountpoint / "filler"

    def total(self) -> int:
        st = os.statvfs(self.mountpoint)
        return st.f_blocks * st.f_frsize

    def free_bytes(self) -> int:
        st = os.statvfs(self.mountpoint)
        return st.f_bfree * st.f_frsize

    def take(self, nbytes: int) -> int:
        """Grow the filler by ``nbytes`` (clamped to what is free), or shrink it for a negative ``nbytes``;
        returns its new size."""
        size = self.path.stat().st_size if self.path.exists() else 0
        if nbytes < 0:
            new = max(0, size + nbytes)
            if self.path.exists():
                os.truncate(self.path, new)  # frees the blocks past the new end
            return new
        nbytes = min(nbytes, self.free_bytes() - 4096)
        if nbytes > 0:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                os.posix_fallocate(fd, size, nbytes)
                os.fsync(fd)
            finally:
                os.close(fd)
            size += nbytes
        return size

    def fill_to_ratio(self, ratio: float) -> int:
        return self.take(int(ratio * self.total()) - (self.total() - self.free_bytes()))

    def leave_free(self, nbytes: int) -> int:
        return self.take(self.free_bytes() - nbytes)

    def release(self) -> None:
        self.path.unlink(missing_ok=True)


def _wait_error(cell: Cell, after_ns: int, code: int, timeout_s: float) -> tuple[int, str] | None:
    """The first send failure with ``code`` that ended after ``after_ns``: (end_ns, remark)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for end, c, remark in list(cell.workload.recent_errors):
            if end > after_ns and c == code:
                return end, remark
        time.sleep(0.05)
    return None


def probe_pull(cell: Cell) -> str | None:
    """Pull one batch from each queue with a separate consumer group: None if the broker answered every pull
    (messages or none), else what went wrong."""
    pc = PullConsumer("CHAOS_PROBE", cell.topo.namesrv_addr)
    try:
        pc.start()
        for mq in sorted(pc.fetch_message_queues(cell.spec.load.topic)):
            r = pc.pull(mq, "*", pc.min_offset(mq), 8, timeout_s=5.0)
            if r.pull_status not in (PullStatus.FOUND, PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG):
                return f"{mq}: {r.pull_status.value}"
    except MQClientError as e:
        return f"pull failed: {e}"
    finally:
        pc.shutdown()
    return None


class DiskFill(Fault):
    name = FaultName.DISK_FILL

    def __init__(self, image_bytes: int = 64 << 20, commit_log_file_bytes: int = 12 << 20, fill_ratio: float = 0.93,
                 rate: float = 200.0, enospc: bool = True, clean: bool = True,
                 clean_wait_s: float = CLEAN_INITIAL_DELAY_S + 30) -> None:
        self.image_bytes = image_bytes
        self.commit_log_file_bytes = commit_log_file_bytes
        self.fill_ratio = fill_ratio
        self.rate = rate
        self.enospc = enospc
        self.clean = clean
        self.clean_wait_s = clean_wait_s
        self.fs: LoopFs | None = None
        self.filler: Filler | None = None
        self.started = time.monotonic()

    def unsupported_reason(self) -> str | None:
        return unsupported_reason()

    def params(self) -> dict[str, Any]:
        return {"image_bytes": self.image_bytes, "commit_log_file_bytes": self.commit_log_file_bytes,
                "fill_ratio": self.fill_ratio, "rate": self.rate, "enospc": self.enospc, "clean": self.clean}

    def load_spec(self, load: LoadSpec) -> LoadSpec:
        return load if load.rate > 0 else replace(load, rate=self.rate)

    def broker_conf(self, flush: FlushMode) -> dict[str, str]:
        # A small index (RocketMQ's default file is 420 MB) and a 1 s cleaning interval (10 s by default).
        return {"mappedFileSizeCommitLog": str(self.commit_log_file_bytes), "maxHashSlotNum": "20000",
                "maxIndexNum": "80000", "cleanResourceInterval": "1000"}

    @contextlib.contextmanager
    def storage(self, work: Path, ledger: Ledger) -> Iterator[Path]:
        with LoopFs.create(work / "small.img", self.image_bytes, work / "mnt", ledger) as fs:
            self.fs = fs
            self.filler = Filler(fs.mountpoint)
            self.started = time.monotonic()
            try:
                yield fs.mountpoint / "store"
            finally:
                self.filler.release()
                self.fs = None

    # ---- the watermark cycles -----------------------------------------------------------------------

    def cycle(self, cell: Cell, i: int) -> CycleRecord:
        assert self.filler is not None
        cell.workload.cleaning_expected = True
        cell.workload.wait_caught_up(5.0)  # cleaning may then delete only what was delivered already
        t0 = cell.clock.now_ns()
        size = self.filler.fill_to_ratio(self.fill_ratio)
        ratio = used_ratio(self.filler.mountpoint)
        cell.record.add_fault(FaultKind.DISK_FILL, cell.broker.name, ts_ns=t0, cycle=i, used_ratio=round(ratio, 4),
                              filler_bytes=size)
        rec = CycleRecord(cycle=i, kind=self.name.value, fault_ns=t0)
        rec.extra.update(used_ratio=round(ratio, 4), filler_bytes=size)
        refusal = _wait_error(cell, t0, ResponseCode.SERVICE_NOT_AVAILABLE, 10.0)
        status = cell.status()
        pull_problem = probe_pull(cell)
        rec.extra.update(disk_full_flag=status.disk_full if status else None, pull_problem=pull_problem)
        self.filler.release()
        t1 = cell.clock.now_ns()
        rec.restored_ns = t1
        cell.record.add_fault(DISK_FREE_KIND, cell.broker.name, ts_ns=t1, cycle=i,
                              used_ratio=round(used_ratio(self.filler.mountpoint), 4))
        if refusal is None:
            rec.ok, rec.error = False, f"no SERVICE_NOT_AVAILABLE within 10 s at disk use {ratio:.3f}"
        else:
            rec.extra.update(refused_after_s=round((refusal[0] - t0) / 1e9, 3), remark=refusal[1])
            if DISK_FULL_REMARK not in refusal[1]:
                rec.ok, rec.error = False, f"refusal without RocketMQ's disk-full remark: {refusal[1]!r}"
        if pull_problem is not None:
            rec.ok, rec.error = False, f"pulls not served while the disk was full: {pull_problem}"
        return rec

    # ---- ENOSPC and cleaning ------------------------------------------------------------------------

    def extra_phases(self, cell: Cell) -> list[CycleRecord]:
        out = []
        if self.enospc:
            out.append(self._enospc(cell))
        if self.clean and all(r.ok for r in out):
            out.append(self._cleaning(cell))
        return out

    def _enospc(self, cell: Cell) -> CycleRecord:
        assert self.filler is not None
        total = self.filler.total()
        # Free space below one commit-log file, but above the 85 % watermark: the next file cannot be created,
        # and nothing marks the disk full or cleans it first.
        floor = (1 - WATERMARK_FORCIBLY) * total
        t0 = cell.clock.now_ns()
        rec = CycleRecord(cycle=-1, kind="enospc", fault_ns=t0)
        if self.commit_log_file_bytes <= floor * 1.05:
            rec.extra["skipped"] = (f"a commit-log file ({self.commit_log_file_bytes} B) fits in the space above the "
                                    f"85 % watermark ({int(floor)} B): no ENOSPC without tripping the watermark")
            return rec
        leave = int((self.commit_log_file_bytes + floor) / 2)
        size = self.filler.leave_free(leave)
        ratio = used_ratio(self.filler.mountpoint)
        cell.record.add_fault(FaultKind.DISK_FILL, cell.broker.name, ts_ns=t0, phase="enospc", free_bytes=leave,
                              used_ratio=round(ratio, 4), filler_bytes=size)
        rec.extra.update(used_ratio=round(ratio, 4), free_bytes=self.filler.free_bytes(), filler_bytes=size)
        cell.workload.set_rate(0)  # reach the end of the current commit-log file
        try:
            failure = _wait_error(cell, t0, ResponseCode.SYSTEM_ERROR, 60.0)
        finally:
            cell.workload.set_rate(self.rate)
        status = cell.status()
        rec.extra.update(broker_alive=cell.broker.alive, status_readable=status is not None)
        self.filler.release()
        rec.restored_ns = cell.clock.now_ns()
        cell.record.add_fault(DISK_FREE_KIND, cell.broker.name, ts_ns=rec.restored_ns, phase="enospc")
        if failure is None:
            rec.ok, rec.error = False, "no CREATE_MAPEDFILE_FAILED refusal within 60 s"
        elif CREATE_FILE_REMARK not in failure[1]:
            rec.ok, rec.error = False, f"SYSTEM_ERROR without the create-file remark: {failure[1]!r}"
        else:
            rec.extra["remark"] = failure[1]
        if not cell.broker.alive or status is None:
            rec.ok, rec.error = False, "the broker did not survive ENOSPC"
        return rec

    def _cleaning(self, cell: Cell) -> CycleRecord:
        assert self.filler is not None
        rec = CycleRecord(cycle=-1, kind="clean", fault_ns=cell.clock.now_ns())
        wait = CLEAN_INITIAL_DELAY_S + 2 - (time.monotonic() - cell.broker_started)
        if wait > self.clean_wait_s:
            rec.extra["skipped"] = (f"the cleaner starts {CLEAN_INITIAL_DELAY_S:.0f} s after the broker; "
                                    f"{wait:.0f} s to go")
            return rec
        if wait > 0:
            time.sleep(wait)
        # The cleaner never deletes the file being written: make sure there is an older one.
        cell.workload.set_rate(0)
        try:
            deadline = time.monotonic() + 30.0
            while len(list((cell.store_root / "commitlog").glob("[0-9]" * 20))) < 2:
                if time.monotonic() > deadline:
                    rec.extra["skipped"] = "no second commit-log file within 30 s: nothing the cleaner may delete"
                    return rec
                time.sleep(0.1)
        finally:
            cell.workload.set_rate(self.rate)
        rec.extra["consumer_caught_up"] = cell.workload.wait_caught_up(10.0)
        before = cell.status()
        target = (WATERMARK_FORCIBLY + WATERMARK_FULL) / 2
        t0 = cell.clock.now_ns()
        size = self.filler.fill_to_ratio(target)
        ratio = used_ratio(self.filler.mountpoint)
        cell.record.add_fault(FaultKind.DISK_FILL, cell.broker.name, ts_ns=t0, phase="clean",
                              used_ratio=round(ratio, 4), filler_bytes=size)
        rec.fault_ns = t0
        rec.extra.update(used_ratio=round(ratio, 4), min_offset_before=before.min_offset if before else None)
        deadline = time.monotonic() + 20.0
        after = before
        while time.monotonic() < deadline:
            after = cell.status()
            if before is not None and after is not None and after.min_offset > before.min_offset:
                break
            time.sleep(0.25)
        # The space comes back when the file is unmapped too (a reader holding it delays that, up to
        # destroyMapedFileIntervalForcibly): reported, not judged.
        freed_deadline = time.monotonic() + 5.0
        while used_ratio(self.filler.mountpoint) >= ratio - 0.01 and time.monotonic() < freed_deadline:
            time.sleep(0.1)
        ratio_after = used_ratio(self.filler.mountpoint)
        self.filler.release()
        rec.restored_ns = cell.clock.now_ns()
        cell.record.add_fault(DISK_FREE_KIND, cell.broker.name, ts_ns=rec.restored_ns, phase="clean")
        rec.extra.update(min_offset_after=after.min_offset if after else None, used_ratio_after=round(ratio_after, 4))
        if before is None or after is None or after.min_offset <= before.min_offset:
            rec.ok, rec.error = False, (f"no commit-log file deleted within 20 s at disk use {ratio:.3f} "
                                        f"(min offset {before.min_offset if before else '?'} → "
                                        f"{after.min_offset if after else '?'})")
        return rec
