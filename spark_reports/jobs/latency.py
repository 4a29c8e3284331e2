"""Latency report: send latency, send-to-consume latency and publish delay, per run and per 10 s window.

Every figure comes from the raw event rows (docs/design.md, Run records: never an average of percentiles).
- send latency = end_ns − start_ns of acknowledged sends (outcome "ok"), as OMB's publishLatency;
- publish delay = start_ns − intended_ns of every send attempt, the coordinated-omission metric
  (OMB's publishDelayLatency); 0 for closed-loop runs, where intended_ns = start_ns;
- send-to-consume = a delivered receive's end_ns − the start_ns of the first send of the same key
  (a join on key within the run); receives with no send are counted as unmatched, not guessed.
A sample belongs to the 10 s window (counted from meta.started_at_ns) in which it became known:
the ack (send latency), the send's start (publish delay), the delivery (send-to-consume).
Run totals and windows come from one aggregation over the same raw samples (see `compute`).
"""

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Final

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from spark_reports.fault_bands import fault_bands
from spark_reports.html_report import Page, ReportOutput, write_csv
from spark_reports.job_runner import Job, submit
from spark_reports.percentiles import (
    CDF_GRID,
    DEFAULT_ACCURACY,
    DEFAULT_WINDOW_ACCURACY,
    LABELS,
    MIN_ACCURACY,
    PERCENTILES,
)
from spark_reports.plots import cdf_panels, fault_scatter, window_panels
from spark_reports.report_io import finish_report, make_report_dir
from spark_reports.run_records import REFERENCE, RunInfo, discover_runs, load_events, read_faults

NAME: Final = "latency"
WINDOW_NS: Final = 10_000_000_000
MAX_HTML_WINDOW_ROWS: Final = 120


class Metric(StrEnum):
    SEND = "send_latency"
    SEND_TO_CONSUME = "send_to_consume_latency"
    PUBLISH_DELAY = "publish_delay"


TITLES: Final = {
    Metric.SEND: "Send latency (ack − send start, acknowledged sends)",
    Metric.SEND_TO_CONSUME: "Send-to-consume latency (delivery − first send start, joined on key)",
    Metric.PUBLISH_DELAY: "Publish delay (send start − intended start, all sends)",
}


@dataclass(frozen=True)
class Stats:
    """Percentiles (ns) of one group of samples; ``unmatched`` counts receives with no send."""

    run_id: str
    metric: Metric
    window: int | None
    samples: int
    unmatched: int
    percentiles: tuple[int, ...]
    maximum: int | None
    cdf: tuple[tuple[float, int], ...]

    def value(self, label: str) -> int | None:
        if label == "max":
            return self.maximum
        return self.percentiles[LABELS.index(label)] if self.samples else None


METRIC_CODES: Final = {m: i for i, m in enumerate(Metric)}


def samples(events: DataFrame, runs: Sequence[str], starts: Mapping[str, int]) -> DataFrame:
    """Long format: run (index into ``runs``), metric (index into Metric), window, value_ns.

    value_ns is null for a delivery whose key was never sent; window counts 10 s from ``starts[run]``
    at the moment the sample became known. One scan and one shuffle: each send or delivery row keeps
    only what its samples need, rows are partitioned by (run, key) so each learns the first send's start
    of its key, and then every row yields its samples. Measured on 10M events, this costs about two
    thirds of scanning twice and joining sends to deliveries. Runs and metrics travel as small integers.
    """
    index = {run_id: i for i, run_id in enumerate(runs)}
    run_of = F.create_map(*[F.lit(x) for item in index.items() for x in item])[F.col("run_id")]
    start_of = F.create_map(*[F.lit(x) for i, run_id in enumerate(runs) for x in (i, starts[run_id])])[F.col("run")]
    is_send = F.col("op") == "send"
    ok = F.col("outcome") == "ok"
    rows = events.where(F.col("run_id").isin(list(runs)) & (is_send | ((F.col("op") == "receive") & ok))).select(
        run_of.alias("run"), "key",
        F.when(is_send, F.col("start_ns")).alias("send_start_ns"),
        F.when(is_send & ok, F.col("end_ns")).alias("ack_ns"),
        F.when(is_send, F.col("intended_ns")).alias("intended_ns"),
        F.when(~is_send, F.col("end_ns")).alias("delivered_ns"),
    )
    rows = rows.withColumn("first_send_ns", F.min("send_start_ns").over(Window.partitionBy("run", "key")))

    def sample(metric: Metric, ts: str, value: Column) -> Column:
        window = F.floor((F.col(ts) - start_of) / F.lit(WINDOW_NS)).cast("long")
        return F.when(F.col(ts).isNotNull(), F.struct(
            F.lit(METRIC_CODES[metric]).cast("byte").alias("metric"), window.alias("window"),
            value.alias("value_ns")))

    per_row = F.array(
        sample(Metric.SEND, "ack_ns", F.col("ack_ns") - F.col("send_start_ns")),
        sample(Metric.PUBLISH_DELAY, "send_start_ns", F.col("send_start_ns") - F.col("intended_ns")),
        sample(Metric.SEND_TO_CONSUME, "delivered_ns", F.col("delivered_ns") - F.col("first_send_ns")),
    )
    exploded = rows.select("run", F.explode(per_row).alias("s")).where(F.col("s").isNotNull())
    return exploded.select("run", "s.metric", "s.window", "s.value_ns")


