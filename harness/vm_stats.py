"""This module owns sampling the host's dirty page cache and reclaim: what the vm.* sysctl profiles change.

Read at a fixed interval, written into the run's ``metrics`` beside the broker's samples (label ""):

    metric                 source                               unit     meaning
    host_dirty_bytes       /proc/meminfo  Dirty                 bytes    data written, not yet on its way to the disk
    host_writeback_bytes   /proc/meminfo  Writeback             bytes    data being written back right now
    vm_nr_dirty            /proc/vmstat   nr_dirty              pages    Dirty in pages (the kernel's own counter)
    vm_nr_writeback        /proc/vmstat   nr_writeback          pages    Writeback in pages
    vm_pgmajfault          /proc/vmstat   pgmajfault            count    major faults since boot (cumulative)
    vm_allocstall          /proc/vmstat   allocstall_* (sum)    count    direct reclaims since boot (cumulative)

The cumulative counters are recorded as read; a report takes differences between samples. Kernels before 4.10
have one ``allocstall`` line, later ones one per zone (``allocstall_normal``, ``allocstall_movable``…): the sum is
the same quantity either way. A host file that cannot be read skips that round (counted in ``errors``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

from harness.records.clock import wall_clock
from harness.records.schema import MetricName

log = logging.getLogger(__name__)

MEMINFO: Final = Path("/proc/meminfo")
VMSTAT: Final = Path("/proc/vmstat")
DEFAULT_INTERVAL_S: Final = 0.25  # fine enough to see a throttled writer's stall of a few hundred ms

_MEMINFO_BYTES: Final = {"Dirty": MetricName.HOST_DIRTY_BYTES, "Writeback": MetricName.HOST_WRITEBACK_BYTES}
_VMSTAT_VALUES: Final = {"nr_dirty": MetricName.VM_NR_DIRTY, "nr_writeback": MetricName.VM_NR_WRITEBACK,
                         "pgmajfault": MetricName.VM_PGMAJFAULT}
VM_METRICS: Final = (*_MEMINFO_BYTES.values(), *_VMSTAT_VALUES.values(), MetricName.VM_ALLOCSTALL)

Record = Callable[[str, float, str, int], None]  # (metric, value, label, ts_ns)


# ---- pure parsing --------------------------------------------------------------------------------------


def parse_meminfo(text: str) -> dict[str, int]:
    """``/proc/meminfo``: name -> bytes for ``kB`` lines, the plain count for unit-less ones (HugePages_*)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        parts = rest.split()
        if not sep or not parts or not parts[0].isdigit():
            continue
        scale = 1024 if len(parts) > 1 and parts[1] == "kB" else 1
        out[name.strip()] = int(parts[0]) * scale
    return out


def parse_vmstat(text: str) -> dict[str, int]:
    """``/proc/vmstat``: ``name value`` per line -> {name: value}; malformed lines are skipped."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


def vm_metrics(meminfo: Mapping[str, int], vmstat: Mapping[str, int]) -> dict[MetricName, float]:
    """The sampled metrics from parsed meminfo/vmstat; a field the kernel does not have is left out."""
    out: dict[MetricName, float] = {}
    for key, metric in _MEMINFO_BYTES.items():
        if key in meminfo:
            out[metric] = float(meminfo[key])
    for key, metric in _VMSTAT_VALUES.items():
        if key in vmstat:
            out[metric] = float(vmstat[key])
    stalls = [v for k, v in vmstat.items() if k == "allocstall" or k.startswith("allocstall_")]
    if stalls:
        out[MetricName.VM_ALLOCSTALL] = float(sum(stalls))
    return out


# ---- I/O -----------------------------------------------------------------------------------------------


def read_vm_metrics(meminfo: Path = MEMINFO, vmstat: Path = VMSTAT) -> dict[MetricName, float]:
    """One reading of the host (raises OSError when a file cannot be read)."""
    return vm_metrics(parse_meminfo(meminfo.read_text()), parse_vmstat(vmstat.read_text()))


class VmSampler:
    """Samples every ``interval_s`` on its own thread (a greenlet under gevent) until ``stop()``; also one
    sample at start and one at stop, so even a short run has its first and last reading."""

    def __init__(self, record: Record, *, interval_s: float = DEFAULT_INTERVAL_S,
                 read: Callable[[], Mapping[MetricName, float]] = read_vm_metrics,
                 clock: Callable[[], int] | None = None) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be > 0")
        self._record = record
        self._read = read
        self._clock = clock or wall_clock().now_ns
        self.interval_s = interval_s
        self.rounds = 0
        self.errors = 0
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def sample(self) -> None:
        with self._lock:
            ts = self._clock()
            try:
                values = self._read()
            except OSError as exc:  # a probe: counted, the sampling goes on
                self.errors += 1
                if str(exc) != self.last_error:
                    log.warning("vm sampler: %s", exc)
                self.last_error = str(exc)
                return
            for metric, value in values.items():
                self._record(metric, value, "", ts)
            self.rounds += 1

    def start(self) -> VmSampler:
        if self._thread is None:
            self._stop.clear()
            self.sample()
            self._thread = threading.Thread(target=self._run, name="vm-sampler", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        next_at = time.monotonic() + self.interval_s
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            self.sample()
            next_at += self.interval_s
            if next_at < time.monotonic():  # a slow round: skip the missed ticks rather than bursting
                next_at = time.monotonic() + self.interval_s

    def stop(self, final_sample: bool = True) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join(10)
        if final_sample:
            self.sample()

    def stats(self) -> dict[str, object]:
        return {"rounds": self.rounds, "errors": self.errors, "interval_s": self.interval_s,
                "last_error": self.last_error}
