"""The OpenMessaging Benchmark backlog test (WorkloadGenerator.buildAndDrainBacklog, OMB @8559989), as a
controller for ``scenarios/backlog.py``.

1. warm up (``--warmup`` s) with producers and consumers running;
2. pause the consumers (which then commit their offsets); keep producing until the backlog *as the broker
   reports it* (max offset - committed offset, summed over the run's queues) reaches ``--backlog-bytes``:
   build time (the client's view, sent ok - received, is recorded next to it);
3. optionally (``--cold``) evict the backlog from the page cache (root: the broker's mappings of its store
   files paged out with process_madvise, then ``sync``; ``echo 1 > /proc/sys/vm/drop_caches``), recorded in
   faults.jsonl; measure how much of the backlog's commit-log bytes is resident;
4. resume the consumers while producers go on at ``--drain-rate`` (OMB: unchanged; Redpanda's fork:
   throttled; 0: stopped); the drain is complete when the backlog is at most
   ``max(floor, (1 - drain_ratio) * built)``: drain time, drain rates, and where the reads came from (the
   broker process's ``read_bytes`` during the drain: page cache if it stayed small against the backlog);
5. production returns to ``--rate`` for the rest of the run.

With ``--head-readers N`` a second consumer group reads at the head all along (never paused): its
send-to-consume latency is kept per stage (warmup, build, drain, after) while the paused group — the run's own,
which started at offset 0 and is checked for loss — drains from the backlog's start: the seeds' "consumers far
behind disturb those at the head" case. With ``--memory-max`` the broker runs in a memory cgroup
(harness.memory_cgroup) whose cache, usage and the broker's major faults are sampled into the metrics and
summarized per stage; the backlog is then larger than the broker's page cache by construction, and the drain
reads from disk. Before the build, the store's filesystem is checked: the backlog is scaled down, and says so,
so that at least ``MIN_FREE_SHARE`` of the disk stays free.

Deliberate differences from OMB: the build is judged from the broker's backlog (OMB computes it on the client:
subscriptions x sent - received); it is polled every 0.2 s rather than every 1 s so short runs get precise
times; the drain floor is ``min(1000, built / 100)`` messages instead of OMB's fixed 1000, which is most of the
backlog in a smoke run; the drain is judged from the client's counts (sent ok - received, as OMB does), which
see the consumption at once while the broker's committed offsets lag by up to a pull.
"""

# gevent ships no type information; its names are Any here.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import gevent

from harness.driver import DriverError
from harness.memory_cgroup import MemoryCgroup, major_faults
from harness.metrics_sampler import commitlog_range_residency, io_read_bytes
from harness.page_out import page_out
from harness.records.schema import MetricName
from scenarios.agent import head_group
from scenarios.head_latency import merge_stages
from scenarios.spec import RunContext

BUILD_POLL_S: Final = 0.2
DRAIN_POLL_S: Final = 0.1
OMB_DRAIN_FLOOR_MSGS: Final = 1000
DISK_READ_SHARE: Final = 0.1  # reads from storage above this share of the backlog's bytes: "disk"
DROP_CACHES: Final = Path("/proc/sys/vm/drop_caches")
MIN_FREE_SHARE: Final = 0.15  # never fill the store's disk past 85 % (RocketMQ 4.9.8 refuses sends above 90 %)
# Disk a backlog of B bytes takes: its commit log, consume-queue entries (20 bytes per message) and the
# production that goes on during the warm-up and the drain; 1.5 B covers a drain at the production rate.
DISK_PER_BACKLOG_BYTE: Final = 1.5
CGROUP_POLL_S: Final = 0.5


def fit_backlog(requested: int, fs_total: int, fs_free: int) -> tuple[int, str | None]:
    """The backlog (bytes) that leaves MIN_FREE_SHARE of the disk free, and why it is less than asked."""
    budget = fs_free - MIN_FREE_SHARE * fs_total
    fits = max(0, int(budget / DISK_PER_BACKLOG_BYTE))
    if requested <= fits:
        return requested, None
    return fits, (f"backlog scaled down from {requested / 2**30:.2f} GiB to {fits / 2**30:.2f} GiB: "
                  f"{fs_free / 2**30:.1f} GiB free of {fs_total / 2**30:.1f} GiB, and the run keeps "
                  f"{MIN_FREE_SHARE:.0%} of the disk free ({DISK_PER_BACKLOG_BYTE:g} x the backlog is written)")


