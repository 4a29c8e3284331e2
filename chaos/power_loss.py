"""This module owns the power-loss fault: the broker's store lives on ext4 in a loop-mounted image; at a random
moment the broker is SIGKILLed and the image file copied at once, while the page cache still holds the dirty
pages that never reached the "disk"; the copy is mounted in place of the original and the broker restarted
on it — it finds exactly what a machine that lost power would find, mmap writes included (chaos.loopfs).

Each cycle records, from the broker's runtime info sampled right before the kill, the written and flushed
commit-log offsets (the unflushed window), and, from the crash image, the store checkpoint (the offset the
flush service had noted durable: ``physicMsgOffset``, our extension at byte 40 of the checkpoint page; see
reference_broker/common/checkpoint_layout.py). ``torn=True`` (the fault ``power_loss_torn``, recorded under that
name) then zeroes or garbles a few 4 KiB commit-log pages past the flushed position (chaos.torn) before the
restart. The sysctl profile in force decides how much the
kernel writes back on its own before the crash (vm.dirty_*); it is recorded in meta.json.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from chaos.experiment import Cell, CycleRecord, Fault, FaultName, FlushMode
from chaos.leftovers import Ledger
from chaos.loopfs import LoopFs, unsupported_reason
from chaos.torn import apply_torn_pages, candidate_range, choose_torn_pages
from reference_broker.common import checkpoint_layout


def read_checkpoint(path: Path) -> dict[str, int] | None:
    """The checkpoint's timestamps and offsets as the crash image holds them, under their RocketMQ names; None
    when the file is missing or shorter than the layout."""
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    if len(raw) < checkpoint_layout.LAYOUT_END:
        return None
    return checkpoint_layout.unpack(raw).rocketmq_names()


class PowerLoss(Fault):
    name = FaultName.POWER_LOSS

    def __init__(self, torn: bool = False, image_bytes: int = 768 << 20, torn_max_pages: int = 4) -> None:
        self.torn = torn
        if torn:
            self.name = FaultName.POWER_LOSS_TORN
        self.image_bytes = image_bytes
        self.torn_max_pages = torn_max_pages
        self.fs: LoopFs | None = None
        self.file_size = 0
        self.flush = FlushMode.ASYNC

    def unsupported_reason(self) -> str | None:
        return unsupported_reason()

    def params(self) -> dict[str, Any]:
        return {"torn": self.torn, "image_bytes": self.image_bytes, "torn_max_pages": self.torn_max_pages}

    def broker_conf(self, flush: FlushMode) -> dict[str, str]:
        self.flush = flush
        return {}

    @contextlib.contextmanager
    def storage(self, work: Path, ledger: Ledger) -> Iterator[Path]:
        with LoopFs.create(work / "disk.img", self.image_bytes, work / "mnt", ledger) as fs:
            self.fs = fs
            yield fs.mountpoint / "store"
            self.fs = None

    def cycle(self, cell: Cell, i: int) -> CycleRecord:
        assert self.fs is not None
        self.file_size = int(cell.broker.conf.get("mappedFileSizeCommitLog", 1 << 30))
        before = cell.status()
        in_flight = cell.workload.in_flight
        t_kill = cell.clock.now_ns()
        cell.broker.kill()
        # The copy first, before anything else touches the disk: every moment here is more kernel writeback.
        swap = self.fs.crash_swap()
        rec = CycleRecord(cycle=i, kind=self.name.value, fault_ns=t_kill,
                          written_offset=before.max_offset if before else -1,
                          flushed_offset=before.flushed_offset if before else -1)
        cell.settle_after_kill(rec, before)
        rec.extra.update(copy_s=round(swap.copy_s, 4), unmount_s=round(swap.unmount_s, 4),
                         mount_s=round(swap.mount_s, 4), image_allocated_bytes=swap.image_bytes_allocated,
                         checkpoint=read_checkpoint(cell.store_root / "checkpoint"))
        torn: list[dict[str, Any]] = []
        if self.torn:
            torn = self._tear(cell, rec)
        cell.record.add_fault(self.name.value, cell.broker.name, ts_ns=t_kill, cycle=i, torn=self.torn,
                              written_offset=rec.written_offset, flushed_offset=rec.flushed_offset,
                              written_bound=rec.written_bound, unflushed_bytes=rec.window_bytes,
                              checkpoint=rec.extra["checkpoint"], copy_s=rec.extra["copy_s"], torn_pages=torn,
                              in_flight=in_flight)
        cell.restart_after_crash(rec)
        if rec.recovered_offset >= 0 and rec.written_bound >= 0:
            rec.extra["lost_log_bytes"] = max(0, rec.written_bound - rec.recovered_offset)
        return rec

    def _tear(self, cell: Cell, rec: CycleRecord) -> list[dict[str, Any]]:
        """Torn pages past the last flushed position. Under SYNC_FLUSH every acknowledged send was flushed
        before its acknowledgement, so the flushed position is at least the end of the last one."""
        flushed = rec.flushed_offset
        if self.flush is FlushMode.SYNC:  # (every answer from before the kill is recorded: settle_after_kill)
            flushed = max(flushed, cell.workload.max_acked_end(cell.clock.now_ns(), cell.workload.record_size()))
        if flushed < 0 or rec.written_bound < 0:
            rec.extra["torn"] = {"skipped": "offsets unknown"}
            return []
        pages = choose_torn_pages(flushed, rec.written_bound, cell.rng, self.torn_max_pages)
        applied = apply_torn_pages(cell.store_root / "commitlog", self.file_size, pages, cell.rng)
        rec.extra["torn"] = {"from": candidate_range(flushed, rec.written_bound)[0], "to": rec.written_bound,
                             "pages": applied}
        return applied
