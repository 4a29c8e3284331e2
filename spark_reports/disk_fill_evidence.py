"""Evidence of the disk-full self-protection from disk-fill run records: one row per fill cycle.

A disk-fill run (``python -m chaos disk-fill``) fills a small loop-mounted filesystem past 90 % and frees it
again, once per cycle. Its run record states each cycle as a ``disk_fill`` fault (params: cycle, used_ratio)
closed by a ``disk_free`` entry with the same cycle; the ENOSPC and cleaning phases carry a ``phase`` param and
are not watermark cycles, so they are left out here. From the events inside each fill interval this module
counts the sends the broker refused with SERVICE_NOT_AVAILABLE (RocketMQ 4.9.8 refuses puts with code 14 once
DefaultMessageStore's disk check marks the disk full above diskSpaceWarningLevelRatio = 0.90), the sends it
still acknowledged (before its periodic disk check noticed) and the deliveries, and after the interval the
first acknowledged send (writes back). Whether pulls were served while the disk was full is what the run's
``chaos.json`` states for the cycle (a probe consumer pulled every queue: ``extra.pull_problem`` is null);
without that file the report falls back to deliveries inside the interval and says so.
"""

import json
from dataclasses import dataclass
from typing import Any, Final

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_reports.run_records import RunInfo, load_events, read_faults

DISK_FILL_KIND: Final = "disk_fill"
DISK_FREE_KIND: Final = "disk_free"  # chaos/disk_fill.py closes each fill interval with this kind
CHAOS_FILE: Final = "chaos.json"  # chaos/experiment.py: cycles, verdict and drain of a chaos run
SERVICE_NOT_AVAILABLE: Final = 14  # RocketMQ ResponseCode.SERVICE_NOT_AVAILABLE: the disk-full refusal
DISK_FULL_REMARK: Final = "disk is full"  # in the refusal's remark (RocketMQ 4.9.8 DefaultMessageStore)
WATERMARK_FULL: Final = 0.90  # RocketMQ 4.9.8 diskSpaceWarningLevelRatio: above it the disk is marked full
# chaos/experiment.py SERVICE_DEADLINE_S: a fault after which no send is acknowledged for this long has not
# recovered; the same bound decides here whether writes came back once the space was freed.
RESUME_DEADLINE_S: Final = 20.0


@dataclass(frozen=True)
class FillWindow:
    run_id: str
    cycle: int
    start_ns: int
    end_ns: int
    used_ratio: float | None


@dataclass(frozen=True)
class FillCycle:
    """What one fill cycle shows: the disk use, refusals, reads and the return of writes."""

    run_id: str
    flush_mode: str
    cycle: int
    used_ratio: float | None
    seconds: float  # length of the fill interval
    refused: int  # sends failed with SERVICE_NOT_AVAILABLE inside the interval
    first_refusal_s: float | None  # from the fill to the first refusal
    acked_in_window: int
    delivered_in_window: int
    remark_disk_full: bool | None  # the refusal's remark names the full disk (chaos.json; None: not recorded)
    pull_problem: str | None  # what the pull probe hit (chaos.json); None when it was served
    pull_probed: bool  # chaos.json recorded a pull probe for this cycle
    resumed_s: float | None  # from the space freed to the next acknowledged send; None: none came

    @property
    def reads_ok(self) -> bool:
        if self.pull_probed:
            return self.pull_problem is None
        return self.delivered_in_window > 0

    def problems(self) -> list[str]:
        """Why this cycle does not show the protection (empty when it does)."""
        out = []
        if self.used_ratio is None or self.used_ratio <= WATERMARK_FULL:
            out.append(f"disk use {self.used_ratio} not above {WATERMARK_FULL:.0%}")
        if self.refused == 0:
            out.append("no send refused with SERVICE_NOT_AVAILABLE while the disk was full")
        if self.remark_disk_full is False:
            out.append("the refusal's remark does not name the full disk")
        if not self.reads_ok:
            out.append(f"pulls not served: {self.pull_problem}" if self.pull_probed
                       else "no delivery while the disk was full (and no pull probe recorded)")
        if self.resumed_s is None or self.resumed_s > RESUME_DEADLINE_S:
            out.append(f"no send acknowledged within {RESUME_DEADLINE_S:.0f} s after the space was freed")
        return out


