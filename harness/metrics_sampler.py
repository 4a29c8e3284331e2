"""The broker metrics sampler: once a second, what the broker says about itself, into the run's ``metrics``.

Per broker (through the admin protocol, GET_BROKER_RUNTIME_INFO): commit-log max and flushed offsets, dispatch
lag, disk use; per consumer group: the backlog as the broker reports it; from the host, when the broker runs
here: its RSS (``/proc/<pid>/status``) and the page-cache residency of its store files (``fincore``, util-linux),
one label per file set (commitlog, consumequeue, index). From the workload's own counters: send and consume
rates. Long format (``ts_ns, metric, value, label``, schema in ``harness.records.schema``).

Labels: with one broker the per-broker metrics have label ""; with several, the broker's name (page cache:
"<broker>/<file set>"). A source that fails (a broker killed by a chaos step) is skipped for that round and
counted in ``errors``; the sampler never stops for it. ``fincore`` over many thousands of consume-queue files
costs real time, so page-cache rounds back off to keep that probe under ~20 % of the sampler's time.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from harness.records.clock import wall_clock
from harness.records.schema import MetricName

log = logging.getLogger(__name__)

FILE_SETS: Final = ("commitlog", "consumequeue", "index")
FINCORE_CHUNK: Final = 1000  # files per fincore call: keeps the argument list far below ARG_MAX
PAGE_CACHE_BUDGET: Final = 0.2  # share of the interval the page-cache probe may use on average

Record = Callable[[str, float, str, int], None]  # (metric, value, label, ts_ns)


@dataclass(frozen=True)
class BrokerTarget:
    """A broker to sample: ``pid`` and ``store_root`` only when it runs on this host (RSS, page cache)."""

    name: str
    addr: str
    pid: int | None = None
    store_root: Path | None = None


@dataclass
class SamplerStats:
    rounds: int = 0
    errors: int = 0
    last_error: str | None = None
    page_cache_s: float = 0.0
    latest: dict[tuple[str, str], float] = field(default_factory=dict)


# ---- pure parsing --------------------------------------------------------------------------------------


def parse_vmrss(status_text: str) -> int | None:
    """Bytes of ``VmRSS`` in a /proc/<pid>/status text (the kernel reports kB)."""
    for line in status_text.splitlines():
        if line.startswith("VmRSS:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                return int(parts[1]) * 1024
    return None


def parse_fincore(output: str) -> dict[str, int]:
    """``fincore --bytes --noheadings --raw --output RES,FILE``: file -> resident bytes."""
    out: dict[str, int] = {}
    for line in output.splitlines():
        res, _, name = line.partition(" ")
        if res.isdigit() and name:
            out[name] = int(res)
    return out


def runtime_metrics(table: Mapping[str, str]) -> dict[MetricName, float]:
    """GET_BROKER_RUNTIME_INFO's table (RocketMQ's key names) as metric values; missing keys are left out."""
    keys = {MetricName.COMMITLOG_MAX_OFFSET: "commitLogMaxOffset",
            MetricName.COMMITLOG_FLUSHED_OFFSET: "commitLogFlushedOffset",
            MetricName.DISPATCH_LAG_BYTES: "dispatchBehindBytes",
            MetricName.DISK_USED_RATIO: "commitLogDiskRatio"}
    out: dict[MetricName, float] = {}
    for metric, key in keys.items():
        try:
            out[metric] = float(table[key])
        except (KeyError, ValueError):
            continue
    if out.get(MetricName.DISK_USED_RATIO, 0.0) < 0:  # -1 = unknown (getDiskPartitionSpaceUsedPercent)
        del out[MetricName.DISK_USED_RATIO]
    return out


def file_set(store_root: Path, path: Path) -> str | None:
    """Which file set of the store layout (docs/design.md, On-disk layout) ``path`` belongs to."""
    try:
        first = path.relative_to(store_root).parts[0]
    except (ValueError, IndexError):
        return None
    return first if first in FILE_SETS else None


# ---- host probes ---------------------------------------------------------------------------------------


def rss_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as f:
            return parse_vmrss(f.read())
    except OSError:
        return None


def store_files(store_root: Path) -> dict[str, list[Path]]:
    """The regular files of each file set under a store root."""
    out: dict[str, list[Path]] = {}
    for name in FILE_SETS:
        base = store_root / name
        files: list[Path] = []
        for dirpath, _dirs, names in os.walk(base):
            files += [Path(dirpath, n) for n in names]
        out[name] = sorted(files)
    return out


def fincore_bytes(paths: Sequence[Path], fincore: str | None = None) -> dict[str, int]:
    """Resident bytes per file; files that vanish meanwhile are simply absent. Raises OSError without fincore."""
    exe = fincore or shutil.which("fincore")
    if exe is None:
        raise OSError("fincore (util-linux) is not installed")
    out: dict[str, int] = {}
    for i in range(0, len(paths), FINCORE_CHUNK):
        chunk = [str(p) for p in paths[i:i + FINCORE_CHUNK]]
        # Exit status 1 when one file could not be opened (deleted by cleaning): the others are still printed.
        proc = subprocess.run([exe, "--bytes", "--noheadings", "--raw", "--output", "RES,FILE", *chunk],
                              capture_output=True, text=True, timeout=60, check=False)
        out.update(parse_fincore(proc.stdout))
    return out


def page_cache_by_set(store_root: Path) -> dict[str, int]:
    """Resident bytes of each file set of a store (0 for an empty set)."""
    files = store_files(store_root)
    resident = fincore_bytes([p for paths in files.values() for p in paths])
    return {name: sum(resident.get(str(p), 0) for p in paths) for name, paths in files.items()}


# ---- the sampler ---------------------------------------------------------------------------------------


class MetricsSampler:
    """Samples every ``interval_s`` on its own thread (a greenlet under gevent) until ``stop()``.

    ``runtime_info(addr)`` returns the broker's GET_BROKER_RUNTIME_INFO table; ``backlog()`` the backlog in
    messages per consumer group; ``counts()`` the workload's cumulative (acknowledged sends, receives), from
    which send_tps and consume_tps are derived. Each is optional.
    """

    def __init__(self, record: Record, brokers: Sequence[BrokerTarget], *,
                 runtime_info: Callable[[str], Mapping[str, str]] | None = None,
                 backlog: Callable[[], Mapping[str, int]] | None = None,
                 counts: Callable[[], tuple[int, int]] | None = None,
                 interval_s: float = 1.0, page_cache: bool = True,
                 clock: Callable[[], int] | None = None) -> None:
        self._record = record
        self.brokers = list(brokers)
        self._runtime_info = runtime_info
        self._backlog = backlog
        self._counts = counts
        self.interval_s = interval_s
        self._page_cache = page_cache and shutil.which("fincore") is not None
        self._clock = clock or wall_clock().now_ns
        self._prev_counts: tuple[int, int, int] | None = None  # (ts_ns, sent, received)
        self._page_cache_next = 0.0
        self.stats = SamplerStats()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _emit(self, metric: str, value: float, label: str, ts_ns: int) -> None:
        self._record(metric, value, label, ts_ns)
        self.stats.latest[(metric, label)] = value

    def _label(self, broker: BrokerTarget, inner: str = "") -> str:
        if len(self.brokers) <= 1:
            return inner
        return f"{broker.name}/{inner}" if inner else broker.name

    def _failed(self, what: str, exc: BaseException) -> None:
        self.stats.errors += 1
        message = f"{what}: {exc}"
        if message != self.stats.last_error:
            log.warning("metrics sampler: %s", message)
        self.stats.last_error = message

    def sample(self) -> None:
        """One round (also usable without the thread, e.g. a last sample at the end of a run)."""
        with self._lock:
            self._sample()

    def _sample(self) -> None:
        ts = self._clock()
        for b in self.brokers:
            if self._runtime_info is not None:
                try:
                    table = self._runtime_info(b.addr)
                except Exception as exc:  # noqa: BLE001 - a probe: recorded, the sampling goes on
                    self._failed(f"runtime info of {b.name}", exc)
                    table = {}
                values = runtime_metrics(table)
                if MetricName.DISK_USED_RATIO not in values and b.store_root is not None:
                    usage = shutil.disk_usage(b.store_root)
                    values[MetricName.DISK_USED_RATIO] = (usage.total - usage.free) / usage.total
                for metric, value in values.items():
                    self._emit(metric, value, self._label(b), ts)
            if b.pid is not None:
                rss = rss_bytes(b.pid)
                if rss is not None:
                    self._emit(MetricName.BROKER_RSS_BYTES, float(rss), self._label(b), ts)
        if self._backlog is not None:
            try:
                for group, msgs in self._backlog().items():
                    self._emit(MetricName.BACKLOG_MSGS, float(msgs), group, ts)
            except Exception as exc:  # noqa: BLE001 - a probe: recorded, the sampling goes on
                self._failed("backlog", exc)
        if self._counts is not None:
            self._rates(ts)
        if self._page_cache and time.monotonic() >= self._page_cache_next:
            self._sample_page_cache(ts)
        self.stats.rounds += 1

    def _rates(self, ts: int) -> None:
        assert self._counts is not None
        sent, received = self._counts()
        prev = self._prev_counts
        self._prev_counts = (ts, sent, received)
        if prev is None or ts <= prev[0]:
            return
        dt = (ts - prev[0]) / 1e9
        self._emit(MetricName.SEND_TPS, (sent - prev[1]) / dt, "", ts)
        self._emit(MetricName.CONSUME_TPS, (received - prev[2]) / dt, "", ts)

    def _sample_page_cache(self, ts: int) -> None:
        t0 = time.monotonic()
        for b in self.brokers:
            if b.store_root is None:
                continue
            try:
                sets = page_cache_by_set(b.store_root)
            except (OSError, subprocess.SubprocessError) as exc:
                self._failed(f"page cache of {b.name}", exc)
                continue
            for name, resident in sets.items():
                self._emit(MetricName.PAGE_CACHE_BYTES, float(resident), self._label(b, name), ts)
        spent = time.monotonic() - t0
        self.stats.page_cache_s += spent
        # Back off so the probe averages at most PAGE_CACHE_BUDGET of the time.
        self._page_cache_next = t0 + max(self.interval_s, spent / PAGE_CACHE_BUDGET)

    # ---- thread ---------------------------------------------------------------------------------------

    def start(self) -> MetricsSampler:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="metrics-sampler", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            try:
                self.sample()
            except Exception as exc:  # noqa: BLE001 - the sampler thread's top: a bug in a probe must not end it
                self._failed("sample", exc)
            next_at += self.interval_s
            now = time.monotonic()
            if next_at < now:  # a slow round: skip the missed ticks rather than bursting
                next_at = now + self.interval_s
            self._stop.wait(next_at - now)

    def stop(self, final_sample: bool = True) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join(30)
        if final_sample:
            try:
                self.sample()
            except Exception as exc:  # noqa: BLE001 - a probe: recorded, the stop goes on
                self._failed("final sample", exc)

    def latest(self, metric: str, label: str = "") -> float | None:
        return self.stats.latest.get((metric, label))


def samples_of(rows: Iterable[tuple[str, float, str, int]]) -> dict[tuple[str, str], list[float]]:
    """Group recorded rows by (metric, label) (for tests and summaries)."""
    out: dict[tuple[str, str], list[float]] = {}
    for metric, value, label, _ts in rows:
        out.setdefault((metric, label), []).append(value)
    return out


def io_read_bytes(pid: int) -> int | None:
    """``read_bytes`` of /proc/<pid>/io: what the process caused to be fetched from storage (page-cache hits and
    mmap accesses to resident pages do not count; major faults on a mapped file do). Needs the same user or
    root."""
    try:
        with open(f"/proc/{pid}/io", encoding="utf-8") as f:
            for line in f:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def commitlog_files(store_root: Path) -> list[tuple[int, Path]]:
    """(start offset, path) of the commit-log files, named by their 20-digit start offset (UtilAll.offset2FileName)."""
    out = []
    for p in (store_root / "commitlog").iterdir() if (store_root / "commitlog").is_dir() else []:
        if p.name.isdigit() and len(p.name) == 20:
            out.append((int(p.name), p))
    return sorted(out)


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    return libc


_LOW_BIT = bytes(b & 1 for b in range(256))  # mincore's vector: bit 0 is residency, the rest reserved


def resident_bytes(path: Path, start: int, end: int) -> int:
    """Bytes of the file's [start, end) in the page cache: mincore(2) over a fresh read-only mapping of that
    range (mapping a file faults nothing in). Unlike fincore's count for the whole file, pages outside the
    range do not count. Raises OSError when the file cannot be opened or mapped."""
    page = mmap.PAGESIZE
    fd = os.open(path, os.O_RDONLY)
    try:
        end = min(end, os.fstat(fd).st_size)
        if end <= start:
            return 0
        lo = start - start % page
        length = end - lo
        libc = _libc()
        addr = libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, lo)
        if addr is None or addr == ctypes.c_void_p(-1).value:
            raise OSError(ctypes.get_errno(), f"mmap {path}: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)
    try:
        pages = (length + page - 1) // page
        vec = ctypes.create_string_buffer(pages)
        if libc.mincore(addr, length, vec) != 0:
            raise OSError(ctypes.get_errno(), f"mincore {path}: {os.strerror(ctypes.get_errno())}")
        bits = vec.raw[:pages].translate(_LOW_BIT)
    finally:
        libc.munmap(addr, length)
    resident = bits.count(1) * page
    if bits[0]:
        resident -= start - lo  # the first page's part before the range
    if bits[-1]:
        resident -= lo + pages * page - end  # the last page's part after it
    return resident


def commitlog_range_residency(store_root: Path, start: int, end: int) -> tuple[int, int]:
    """(resident bytes, bytes) of the commit log's [start, end), each file's part of the range measured
    exactly (``resident_bytes``): pages outside the range do not count, such as the ones a writer's fault
    reads around itself past ``end`` or a read of the log's first message (RocketMQ's runtime info reads its
    store time) brings in before ``start``.
    """
    files = commitlog_files(store_root)
    resident = total = 0
    for i, (first, path) in enumerate(files):
        try:
            file_end = first + path.stat().st_size
        except OSError:  # cleaned meanwhile
            continue
        if i + 1 < len(files):
            file_end = min(file_end, files[i + 1][0])
        lo, hi = max(start, first), min(end, file_end)
        if hi <= lo:
            continue
        try:
            resident += resident_bytes(path, lo - first, hi - first)
        except FileNotFoundError:  # cleaned meanwhile
            continue
        total += hi - lo
    return resident, total