def _run_starts(spark: SparkSession, runs: list[RunInfo], events: DataFrame) -> dict[str, int]:
    starts = {r.run_id: r.started_at_ns for r in runs if r.started_at_ns is not None}
    missing = [r.run_id for r in runs if r.started_at_ns is None]
    if missing:  # meta without started_at_ns: count windows from the run's first op instead
        rows = events.where(F.col("run_id").isin(missing)).groupBy("run_id").agg(F.min("start_ns")).collect()
        starts.update({str(r[0]): int(r[1]) for r in rows if r[1] is not None})
    return {k: int(v) for k, v in starts.items() if v is not None}


def compute(spark: SparkSession, runs: list[RunInfo], accuracy: int = DEFAULT_ACCURACY,
            window_accuracy: int = DEFAULT_WINDOW_ACCURACY) -> list[Stats]:
    """Run-level and per-window stats for every run and metric, from one aggregation over the raw samples."""
    if min(accuracy, window_accuracy) < MIN_ACCURACY:
        raise ValueError(f"accuracy must be at least {MIN_ACCURACY}")
    events = load_events(spark, runs, ["op", "key", "intended_ns", "start_ns", "end_ns", "outcome"])
    starts = _run_starts(spark, runs, events)
    if not starts:
        return []
    run_ids = sorted(starts)
    # Every sample counts twice: once for its run's total (level 0) and once for its window (level 1).
    # Each copy feeds only its own level's sketch (percentile_approx skips nulls), so run totals can use a
    # finer accuracy than the many small window groups. This is what grouping sets do, with two accuracies.
    level = F.explode(F.array(F.lit(0), F.lit(1))).alias("level")
    rows = samples(events, run_ids, starts).select("*", level)
    rows = rows.withColumn("window", F.when(F.col("level") == 1, F.col("window")))
    result = rows.groupBy("run", "metric", "level", "window").agg(
        F.count(F.lit(1)).alias("rows"),
        F.count("value_ns").alias("samples"),
        F.percentile_approx(F.when(F.col("level") == 0, F.col("value_ns")), [*PERCENTILES, *CDF_GRID],
                            accuracy).alias("q_run"),
        F.percentile_approx(F.when(F.col("level") == 1, F.col("value_ns")), list(PERCENTILES),
                            window_accuracy).alias("q_window"),
        F.max("value_ns").alias("max"),
    )
    metrics = list(Metric)
    out = []
    n = len(PERCENTILES)
    for r in result.collect():
        whole = r["level"] == 0
        q = [int(v) for v in (r["q_run"] if whole else r["q_window"]) or []]
        out.append(Stats(
            run_id=run_ids[r["run"]], metric=metrics[r["metric"]], window=None if whole else int(r["window"]),
            samples=int(r["samples"]), unmatched=int(r["rows"]) - int(r["samples"]),
            percentiles=tuple(q[:n]), maximum=None if r["max"] is None else int(r["max"]),
            cdf=tuple(zip(CDF_GRID, q[n:], strict=True)) if whole and q else (),
        ))
    return sorted(out, key=lambda s: (s.metric, s.run_id, -1 if s.window is None else s.window))


def _us(ns: int | None) -> str:
    return "" if ns is None else f"{ns / 1e3:.3f}"


def _ms(ns: int | None) -> float | None:
    return None if ns is None else ns / 1e6


def panel_of(run: RunInfo) -> str:
    """The small-multiples panel a run is drawn in: its scenario (a chaos run's names its fault and flush mode)."""
    return run.scenario