def fill_windows(run_id: str, faults: list[dict[str, Any]]) -> list[FillWindow]:
    """The watermark fill intervals of a run: each ``disk_fill`` with a cycle (no phase) and its ``disk_free``."""
    out = []
    for i, fault in enumerate(faults):
        params = fault.get("params") or {}
        if fault.get("kind") != DISK_FILL_KIND or "phase" in params or "cycle" not in params:
            continue
        end = next((int(f["ts_ns"]) for f in faults[i + 1:] if f.get("kind") == DISK_FREE_KIND
                    and (f.get("params") or {}).get("cycle") == params["cycle"]), None)
        if end is None:
            continue  # never freed (the run broke off): no interval to judge
        ratio = params.get("used_ratio")
        out.append(FillWindow(run_id, int(params["cycle"]), int(fault["ts_ns"]), end,
                              None if ratio is None else float(ratio)))
    return out


def chaos_cycles(run: RunInfo) -> dict[int, dict[str, Any]] | None:
    """chaos.json's watermark cycles by cycle number (None when the run has no chaos.json)."""
    path = run.path / CHAOS_FILE
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return {int(c["cycle"]): c for c in data.get("cycles") or [] if c.get("kind") == DISK_FILL_KIND}


def is_disk_fill_run(run: RunInfo) -> bool:
    return any(f.get("kind") == DISK_FILL_KIND for f in read_faults(run))


def fill_cycles(spark: SparkSession, runs: list[RunInfo]) -> list[FillCycle]:
    """Every watermark fill cycle of the runs, its event counts computed in Spark."""
    windows = [w for r in runs for w in fill_windows(r.run_id, read_faults(r))]
    if not windows:
        return []
    used = [r for r in runs if any(w.run_id == r.run_id for w in windows)]
    events = load_events(spark, used, ["op", "end_ns", "outcome", "code"])
    wdf = spark.createDataFrame([(w.run_id, w.cycle, w.start_ns, w.end_ns) for w in windows],
                                "w_run string, cycle int, w_start long, w_end long")
    joined = events.join(F.broadcast(wdf), (events.run_id == wdf.w_run) & (events.end_ns >= wdf.w_start))
    inside = F.col("end_ns") < F.col("w_end")
    send, ok = F.col("op") == "send", F.col("outcome") == "ok"
    refusal = send & (F.col("outcome") == "fail") & (F.col("code") == SERVICE_NOT_AVAILABLE)
    agg = joined.groupBy("w_run", "cycle").agg(
        F.sum(F.when(inside & refusal, 1).otherwise(0)).alias("refused"),
        F.min(F.when(inside & refusal, F.col("end_ns"))).alias("first_refusal"),
        F.sum(F.when(inside & send & ok, 1).otherwise(0)).alias("acked"),
        F.sum(F.when(inside & (F.col("op") == "receive") & ok, 1).otherwise(0)).alias("delivered"),
        F.min(F.when(~inside & send & ok, F.col("end_ns"))).alias("first_ack_after"),
    )
    counts = {(r["w_run"], int(r["cycle"])): r for r in agg.collect()}
    by_run = {r.run_id: r for r in used}
    chaos = {r.run_id: chaos_cycles(r) for r in used}
    out = []
    for w in windows:
        c = counts.get((w.run_id, w.cycle))
        cyc = (chaos[w.run_id] or {}).get(w.cycle, {})
        extra = cyc.get("extra") or {}
        remark = extra.get("remark")
        first_refusal = None if c is None else c["first_refusal"]
        first_ack = None if c is None else c["first_ack_after"]
        out.append(FillCycle(
            run_id=w.run_id, flush_mode=by_run[w.run_id].flush_mode, cycle=w.cycle, used_ratio=w.used_ratio,
            seconds=(w.end_ns - w.start_ns) / 1e9, refused=0 if c is None else int(c["refused"]),
            first_refusal_s=None if first_refusal is None else (int(first_refusal) - w.start_ns) / 1e9,
            acked_in_window=0 if c is None else int(c["acked"]),
            delivered_in_window=0 if c is None else int(c["delivered"]),
            remark_disk_full=None if remark is None else DISK_FULL_REMARK in str(remark),
            pull_problem=None if extra.get("pull_problem") is None else str(extra["pull_problem"]),
            pull_probed="pull_problem" in extra,
            resumed_s=None if first_ack is None else (int(first_ack) - w.end_ns) / 1e9,
        ))
    return sorted(out, key=lambda x: (x.run_id, x.cycle))
