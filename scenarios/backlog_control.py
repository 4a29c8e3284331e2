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

Deliberate differences from OMB: the build is judged from the broker's backlog (OMB computes it on the client:
subscriptions x sent - received); it is polled every 0.2 s rather than every 1 s so short runs get precise
times; the drain floor is ``min(1000, built / 100)`` messages instead of OMB's fixed 1000, which is most of the
backlog in a smoke run; the drain is judged from the client's counts (sent ok - received, as OMB does), which
see the consumption at once while the broker's committed offsets lag by up to a pull.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from harness.driver import DriverError
from harness.metrics_sampler import commitlog_range_residency, io_read_bytes
from harness.page_out import page_out
from scenarios.spec import RunContext

BUILD_POLL_S: Final = 0.2
DRAIN_POLL_S: Final = 0.1
OMB_DRAIN_FLOOR_MSGS: Final = 1000
DISK_READ_SHARE: Final = 0.1  # reads from storage above this share of the backlog's bytes: "disk"
DROP_CACHES: Final = Path("/proc/sys/vm/drop_caches")


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


def control(ctx: RunContext) -> None:
    s = ctx.settings
    b: dict[str, Any] = {"target_bytes": s.backlog_bytes, "drain_ratio": s.drain_ratio, "drain_rate": s.drain_rate,
                         "warmup_s": s.warmup_s}
    ctx.results["backlog"] = b
    if not ctx.sleep(s.warmup_s):
        b["note"] = "the run ended during the warm-up"
        return
    # Build.
    ctx.hub.command("pause")
    paused = ctx.now_ns()
    at_pause = ctx.hub.totals()
    b["paused_at_ns"] = paused
    b["client_backlog_at_pause_msgs"] = at_pause.ok - at_pause.received  # consumers may already lag
    cl_start = _commitlog_max(ctx)
    ctx.say(f"consumers paused; building a backlog of {s.backlog_bytes / 2**20:.1f} MiB")
    while True:
        backlog = ctx.backlog()
        if backlog * s.message_size >= s.backlog_bytes:
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
    drain_s = (drained - resumed) / 1e9
    io_after = _read_bytes(ctx)
    disk_read = None if io_before is None or io_after is None else io_after - io_before
    consumed = t.received - received_before
    b.update(drained_at_ns=drained, drain_s=round(drain_s, 3),
             drain_rate_msgs=round(backlog / drain_s, 1) if drain_s > 0 else None,
             consume_rate_msgs=round(consumed / drain_s, 1) if drain_s > 0 else None,
             disk_read_bytes=disk_read, read_from=read_source(disk_read, backlog * s.message_size))
    try:
        b["broker_backlog_after_drain_msgs"] = ctx.backlog()
    except DriverError:
        pass
    if s.drain_rate >= 0:
        ctx.hub.command("set_rate", rate=s.rate if s.rate > 0 else -1)
    ctx.say(f"backlog drained in {drain_s:.2f} s; {b['read_from']}")