def drain_threshold(built_msgs: int, drain_ratio: float) -> int:
    """Backlog (messages) at or below which the drain counts as complete."""
    floor = min(OMB_DRAIN_FLOOR_MSGS, max(1, built_msgs // 100))
    return max(floor, round((1 - drain_ratio) * built_msgs))


def read_source(disk_read_bytes: int | None, backlog_bytes: int) -> str:
    """Where a drain read its messages from, judged by what the broker fetched from storage meanwhile."""
    if disk_read_bytes is None:
        return "unknown (the broker's I/O counters are not readable from here)"
    if backlog_bytes <= 0 or disk_read_bytes <= DISK_READ_SHARE * backlog_bytes:
        return f"page cache ({disk_read_bytes / 2**20:.1f} MiB read from storage)"
    return f"disk ({disk_read_bytes / 2**20:.1f} MiB read from storage)"


def drop_page_cache(brokers: Sequence[tuple[int | None, Path | None]] = ()) -> tuple[bool, str | None]:
    """Make the store cold: page out each local broker's mappings of its store files (``harness.page_out``:
    process_madvise MADV_PAGEOUT), then ``sync; echo 1 > /proc/sys/vm/drop_caches``. (done, why not).

    drop_caches alone drops clean pages no process maps; the broker maps its commit log, so without the
    page-out the backlog stays resident. ``brokers``: (pid, store root) of each broker on this host."""
    if os.geteuid() != 0:
        return False, f"not root (euid {os.geteuid()})"
    notes = []
    for pid, root in brokers:
        if pid is None or root is None:
            notes.append("a broker that is not on this host keeps its page cache")
            continue
        res = page_out(pid, [root / "commitlog", root / "consumequeue"])
        if not res.done:
            notes.append(f"broker {pid}: page-out failed ({res.reason}); its mapped pages stay resident")
    os.sync()
    try:
        DROP_CACHES.write_text("1")
    except OSError as exc:
        return False, f"cannot write {DROP_CACHES}: {exc}"
    return True, "; ".join(notes) or None


def _commitlog_max(ctx: RunContext) -> int | None:
    total = 0
    for b in ctx.brokers:
        try:
            total += int(ctx.driver.runtime_info(b.addr).get("commitLogMaxOffset", 0))
        except (DriverError, ValueError):
            return None
    return total


def _residency(ctx: RunContext, start: int | None, end: int | None) -> dict[str, Any] | None:
    """Page-cache residency of the backlog's commit-log bytes, [start, end) exactly (embedded single broker
    only)."""
    if len(ctx.brokers) != 1 or ctx.brokers[0].store_root is None or start is None or end is None:
        return None
    try:
        resident, size = commitlog_range_residency(ctx.brokers[0].store_root, start, end)
    except OSError as exc:
        return {"error": str(exc)}
    return {"resident_bytes": resident, "range_bytes": size,
            "ratio": round(resident / size, 4) if size else None}


def _read_bytes(ctx: RunContext) -> int | None:
    pids = [b.pid for b in ctx.brokers]
    if not pids or any(p is None for p in pids):
        return None
    values = [io_read_bytes(p) for p in pids if p is not None]
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


class CgroupWatch:
    """The broker's memory cgroup and major faults, sampled every CGROUP_POLL_S into the metrics
    (metrics/part-cgroup-*) and summarized per stage (max cache and usage, faults at the stage's start)."""

    def __init__(self, ctx: RunContext, cg: MemoryCgroup) -> None:
        self.ctx = ctx
        self.cg = cg
        self.pid = ctx.brokers[0].pid if len(ctx.brokers) == 1 else None
        self.metrics = ctx.record.metrics_writer("cgroup")
        self.stage = "warmup"
        self.stages: dict[str, dict[str, Any]] = {}
        self.errors = 0
        self._greenlet: Any = None

    def faults(self) -> int | None:
        if self.pid is None:
            return None
        try:
            return major_faults(Path(f"/proc/{self.pid}/stat").read_text())
        except (OSError, ValueError, IndexError):
            return None

    def sample(self) -> None:
        try:
            st = self.cg.stats()
        except (OSError, ValueError):
            self.errors += 1
            return
        faults = self.faults()
        now = self.ctx.now_ns()
        self.metrics.record(MetricName.CGROUP_CACHE_BYTES, st.cache_bytes, ts_ns=now)
        self.metrics.record(MetricName.CGROUP_USAGE_BYTES, st.usage_bytes, ts_ns=now)
        if faults is not None:
            self.metrics.record(MetricName.BROKER_MAJOR_FAULTS, faults, ts_ns=now)
        d = self.stages.setdefault(self.stage, {"cache_max_bytes": 0, "usage_max_bytes": 0,
                                                "broker_major_faults_at_start": faults,
                                                "cgroup_pgmajfault_at_start": st.pgmajfault})
        d["cache_max_bytes"] = max(d["cache_max_bytes"], st.cache_bytes)
        d["usage_max_bytes"] = max(d["usage_max_bytes"], st.usage_bytes)
        d["cache_last_bytes"] = st.cache_bytes
        d["broker_major_faults_at_end"] = faults
        d["cgroup_pgmajfault_at_end"] = st.pgmajfault

    def enter(self, stage: str) -> None:
        self.sample()  # the last reading of the stage that ends
        self.stage = stage
        self.sample()

    def start(self) -> CgroupWatch:
        def loop() -> None:
            while True:
                self.sample()
                gevent.sleep(CGROUP_POLL_S)

        self.sample()
        self._greenlet = gevent.spawn(loop)
        return self

    def stop(self) -> dict[str, Any]:
        if self._greenlet is not None:
            self._greenlet.kill(block=True, timeout=5)
        self.sample()
        self.metrics.close()
        p = self.cg.plan
        for d in self.stages.values():
            for what in ("broker_major_faults", "cgroup_pgmajfault"):
                a, z = d.pop(f"{what}_at_start", None), d.pop(f"{what}_at_end", None)
                d[what] = None if a is None or z is None else z - a
        try:
            peak = self.cg.stats().peak_bytes
        except (OSError, ValueError):
            peak = None
        return {"version": p.version.value, "path": str(p.path), "limit_bytes": p.limit_bytes,
                "peak_bytes": peak, "oom_kills": self.cg.oom_kills(), "sample_errors": self.errors,
                "stages": self.stages}


def _disk_fit(ctx: RunContext) -> tuple[int, dict[str, Any] | None]:
    """The backlog this run builds, after the free-space check of the store's filesystem (the embedded broker's
    store, else the run directory's)."""
    s = ctx.settings
    where = ctx.brokers[0].store_root if len(ctx.brokers) == 1 and ctx.brokers[0].store_root else ctx.record.run_dir
    try:
        st = os.statvfs(where)
    except OSError:
        return s.backlog_bytes, None
    total, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
    fits, why = fit_backlog(s.backlog_bytes, total, free)
    disk = {"path": str(where), "total_bytes": total, "free_bytes": free, "min_free_share": MIN_FREE_SHARE}
    if why is not None:
        disk["scaled_down"] = why
        ctx.say(why)
    return fits, disk


def _head_summary(ctx: RunContext, stage: str) -> dict[str, Any] | None:
    """Mark ``stage`` on every load process and merge their head readers' latency so far, per stage."""
    parts = ctx.hub.command("mark", stage=stage)
    hists = merge_stages(c.extra.get("head") or {} for c in parts)
    if not hists:
        return None
    return {st: h.summary() for st, h in hists.items()}


def control(ctx: RunContext) -> None:
    s = ctx.settings
    b: dict[str, Any] = {"target_bytes": s.backlog_bytes, "drain_ratio": s.drain_ratio, "drain_rate": s.drain_rate,
                         "warmup_s": s.warmup_s, "memory_max": s.memory_max or None, "head_readers": s.head_readers,
                         "tail_group": ctx.info.group}
    ctx.results["backlog"] = b
    target, disk = _disk_fit(ctx)
    if disk is not None:
        b["disk"] = disk
        b["target_bytes"] = target
    if target <= 0:
        b["note"] = "no room for a backlog on the store's disk"
        return
    watch = CgroupWatch(ctx, ctx.memory_cgroup).start() if ctx.memory_cgroup is not None else None
    try:
        _control(ctx, b, target, watch)
    finally:
        if watch is not None:
            b["memory_cgroup"] = watch.stop()
        if s.head_readers:
            try:
                b["head"] = _head_summary(ctx, "after")
            except Exception as exc:  # noqa: BLE001 - the run's end: the head figures are missing, and say why
                b["head_error"] = f"{type(exc).__name__}: {exc}"


def _mark(ctx: RunContext, watch: CgroupWatch | None, stage: str, b: dict[str, Any]) -> None:
    """A new stage: the cgroup's and the head readers' figures count toward it from now on. The head group's
    backlog (as the broker reports it) says whether the head readers were really at the head."""
    if watch is not None:
        watch.enter(stage)
    if ctx.settings.head_readers:
        ctx.hub.command("mark", stage=stage)
        try:
            lag = ctx.driver.backlog(head_group(ctx.info), ctx.info.all_topics).total
        except DriverError:
            return
        b.setdefault("head_backlog_msgs", {})[stage] = lag


def _control(ctx: RunContext, b: dict[str, Any], target: int, watch: CgroupWatch | None) -> None:
    s = ctx.settings
    if not ctx.sleep(s.warmup_s):
        b["note"] = "the run ended during the warm-up"
        return
    # Build.
    ctx.hub.command("pause")
    _mark(ctx, watch, "build", b)
    paused = ctx.now_ns()
    at_pause = ctx.hub.totals()
    b["paused_at_ns"] = paused
    b["client_backlog_at_pause_msgs"] = at_pause.ok - at_pause.received  # consumers may already lag
    cl_start = _commitlog_max(ctx)
    ctx.say(f"consumers paused; building a backlog of {target / 2**20:.1f} MiB")
    while True:
        backlog = ctx.backlog()
        if backlog * s.message_size >= target:
            break
        if not ctx.sleep(BUILD_POLL_S):
            b.update(note="the run ended while the backlog was building", backlog_msgs_reached=backlog)
            return
    built = ctx.now_ns()
    totals = ctx.hub.totals()
    b.update(built_at_ns=built, build_s=round((built - paused) / 1e9, 3), backlog_msgs=backlog,
             backlog_bytes=backlog * s.message_size, client_backlog_msgs=totals.ok - totals.received)
    cl_end = _commitlog_max(ctx)
    if cl_start is not None and cl_end is not None:
        b["commitlog_range"] = [cl_start, cl_end]
    b["page_cache_at_build"] = _residency(ctx, cl_start, cl_end)
    if s.cold:
        done, why = drop_page_cache([(br.pid, br.store_root) for br in ctx.brokers])
        after = _residency(ctx, cl_start, cl_end)
        b["cold"] = {"dropped": done, "reason": why, "page_cache_after_drop": after}
        ctx.record.add_fault("drop_caches", "host", level=1, done=done, reason=why,
                             page_cache_before=b["page_cache_at_build"], page_cache_after=after)
    # Drain.
    if s.drain_rate >= 0:
        ctx.hub.command("set_rate", rate=s.drain_rate)
    io_before = _read_bytes(ctx)
    received_before = ctx.hub.totals().received
    ctx.hub.command("resume")
    _mark(ctx, watch, "drain", b)
    resumed = ctx.now_ns()
    b["resumed_at_ns"] = resumed
    threshold = drain_threshold(backlog, s.drain_ratio)
    b["drain_threshold_msgs"] = threshold
    ctx.say(f"consumers resumed with {backlog} messages behind; draining to <= {threshold}")
    while True:
        t = ctx.hub.totals()
        if t.ok - t.received <= threshold:
            break
        if not ctx.sleep(DRAIN_POLL_S):
            b["note"] = "the run ended while draining"
            return
    drained = ctx.now_ns()
    _mark(ctx, watch, "after", b)
    drain_s = (drained - resumed) / 1e9
    io_after = _read_bytes(ctx)
    disk_read = None if io_before is None or io_after is None else io_after - io_before
    consumed = t.received - received_before
    b.update(drained_at_ns=drained, drain_s=round(drain_s, 3),
             drain_rate_msgs=round(backlog / drain_s, 1) if drain_s > 0 else None,
             consume_rate_msgs=round(consumed / drain_s, 1) if drain_s > 0 else None,
             disk_read_bytes=disk_read, read_from=read_source(disk_read, backlog * s.message_size))
    b["tail"] = {"group": ctx.info.group, "msgs_per_s": b["consume_rate_msgs"], "read_from": b["read_from"]}
    try:
        b["broker_backlog_after_drain_msgs"] = ctx.backlog()
    except DriverError:
        pass
    if s.drain_rate >= 0:
        ctx.hub.command("set_rate", rate=s.rate if s.rate > 0 else -1)
    ctx.say(f"backlog drained in {drain_s:.2f} s; {b['read_from']}")
    if s.stop_after_drain and ctx.end_run is not None:
        ctx.say("drained: ending the run (--stop-after-drain)")
        ctx.end_run()