def finding_sentence(whole: Sequence[Stats], panels: Mapping[str, str]) -> str:
    """The page's one sentence, from the run totals: the spread of send-latency p99 over the runs, and the run
    with the worst tail (its scenario, p99.9 and maximum)."""
    send = [s for s in whole if s.metric is Metric.SEND and s.samples]
    if not send:
        return "No acknowledged send in these runs, so no send latency to report."
    p99 = sorted(send, key=lambda s: s.value("p99") or 0)
    best, worst = p99[0], p99[-1]
    scenarios = len({panels.get(s.run_id, "?") for s in send})
    return (f"Send latency p99 ranged from {_fmt_ms(best.value('p99'))} ms ({panels.get(best.run_id, '?')}) to "
            f"{_fmt_ms(worst.value('p99'))} ms ({panels.get(worst.run_id, '?')}, p99.9 "
            f"{_fmt_ms(worst.value('p99.9'))} ms, max {_fmt_ms(worst.value('max'))} ms) over {len(send)} "
            f"run{'s' if len(send) != 1 else ''} "
            f"in {scenarios} scenario{'s' if scenarios != 1 else ''}.")


def _fmt_ms(ns: int | None) -> str:
    return "–" if ns is None else f"{ns / 1e6:,.3g}" if ns < 10**9 else f"{ns / 1e6:,.0f}"


MAX_SCATTER_POINTS: Final = 40_000  # per run: more points only overdraw; a larger run is sampled uniformly


def send_points(spark: SparkSession, runs: Sequence[RunInfo], starts: Mapping[str, int],
                limit: int = MAX_SCATTER_POINTS) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """Each send of ``runs``: ``[run][outcome] = [(s since the run's start, latency ms)]``; a run with more than
    ``limit`` sends is sampled (a fixed seed, so the same runs draw the same points)."""
    if not runs:
        return {}
    events = load_events(spark, runs, ["op", "start_ns", "end_ns", "outcome"])
    sends = events.where(F.col("op") == "send")
    counts = {str(r[0]): int(r[1]) for r in sends.groupBy("run_id").count().collect()}
    # One more pass keeps each run's share: a run over the limit keeps each send with probability limit / n.
    keep = {run_id: min(1.0, limit / n) for run_id, n in counts.items() if n}
    share = F.create_map(*[F.lit(x) for item in keep.items() for x in item])[F.col("run_id")]
    rows = sends.where(F.rand(seed=1) < share).select("run_id", "start_ns", "end_ns", "outcome").collect()
    out: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        run_id = str(r["run_id"])
        out[run_id][str(r["outcome"])].append(((r["start_ns"] - starts.get(run_id, 0)) / 1e9,
                                               max(0, r["end_ns"] - r["start_ns"]) / 1e6))
    return {run_id: dict(per) for run_id, per in out.items()}


