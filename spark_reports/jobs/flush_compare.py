"""Flush-compare report: SYNC_FLUSH against ASYNC_FLUSH, side by side — throughput, send latency, and loss.

Runs are paired by flush mode (meta.broker.flushDiskType) within a comparison group: the same scenario (the
flush mode's own "sync"/"async" token left out of the name, as chaos names its runs), the same parameters
(except the flush mode and what differs from run to run anyway: seed, run directory, addresses) and the
same sysctl profile in force. Throughput and latency are compared only inside a group holding both modes.
Runs under faults (kill -9, power loss restarts) stall for the restart, so their latency describes the
fault, not the flush mode: such groups are compared only when no fault-free group exists, and the page then
says so. Their loss is shown from the per-run loss rows (``run_loss``, as the loss report shows them), per
flush mode and fault; the broker-group runs that lost their master (chaos replication) apart, per replication
mode: ASYNC_MASTER against SYNC_MASTER.

- throughput = acknowledged sends ÷ the load window (first send's start → last acknowledged send's ack);
- send latency = ack − start of acknowledged sends, p50 / p99 / p99.9 / max per mode, by percentile_approx
  over the raw events of the mode's runs pooled (never a mean of per-run percentiles);
- cost of durability = SYNC ÷ ASYNC for throughput and p50 / p99, and the p99 difference in ms.
"""

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_reports import run_loss as loss
from spark_reports.html_report import Page, ReportOutput, write_csv
from spark_reports.job_runner import Job, submit
from spark_reports.percentiles import CDF_GRID, DEFAULT_ACCURACY, MIN_ACCURACY
from spark_reports.plots import cdf_plot
from spark_reports.report_io import finish_report, make_report_dir
from spark_reports.run_records import REFERENCE, RunInfo, discover_runs, load_events, read_faults

NAME: Final = "flush-compare"
SYNC: Final = loss.SYNC_FLUSH
ASYNC: Final = loss.ASYNC_FLUSH
MODES: Final = (SYNC, ASYNC)
FLUSH_TOKENS: Final = frozenset({"sync", "async"})
# Parameters that differ between otherwise identical runs, or name the flush mode itself.
IGNORED_PARAMS: Final = frozenset({"flush", "seed", "run_dir", "namesrv", "host", "store_dir", "topic"})
QUANTILES: Final = (0.5, 0.99, 0.999)
QUANTILE_LABELS: Final = ("p50", "p99", "p99.9")


def group_key(run: RunInfo) -> str:
    """What must be equal for two runs to be compared: scenario without its flush token, the parameters
    that shape the load, and the sysctl profile in force."""
    scenario = "-".join(t for t in run.scenario.split("-") if t.lower() not in FLUSH_TOKENS)
    params = {k: v for k, v in (run.meta.get("params") or {}).items() if k not in IGNORED_PARAMS}
    return json.dumps({"scenario": scenario, "params": params, "sysctl": run.sysctl_profile}, sort_keys=True,
                      default=str)


def _param(run: RunInfo, *names: str) -> Any:
    params = run.meta.get("params") or {}
    load = params.get("load") or {}
    for name in names:
        if name in params:
            return params[name]
        if name in load:
            return load[name]
    return None


def load_shape(run: RunInfo) -> str:
    """The load in words: offered rate (open loop) or closed loop, in-flight sends, body size."""
    rate, in_flight, size = _param(run, "rate"), _param(run, "in_flight"), _param(run, "message_size", "msg_size")
    parts = [f"open loop {float(rate):,.0f} msg/s" if rate else "closed loop"]
    if in_flight is not None:
        parts.append(f"{in_flight} in flight")
    if size is not None:
        parts.append(f"{size} B")
    return ", ".join(parts)


@dataclass(frozen=True)
class Group:
    """Runs with the same comparison key; ``label`` names it on the page."""

    label: str
    key: str
    fault: str
    profile: str
    shape: str
    runs: dict[str, tuple[str, ...]]  # flush mode -> run ids

    @property
    def paired(self) -> bool:
        return all(self.runs.get(m) for m in MODES)

    @property
    def open_loop(self) -> bool:
        return self.shape.startswith("open loop")