def run(spark: SparkSession, runs_dir: Path, out_dir: Path, accuracy: int = DEFAULT_ACCURACY,
        window_accuracy: int = DEFAULT_WINDOW_ACCURACY, broker: str = REFERENCE) -> ReportOutput:
    runs = discover_runs(runs_dir, broker)
    report_dir = make_report_dir(out_dir, NAME)
    stats = compute(spark, runs, accuracy, window_accuracy)
    whole = [s for s in stats if s.window is None]
    windows = [s for s in stats if s.window is not None]
    value_labels = (*LABELS, "max")
    panels = {r.run_id: panel_of(r) for r in runs}

    files = [
        write_csv(report_dir / "latency_summary.csv",
                  ["run_id", "metric", "samples", "unmatched", *(f"{lab}_us" for lab in value_labels)],
                  [(s.run_id, s.metric.value, s.samples, s.unmatched, *(_us(s.value(lab)) for lab in value_labels))
                   for s in whole]),
        write_csv(report_dir / "latency_windows.csv",
                  ["run_id", "metric", "window_start_s", "samples", *(f"{lab}_us" for lab in value_labels)],
                  [(s.run_id, s.metric.value, (s.window or 0) * WINDOW_NS // 10**9, s.samples,
                    *(_us(s.value(lab)) for lab in value_labels)) for s in windows]),
        write_csv(report_dir / "latency_cdf.csv", ["run_id", "metric", "percentile", "value_us"],
                  [(s.run_id, s.metric.value, f"{p * 100:g}", _us(v)) for s in whole for p, v in s.cdf]),
    ]

    page = Page("Latency")
    page.finding(finding_sentence(whole, panels))
    page.paragraph(
        "Percentiles are nearest-rank values from the raw event rows (Spark's percentile_approx); run totals "
        "are computed from all of a run's samples, never by combining windows. Rank error at most n/accuracy: "
        f"accuracy {accuracy:,} for run totals, {window_accuracy:,} for 10 s windows. Send latency counts "
        "acknowledged sends; publish delay counts every send attempt (0 in closed-loop runs); send-to-consume "
        "joins each delivery to the first send of its key, and deliveries of keys never sent are counted as "
        "unmatched. Values in milliseconds. Each figure has one panel per scenario (a chaos run's scenario names "
        "its fault and flush mode), with the same axes on every panel; inside a panel, one line per run.")
    starts = {r.run_id: r.started_at_ns for r in runs if r.started_at_ns is not None}
    _chaos_section(spark, page, report_dir, files, runs, starts)
    for metric in Metric:
        page.heading(TITLES[metric])
        rows = [s for s in whole if s.metric is metric]
        if not rows:
            page.paragraph("No samples.", note=True)
            continue
        cdf_panels_: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(dict)
        for s in sorted(rows, key=lambda s: (panels.get(s.run_id, "?"), s.run_id)):
            if s.cdf:
                cdf_panels_[panels.get(s.run_id, "?")][s.run_id] = [(p, v / 1e6) for p, v in s.cdf]
        files.append(cdf_panels(report_dir / f"cdf_{metric.value}.png", TITLES[metric], cdf_panels_))
        page.figure(f"cdf_{metric.value}.png", f"percentile plot of {metric.value}: one panel per scenario, "
                    "one line per run", main=metric is Metric.SEND)
        header = ["run", "scenario", "samples", *value_labels]
        if metric is Metric.SEND_TO_CONSUME:
            header.insert(3, "unmatched receives")
        page.table(header, [
            (s.run_id, panels.get(s.run_id, "?"), s.samples,
             *([s.unmatched] if metric is Metric.SEND_TO_CONSUME else []),
             *(_ms(s.value(lab)) for lab in value_labels)) for s in rows], text_columns=2)
        per_panel: dict[str, dict[str, dict[str, list[tuple[float, float]]]]] = defaultdict(
            lambda: defaultdict(lambda: defaultdict(list)))
        metric_windows = [s for s in windows if s.metric is metric and s.samples]
        for s in metric_windows:
            start_s = (s.window or 0) * WINDOW_NS / 1e9
            for lab in ("p50", "p99", "max"):
                value = s.value(lab)
                if value is not None:
                    per_panel[panels.get(s.run_id, "?")][s.run_id][lab].append((start_s, value / 1e6))
        files.append(window_panels(report_dir / f"windows_{metric.value}.png",
                                   f"{TITLES[metric]}, per 10 s window", dict(sorted(per_panel.items()))))
        page.figure(f"windows_{metric.value}.png", f"{metric.value} per 10 s window, one panel per scenario")
        if len(metric_windows) <= MAX_HTML_WINDOW_ROWS:
            page.table(["run", "window start (s)", "samples", *value_labels],
                       [(s.run_id, str((s.window or 0) * WINDOW_NS // 10**9), s.samples,
                         *(_ms(s.value(lab)) for lab in value_labels)) for s in metric_windows], text_columns=2)
        else:
            page.paragraph(f"{len(metric_windows)} windows: see latency_windows.csv.", note=True)
    return finish_report(page, report_dir, NAME, runs, files, link_csvs=True)


def _chaos_section(spark: SparkSession, page: Page, report_dir: Path, files: list[Path], runs: Sequence[RunInfo],
                   starts: Mapping[str, int]) -> None:
    """Jepsen's latency-over-time chart for each run with faults and sends: every send a point (colour by outcome),
    each fault a band from its start to its recovery, read from the run's faults.jsonl."""
    bands = {r.run_id: b for r in runs if r.run_id in starts and (b := fault_bands(read_faults(r), starts[r.run_id]))}
    points = send_points(spark, [r for r in runs if r.run_id in bands], starts)
    bands = {run_id: b for run_id, b in bands.items() if points.get(run_id)}  # recovery-bench runs send nothing
    if not bands:
        return
    page.heading("Send latency over time, faults shaded (runs with faults)")
    page.paragraph("Each send is a point at its start: blue acknowledged, red failed, orange unknown (timed out: "
                   "the producer cannot tell). Each grey band runs from a fault (from faults.jsonl) to the line that "
                   "ends it: the restart, resume, heal or freed space.", note=True)
    rows = []
    for run_id, run_bands in bands.items():
        name = f"faults_{run_id}.png"
        files.append(fault_scatter(report_dir / name, f"{run_id}: send latency over time", points.get(run_id, {}),
                                   run_bands))
        page.figure(name, f"send latency over time of {run_id}, faults shaded")
        rows += [(run_id, b.label, f"{b.start_s:.3f}", f"{b.end_s:.3f}", f"{b.end_s - b.start_s:.3f}")
                 for b in run_bands]
    page.table(["run", "fault", "start (s)", "recovered (s)", "down (s)"], rows, text_columns=2)


JOB: Final = Job(NAME, run, percentile_options=True)

if __name__ == "__main__":
    submit(JOB)