def comparison_groups(runs: list[RunInfo]) -> list[Group]:
    """Runs with a known flush mode and events, grouped by ``group_key`` (in run-id order of first runs)."""
    members: dict[str, list[RunInfo]] = defaultdict(list)
    for run in runs:
        if run.flush_mode in MODES and run.events_source is not None:
            members[group_key(run)].append(run)
    groups = []
    seen: dict[str, int] = defaultdict(int)
    for key, rs in members.items():
        first = rs[0]
        scenario = json.loads(key)["scenario"]
        seen[scenario] += 1
        faults = sorted({loss.fault_label(read_faults(r)) for r in rs})
        groups.append(Group(
            label=scenario if seen[scenario] == 1 else f"{scenario} #{seen[scenario]}", key=key,
            fault="/".join(faults), profile=first.sysctl_profile, shape=load_shape(first),
            runs={m: tuple(r.run_id for r in rs if r.flush_mode == m) for m in MODES}))
    return groups


def chosen_pairs(groups: list[Group]) -> tuple[list[Group], bool]:
    """The paired groups whose throughput and latency are compared, and whether they are fault-free."""
    paired = [g for g in groups if g.paired]
    clean = [g for g in paired if g.fault == loss.NO_FAULT]
    return (clean, True) if clean else (paired, False)


@dataclass(frozen=True)
class Perf:
    """Throughput and send latency (ns) of one run, or of one mode of a group pooled (run_id None)."""

    group: str
    mode: str
    run_id: str | None
    runs: int
    attempted: int
    acknowledged: int
    window_ns: int  # summed over the runs for a pooled row
    quantiles: tuple[int, ...]  # QUANTILES, then CDF_GRID
    maximum: int | None

    @property
    def acks_per_s(self) -> float | None:
        return self.acknowledged / (self.window_ns / 1e9) if self.window_ns > 0 else None

    def q(self, label: str) -> int | None:
        if label == "max":
            return self.maximum
        return self.quantiles[QUANTILE_LABELS.index(label)] if self.quantiles else None

    @property
    def cdf(self) -> list[tuple[float, int]]:
        return list(zip(CDF_GRID, self.quantiles[len(QUANTILES):], strict=True)) if self.quantiles else []


def compute(spark: SparkSession, groups: list[Group], runs: list[RunInfo],
            accuracy: int = DEFAULT_ACCURACY) -> list[Perf]:
    """Per run and per (group, mode) pooled, in one aggregation over the raw send events (a rollup)."""
    if accuracy < MIN_ACCURACY:
        raise ValueError(f"accuracy {accuracy} below {MIN_ACCURACY}")
    where = {rid: (g.label, mode) for g in groups for mode, ids in g.runs.items() for rid in ids}
    if not where:
        return []
    used = [r for r in runs if r.run_id in where]
    events = load_events(spark, used, ["op", "start_ns", "end_ns", "outcome"])

    def lookup(i: int) -> Any:
        return F.create_map(*[F.lit(x) for rid, v in where.items() for x in (rid, v[i])])[F.col("run_id")]

    sends = events.where(F.col("op") == "send").select(
        lookup(0).alias("grp"), lookup(1).alias("mode"), "run_id", "start_ns",
        F.when(F.col("outcome") == "ok", F.col("end_ns")).alias("ack_ns"))
    sends = sends.withColumn("latency", F.col("ack_ns") - F.col("start_ns"))
    per_run = sends.groupBy("grp", "mode", "run_id").agg(
        F.count(F.lit(1)).alias("attempted"), F.count("ack_ns").alias("acked"),
        (F.max("ack_ns") - F.min("start_ns")).alias("window"))
    # Latency rows keep the run id so the rollup can give both per-run and pooled quantiles in one pass.
    lat = sends.where(F.col("ack_ns").isNotNull()).rollup("grp", "mode", "run_id").agg(
        F.grouping_id().alias("level"), F.count(F.lit(1)).alias("n"),
        F.percentile_approx("latency", [*QUANTILES, *CDF_GRID], accuracy).alias("q"),
        F.max("latency").alias("max"))
    counts = {(r["grp"], r["mode"], r["run_id"]): r for r in per_run.collect()}
    quantiles = {(r["grp"], r["mode"], r["run_id"] if r["level"] == 0 else None): r
                 for r in lat.where(F.col("level") <= 1).collect()}
    out = []
    for (grp, mode, run_id), c in sorted(counts.items()):
        q = quantiles.get((grp, mode, run_id))
        out.append(Perf(grp, mode, run_id, 1, int(c["attempted"]), int(c["acked"]), int(c["window"] or 0),
                        tuple(int(v) for v in q["q"]) if q else (), None if q is None else int(q["max"])))
    for g in groups:
        for mode in MODES:
            mine = [p for p in out if p.group == g.label and p.mode == mode and p.run_id is not None]
            if not mine:
                continue
            q = quantiles.get((g.label, mode, None))
            out.append(Perf(g.label, mode, None, len(mine), sum(p.attempted for p in mine),
                            sum(p.acknowledged for p in mine), sum(p.window_ns for p in mine),
                            tuple(int(v) for v in q["q"]) if q else (), None if q is None else int(q["max"])))
    return out


@dataclass(frozen=True)
class Ratio:
    group: str
    throughput: float | None  # SYNC ÷ ASYNC acknowledged/s
    p50: float | None
    p99: float | None
    p99_delta_ms: float | None


def _div(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def ratio(sync: Perf, async_: Perf) -> Ratio:
    s99, a99 = sync.q("p99"), async_.q("p99")
    return Ratio(sync.group, _div(sync.acks_per_s, async_.acks_per_s),
                 _div(sync.q("p50"), async_.q("p50")), _div(s99, a99),
                 None if s99 is None or a99 is None else (s99 - a99) / 1e6)


def ratio_words(group: Group, sync: Perf, async_: Perf, r: Ratio) -> str:
    """The cost of durability in one sentence."""
    def tps(p: Perf) -> str:
        return "–" if p.acks_per_s is None else f"{p.acks_per_s:,.0f} msg/s"

    text = f"{group.label} ({group.shape}): SYNC_FLUSH {tps(sync)}, ASYNC_FLUSH {tps(async_)}"
    if r.throughput is not None:
        cost = 100 * (1 - r.throughput)
        text += (f": durability costs {cost:.1f} % of throughput" if cost >= 0
                 else f": durability costs no throughput here (SYNC_FLUSH {-cost:.1f} % faster)")
    if r.p99_delta_ms is not None and r.p99 is not None:
        text += f" and {r.p99_delta_ms:+.2f} ms at p99 (×{r.p99:.2f}"
        text += f"; p50 ×{r.p50:.2f})" if r.p50 is not None else ")"
    text += "."
    if group.open_loop:
        text += (" Both modes were offered the same fixed rate, so throughput shows whether each kept up, not "
                 "its capacity.")
    return text


def _ms(ns: int | None) -> float | None:
    return None if ns is None else ns / 1e6


def run(spark: SparkSession, runs_dir: Path, out_dir: Path, accuracy: int = DEFAULT_ACCURACY,
        broker: str = REFERENCE) -> ReportOutput:
    runs = discover_runs(runs_dir, broker)
    report_dir = make_report_dir(out_dir, NAME)
    groups = comparison_groups(runs)
    compared, fault_free = chosen_pairs(groups)
    perf = compute(spark, compared, runs, accuracy)
    pooled = {(p.group, p.mode): p for p in perf if p.run_id is None}
    checked = [x for x in (loss.run_loss(r) for r in runs) if x is not None and x.flush_mode in MODES]
    # A run that lost its group's master was read from the slave: its loss is the replication mode's.
    losses = [x for x in checked if not loss.lost_master(x)]
    replicated = [x for x in checked if loss.lost_master(x)]
    loss_faults, loss_rows = loss.headline_table(loss.grouped(spark, losses, ("flush_mode", "fault"))
                                                 if losses else [])

    page = Page("Flush modes compared: SYNC_FLUSH against ASYNC_FLUSH")
    page.paragraph(
        "Runs are compared only with runs of the same scenario, parameters and sysctl profile in force that differ "
        "in flush mode. Throughput = acknowledged sends ÷ load window (first send's start to last ack). Send "
        "latency = ack − send start of acknowledged sends; quantiles by percentile_approx (accuracy "
        f"{accuracy:,}) over the raw events of all runs of a mode in the group. Ratios are SYNC ÷ ASYNC.")
    page.heading("Groups")
    page.table(["group", "load", "fault", "sysctl profile", "SYNC_FLUSH runs", "ASYNC_FLUSH runs", "compared"],
               [(g.label, g.shape, g.fault, g.profile, ", ".join(g.runs[SYNC]) or "–", ", ".join(g.runs[ASYNC]) or "–",
                 "yes" if g in compared else ("no: one mode only" if not g.paired else "no: under faults"))
                for g in groups], text_columns=7)
    page.heading("Cost of durability")
    ratios: list[tuple[Group, Ratio]] = []
    if not compared:
        page.paragraph("No group holds runs of both flush modes: nothing to compare.", note=True)
    elif not fault_free:
        page.paragraph("No fault-free pair of runs exists: the figures below come from runs under faults, whose "
                       "latency includes the stalls of the crashes and restarts.", note=True)
    for g in compared:
        s, a = pooled.get((g.label, SYNC)), pooled.get((g.label, ASYNC))
        if s is None or a is None:
            continue
        r = ratio(s, a)
        ratios.append((g, r))
        page.paragraph(ratio_words(g, s, a, r))
        if page.lead is None:
            page.finding(ratio_words(g, s, a, r))
    if page.lead is None:
        page.finding("No group holds runs of both flush modes, so the cost of durability is not measured here.")
    page.table(["group", "throughput SYNC/ASYNC", "p50 SYNC/ASYNC", "p99 SYNC/ASYNC", "p99 difference (ms)"],
               [(g.label, r.throughput, r.p50, r.p99, r.p99_delta_ms) for g, r in ratios])
    value_labels = (*QUANTILE_LABELS, "max")
    mode_rows = [(p.group, p.mode, p.runs, p.acknowledged, p.window_ns / 1e9, p.acks_per_s,
                  *(_ms(p.q(lab)) for lab in value_labels)) for p in perf if p.run_id is None]
    page.heading("Throughput and send latency per mode (ms)")
    page.table(["group", "flush mode", "runs", "acknowledged", "load window (s)", "acknowledged/s", *value_labels],
               mode_rows, text_columns=2)
    files = [write_csv(report_dir / "flush_compare_modes.csv",
                       ["group", "flush_mode", "runs", "acknowledged", "window_s", "acks_per_s",
                        *(f"{lab}_ms" for lab in value_labels)], mode_rows),
             write_csv(report_dir / "flush_compare_ratios.csv",
                       ["group", "throughput_ratio", "p50_ratio", "p99_ratio", "p99_delta_ms"],
                       [(g.label, r.throughput, r.p50, r.p99, r.p99_delta_ms) for g, r in ratios])]
    for i, (g, _) in enumerate(ratios):
        series = {f"{mode} ({g.label})": [(p, v / 1e6) for p, v in pooled[(g.label, mode)].cdf] for mode in MODES}
        files.append(cdf_plot(report_dir / f"cdf_{i}.png", f"Send latency, {g.label}: SYNC vs ASYNC", series))
        page.figure(f"cdf_{i}.png", f"send latency CDF of {g.label}, SYNC_FLUSH against ASYNC_FLUSH")
    run_rows = [(p.run_id, p.group, p.mode, p.attempted, p.acknowledged, p.window_ns / 1e9, p.acks_per_s,
                 *(_ms(p.q(lab)) for lab in value_labels)) for p in perf if p.run_id is not None]
    page.heading("Per run")
    page.table(["run", "group", "flush mode", "attempted", "acknowledged", "load window (s)", "acknowledged/s",
                *value_labels], run_rows, text_columns=3)
    files.append(write_csv(report_dir / "flush_compare_runs.csv",
                           ["run_id", "group", "flush_mode", "attempted", "acknowledged", "window_s", "acks_per_s",
                            *(f"{lab}_ms" for lab in value_labels)], run_rows))
    page.heading("Loss under each fault, per flush mode")
    page.paragraph("From the loss report's per-run rows (check.json): acknowledged sends kept, per flush mode and "
                   "fault. See the loss report for the unflushed windows and every run.", note=True)
    if loss_rows:
        page.table(["flush mode", *loss_faults], loss_rows, text_columns=1 + len(loss_faults))
    else:
        page.paragraph("No run of either flush mode has a check.json.", note=True)
    if replicated:
        rep_faults, rep_rows = loss.replication_table(
            loss.grouped(spark, replicated, ("flush_mode", "replication", "fault")))
        page.heading("Loss when the master is lost, per replication mode")
        page.paragraph("The broker-group runs (python -m chaos replication), read from the slave after the master "
                       "was killed or lost its disk: ASYNC_MASTER against SYNC_MASTER, as the table above sets "
                       "ASYNC_FLUSH against SYNC_FLUSH. See the loss report for the replication lag at the crash.",
                       note=True)
        page.table(["replication (flush mode)", *rep_faults], rep_rows, text_columns=1 + len(rep_faults))
    used = {rid for g in compared for ids in g.runs.values() for rid in ids} | {x.run_id for x in checked}
    return finish_report(page, report_dir, NAME, [r for r in runs if r.run_id in used], files, link_csvs=True,
                         findings=[])


JOB: Final = Job(NAME, run)

if __name__ == "__main__":
    submit(JOB)
