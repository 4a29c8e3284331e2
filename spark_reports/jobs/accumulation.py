"""Accumulation report: how each backlog run's backlog built and drained, hot or cold, and where the reads came from.

A backlog run (``locust -f scenarios/backlog.py``, the OMB backlog test) records its phases in meta.json
``results.backlog`` (scenarios/backlog_control.py): consumers paused, backlog built (the broker's count), page
cache dropped (``--cold``), consumers resumed, backlog drained (the client's count, acknowledged − delivered, at
or below the drain threshold), the broker's storage reads during the drain, and the page-cache residency of the
backlog's commit-log bytes at the build and after the drop. This report adds, in Spark, what the raw records say:
acknowledged sends and deliveries inside the drain window (resumed, drained] (events), the drain's end as the
events show it, and the broker's backlog and the commit log's page-cache bytes over time (metrics).
"""

from collections import defaultdict
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from pyspark.sql import Column, SparkSession, Window
from pyspark.sql import functions as F

from spark_reports.claims import write_findings
from spark_reports.html_report import Page, ReportOutput, runs_section, write_csv
from spark_reports.plots import bar_plot
from spark_reports.run_records import RunInfo, discover_runs, load_events, load_metrics

NAME: Final = "accumulation"
SECOND_NS: Final = 1_000_000_000
# scenarios/backlog_control.py DISK_READ_SHARE: a drain whose broker fetched more than this share of the backlog's
# bytes from storage read from disk; at or below it, from the page cache.
DISK_READ_SHARE: Final = 0.1
BACKLOG_METRIC: Final = "backlog_msgs"
PAGE_CACHE_METRIC: Final = "page_cache_bytes"
OFFSET_METRIC: Final = "commitlog_max_offset"
COMMITLOG_SET: Final = "commitlog"  # page_cache_bytes label: "commitlog", or "<broker>/commitlog" with several


class ReadSource(StrEnum):
    DISK = "disk"
    PAGE_CACHE = "page cache"
    UNKNOWN = "unknown"


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _ratio(residency: Any) -> float | None:
    if not isinstance(residency, dict) or residency.get("ratio") is None:
        return None
    return float(residency["ratio"])


@dataclass(frozen=True)
class BacklogPlan:
    """What the controller recorded in meta.json results.backlog (None where the run did not get that far)."""

    run_id: str
    cold_requested: bool
    cache_dropped: bool
    drop_reason: str | None
    paused_ns: int | None
    built_ns: int | None
    resumed_ns: int | None
    drained_ns: int | None
    backlog_msgs: int | None
    backlog_bytes: int | None
    threshold: int | None
    disk_read_bytes: int | None
    read_from: str
    residency_at_build: float | None
    residency_after_drop: float | None
    note: str | None

    @property
    def complete(self) -> bool:
        return None not in (self.paused_ns, self.built_ns, self.resumed_ns, self.drained_ns, self.backlog_msgs)

    @property
    def cold(self) -> bool:
        """A cold drain: the page cache was dropped before the consumers resumed."""
        return self.cold_requested and self.cache_dropped

    @property
    def mode(self) -> str:
        if self.cold:
            return "cold"
        if self.cold_requested:
            return f"cold requested, cache not dropped ({self.drop_reason or 'no reason given'})"
        return "hot"

    @property
    def build_s(self) -> float | None:
        if self.paused_ns is None or self.built_ns is None:
            return None
        return (self.built_ns - self.paused_ns) / SECOND_NS

    @property
    def drain_s(self) -> float | None:
        if self.resumed_ns is None or self.drained_ns is None:
            return None
        return (self.drained_ns - self.resumed_ns) / SECOND_NS

    @property
    def disk_read_share(self) -> float | None:
        """Bytes the broker fetched from storage during the drain ÷ the backlog's bytes."""
        if self.disk_read_bytes is None or not self.backlog_bytes:
            return None
        return self.disk_read_bytes / self.backlog_bytes

    @property
    def read_source(self) -> ReadSource:
        """The controller's rule, recomputed from its figures; its words when the figures are missing."""
        share = self.disk_read_share
        if share is not None:
            return ReadSource.DISK if share > DISK_READ_SHARE else ReadSource.PAGE_CACHE
        for source in (ReadSource.DISK, ReadSource.PAGE_CACHE):
            if self.read_from.startswith(source.value):
                return source
        return ReadSource.UNKNOWN

    @property
    def residency_at_drain_start(self) -> float | None:
        """Resident share of the backlog's commit-log files when the consumers resumed."""
        return self.residency_after_drop if self.cold else self.residency_at_build


def backlog_plan(run: RunInfo) -> BacklogPlan | None:
    """The run's results.backlog, or None for a run that is not a backlog run."""
    b = (run.meta.get("results") or {}).get("backlog")
    if not isinstance(b, dict):
        return None
    cold = b.get("cold")
    cold_requested = isinstance(cold, dict) or bool((run.meta.get("params") or {}).get("cold"))
    return BacklogPlan(
        run_id=run.run_id, cold_requested=cold_requested,
        cache_dropped=bool(cold.get("dropped")) if isinstance(cold, dict) else False,
        drop_reason=str(cold["reason"]) if isinstance(cold, dict) and cold.get("reason") else None,
        paused_ns=_int(b.get("paused_at_ns")), built_ns=_int(b.get("built_at_ns")),
        resumed_ns=_int(b.get("resumed_at_ns")), drained_ns=_int(b.get("drained_at_ns")),
        backlog_msgs=_int(b.get("backlog_msgs")), backlog_bytes=_int(b.get("backlog_bytes")),
        threshold=_int(b.get("drain_threshold_msgs")), disk_read_bytes=_int(b.get("disk_read_bytes")),
        read_from=str(b.get("read_from") or "not recorded"),
        residency_at_build=_ratio(b.get("page_cache_at_build")),
        residency_after_drop=_ratio(cold.get("page_cache_after_drop")) if isinstance(cold, dict) else None,
        note=str(b["note"]) if b.get("note") else None)


@dataclass(frozen=True)
class BacklogRow:
    """A backlog run's plan with the figures Spark found in its events and metrics."""

    plan: BacklogPlan
    started_ns: int
    sends_in_drain: int | None  # acknowledged sends with resumed < end_ns <= drained
    receives_in_drain: int | None  # deliveries with resumed < end_ns <= drained
    events_drain_ns: int | None  # the drain's end in the events, − resumed
    max_backlog_metric: float | None  # the broker's largest backlog sample (summed over groups)
    page_cache_at_resume: float | None  # last commit-log page-cache sample at or before the resume
    page_cache_min_in_drain: float | None  # smallest commit-log page-cache sample in (resumed, drained]

    def _per_drain_s(self, count: float | None) -> float | None:
        drain_s = self.plan.drain_s
        return None if count is None or not drain_s else count / drain_s

    @property
    def send_rate_in_drain(self) -> float | None:
        """Acknowledged sends per second while the backlog drained."""
        return self._per_drain_s(self.sends_in_drain)

    @property
    def read_rate(self) -> float | None:
        """Deliveries per second while the backlog drained: the rate the backlog was read at."""
        return self._per_drain_s(self.receives_in_drain)

    @property
    def drain_rate(self) -> float | None:
        """Net drain rate: the backlog built ÷ the drain time (production went on meanwhile)."""
        return self._per_drain_s(self.plan.backlog_msgs)

    @property
    def drain_mb_s(self) -> float | None:
        """The backlog's body bytes ÷ the drain time, in MB/s (10^6 bytes)."""
        rate = self._per_drain_s(self.plan.backlog_bytes)
        return None if rate is None else rate / 1e6


@dataclass(frozen=True)
class Series:
    """One run's metric samples for the plot: (seconds since the run's start, value)."""

    backlog: list[tuple[float, float]]
    page_cache: list[tuple[float, float]]
    written: list[tuple[float, float]]


def _is_commitlog() -> Column:
    return (F.col("label") == COMMITLOG_SET) | F.col("label").endswith("/" + COMMITLOG_SET)


def backlog_rows(spark: SparkSession, runs: list[RunInfo], *,
                 with_series: bool = True) -> tuple[list[BacklogRow], dict[str, Series]]:
    """Every backlog run's row (sorted by run id) and, unless ``with_series`` is false, its metric series."""
    plans = {p.run_id: p for p in (backlog_plan(r) for r in runs) if p is not None}
    if not plans:
        return [], {}
    backlog_runs = [r for r in runs if r.run_id in plans]
    started = {r.run_id: r.started_at_ns or 0 for r in backlog_runs}
    windows = spark.createDataFrame(
        [(p.run_id, p.resumed_ns, p.drained_ns, p.threshold) for p in plans.values() if p.complete],
        "run_id string, resumed long, drained long, threshold long")

    events = load_events(spark, backlog_runs, ["op", "outcome", "end_ns"]).where(
        (F.col("outcome") == "ok") & F.col("op").isin("send", "receive"))
    # Acknowledged − delivered after every event time t: a range frame sums all events with end_ns <= t.
    upto = Window.partitionBy("run_id").orderBy("end_ns").rangeBetween(Window.unboundedPreceding, 0)
    flow = events.select("run_id", "op", "end_ns",
                         F.sum(F.when(F.col("op") == "send", 1).otherwise(-1)).over(upto).alias("behind"))
    in_drain = (F.col("end_ns") > F.col("resumed")) & (F.col("end_ns") <= F.col("drained"))
    after_resume = F.col("end_ns") > F.col("resumed")
    event_figures = flow.join(F.broadcast(windows), "run_id").groupBy("run_id").agg(
        F.sum(F.when(in_drain & (F.col("op") == "send"), 1).otherwise(0)).alias("sends"),
        F.sum(F.when(in_drain & (F.col("op") == "receive"), 1).otherwise(0)).alias("receives"),
        F.min(F.when(after_resume & (F.col("behind") <= F.col("threshold")), F.col("end_ns"))).alias("drain_end"),
    )
    by_event = {r["run_id"]: r for r in event_figures.collect()}

    metrics = load_metrics(spark, backlog_runs).where(
        F.col("metric").isin(BACKLOG_METRIC, OFFSET_METRIC)
        | ((F.col("metric") == PAGE_CACHE_METRIC) & _is_commitlog()))
    # One value per sample time: summed over consumer groups (backlog) or brokers (page cache, offsets).
    per_ts = metrics.groupBy("run_id", "metric", "ts_ns").agg(F.sum("value").alias("value"))
    is_page = F.col("metric") == PAGE_CACHE_METRIC
    before_resume = is_page & (F.col("ts_ns") <= F.col("resumed"))
    in_drain_ts = is_page & (F.col("ts_ns") > F.col("resumed")) & (F.col("ts_ns") <= F.col("drained"))
    # One query for the three figures (each Spark action costs about a second on a small machine).
    metric_figures = {r["run_id"]: r for r in per_ts.join(F.broadcast(windows), "run_id", "left").groupBy("run_id")
                      .agg(F.max(F.when(F.col("metric") == BACKLOG_METRIC, F.col("value"))).alias("max_backlog"),
                           F.max_by(F.when(before_resume, F.col("value")),
                                    F.when(before_resume, F.col("ts_ns"))).alias("at_resume"),
                           F.min(F.when(in_drain_ts, F.col("value"))).alias("min_in_drain")).collect()}
    points: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    if with_series:
        for r in per_ts.orderBy("run_id", "metric", "ts_ns").collect():
            points[r["run_id"]][r["metric"]].append(((r["ts_ns"] - started[r["run_id"]]) / 1e9,
                                                     float(r["value"])))

    def value(table: dict[str, Any], run_id: str, key: str) -> Any:
        row = table.get(run_id)
        return None if row is None else row[key]

    rows = []
    for run_id in sorted(plans):
        plan = plans[run_id]
        drain_end = value(by_event, run_id, "drain_end")
        rows.append(BacklogRow(
            plan=plan, started_ns=started[run_id],
            sends_in_drain=value(by_event, run_id, "sends"), receives_in_drain=value(by_event, run_id, "receives"),
            events_drain_ns=None if drain_end is None or plan.resumed_ns is None else drain_end - plan.resumed_ns,
            max_backlog_metric=value(metric_figures, run_id, "max_backlog"),
            page_cache_at_resume=value(metric_figures, run_id, "at_resume"),
            page_cache_min_in_drain=value(metric_figures, run_id, "min_in_drain")))
    series = {run_id: Series(list(p[BACKLOG_METRIC]), list(p[PAGE_CACHE_METRIC]), list(p[OFFSET_METRIC]))
              for run_id, p in points.items()}
    return rows, series


@dataclass(frozen=True)
class ModeSummary:
    """Hot or cold: how many complete runs, and their read and drain rates."""

    mode: str
    runs: int
    mean_read_rate: float
    min_read_rate: float
    mean_drain_rate: float


def mode_summaries(spark: SparkSession, rows: list[BacklogRow]) -> list[ModeSummary]:
    """Per hot / cold (runs that asked for cold but kept the cache count as hot), over runs with both rates."""
    data = [("cold" if r.plan.cold else "hot", r.read_rate, r.drain_rate) for r in rows
            if r.read_rate is not None and r.drain_rate is not None]
    if not data:
        return []
    df = spark.createDataFrame(data, "mode string, read double, drain double")
    agg = df.groupBy("mode").agg(F.count(F.lit(1)).alias("runs"), F.avg("read").alias("mean_read"),
                                 F.min("read").alias("min_read"), F.avg("drain").alias("mean_drain"))
    return [ModeSummary(r["mode"], int(r["runs"]), float(r["mean_read"]), float(r["min_read"]),
                        float(r["mean_drain"])) for r in agg.orderBy(F.col("mode").desc()).collect()]


def _phase_plot(path: Path, row: BacklogRow, series: Series) -> Path:
    """The broker's backlog (top) and the commit log's bytes written and cached (bottom), with the phase marks."""
    fig = Figure(figsize=(9, 6))
    top, bottom = fig.subplots(2, 1, sharex=True)
    top.plot([x for x, _ in series.backlog], [y for _, y in series.backlog], marker=".", label="backlog (broker)")
    top.set_ylabel("messages")
    bottom.plot([x for x, _ in series.written], [y / 2**20 for _, y in series.written], marker=".",
                label="commit log written")
    bottom.plot([x for x, _ in series.page_cache], [y / 2**20 for _, y in series.page_cache], marker=".",
                label="commit log in page cache")
    bottom.set_ylabel("MiB")
    bottom.set_xlabel("seconds since the run's start")
    p = row.plan
    marks = (("paused", p.paused_ns), ("built", p.built_ns), ("resumed", p.resumed_ns), ("drained", p.drained_ns))
    for n, (label, ts) in enumerate(marks):
        if ts is None:
            continue
        for ax in (top, bottom):
            ax.axvline((ts - row.started_ns) / 1e9, color=f"C{n + 3}", linestyle="--", linewidth=1,
                       label=label if ax is top else None)
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="x-small")
    top.set_title(f"{p.run_id} ({p.mode})")
    FigureCanvasAgg(fig)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)
    return path


def _num(value: float | None, digits: int = 1) -> str | None:
    return None if value is None else f"{value:,.{digits}f}"


def _share(value: float | None) -> str | None:
    return None if value is None else f"{100 * value:.1f} %"


def run(spark: SparkSession, runs_dir: Path, out_dir: Path) -> ReportOutput:
    runs = discover_runs(runs_dir)
    report_dir = out_dir / NAME
    report_dir.mkdir(parents=True, exist_ok=True)
    rows, series = backlog_rows(spark, runs)
    files = [write_findings(report_dir, [])]  # the claims these runs bear on are judged by backlog-capacity

    page = Page("Accumulation: building and draining a backlog")
    page.paragraph(
        "The OMB backlog test (scenarios/backlog.py): consumers pause while producers go on until the broker reports "
        "the target backlog (build), a --cold run then drops the page cache, and the consumers resume until "
        "acknowledged − delivered falls to the drain threshold (drain). Phase times, the backlog built, the broker's "
        "storage reads during the drain and the backlog's page-cache residency come from meta.json results.backlog; "
        "the rates in the drain window (resumed, drained] and the drain's end as the events show it are computed "
        "from the raw events; the backlog and page-cache series are the broker's metrics (one sample a second).")
    csv_rows = []
    for r in rows:
        p = r.plan
        csv_rows.append((
            p.run_id, p.mode, p.build_s, p.backlog_msgs, p.backlog_bytes, p.threshold, p.drain_s,
            None if r.events_drain_ns is None else r.events_drain_ns / 1e9, r.drain_rate, r.drain_mb_s, r.read_rate,
            r.send_rate_in_drain, r.sends_in_drain, r.receives_in_drain, p.read_source.value, p.read_from,
            p.disk_read_bytes, p.residency_at_build, p.residency_after_drop, p.residency_at_drain_start,
            r.page_cache_at_resume, r.page_cache_min_in_drain, r.max_backlog_metric, p.note))
    files.append(write_csv(report_dir / "accumulation.csv", [
        "run_id", "mode", "build_s", "backlog_msgs", "backlog_bytes", "drain_threshold_msgs", "drain_s",
        "drain_s_events", "drain_rate_msgs_per_s", "drain_mb_per_s", "read_rate_msgs_per_s",
        "send_rate_in_drain_msgs_per_s", "sends_in_drain", "receives_in_drain", "read_source", "read_from",
        "disk_read_bytes", "residency_at_build", "residency_after_drop", "residency_at_drain_start",
        "page_cache_commitlog_at_resume_bytes", "page_cache_commitlog_min_in_drain_bytes", "max_backlog_msgs_metric",
        "note"], csv_rows))

    if not rows:
        page.paragraph("No backlog runs (meta.json results.backlog) among the runs read: nothing to show. "
                       "Run: locust -f scenarios/backlog.py --headless (add --cold for a cold drain).", note=True)
    else:
        page.heading("Build and drain")
        page.table(
            ["run", "mode", "build (s)", "backlog (msgs)", "backlog (MiB)", "drain (s)", "drain (s, events)",
             "drain rate (msg/s)", "drain (MB/s)", "read rate (msg/s)", "sends during drain (msg/s)"],
            [(r.plan.run_id, r.plan.mode, _num(r.plan.build_s, 3), r.plan.backlog_msgs,
              _num(None if r.plan.backlog_bytes is None else r.plan.backlog_bytes / 2**20),
              _num(r.plan.drain_s, 3), _num(None if r.events_drain_ns is None else r.events_drain_ns / 1e9, 3),
              _num(r.drain_rate), _num(r.drain_mb_s, 2), _num(r.read_rate), _num(r.send_rate_in_drain))
             for r in rows], text_columns=2)
        page.paragraph(
            "Drain rate = backlog ÷ drain time (net: producers went on during the drain); MB/s counts the backlog's "
            "body bytes (10^6 B). Read rate = deliveries in the drain window ÷ its length: how fast the backlog was "
            "read. Sends during drain = acknowledged sends in the window ÷ its length. Drain (s, events) is the first "
            "event after the resume after which acknowledged − delivered ≤ the threshold; the controller polls every "
            "0.1 s, so its time may be up to that much later.", note=True)
        incomplete = [r.plan for r in rows if not r.plan.complete]
        if incomplete:
            page.table(["run", "why the figures are missing"], [(p.run_id, p.note or "phase times missing")
                                                                 for p in incomplete], text_columns=2)
        page.heading("Where the drain read from")
        page.table(
            ["run", "mode", "read source", "controller's words", "read from storage (MiB)", "share of backlog",
             "resident at build", "resident after drop", "resident at drain start",
             "commit log cached at resume (MiB)", "least cached in drain (MiB)"],
            [(r.plan.run_id, r.plan.mode, r.plan.read_source.value, r.plan.read_from,
              _num(None if r.plan.disk_read_bytes is None else r.plan.disk_read_bytes / 2**20),
              _share(r.plan.disk_read_share), _share(r.plan.residency_at_build), _share(r.plan.residency_after_drop),
              _share(r.plan.residency_at_drain_start),
              _num(None if r.page_cache_at_resume is None else r.page_cache_at_resume / 2**20),
              _num(None if r.page_cache_min_in_drain is None else r.page_cache_min_in_drain / 2**20))
             for r in rows], text_columns=4)
        page.paragraph(
            f"Read source: disk when the broker process fetched more than {DISK_READ_SHARE:.0%} of the backlog's "
            "bytes from storage during the drain (/proc/<pid>/io read_bytes, the controller's rule), else page "
            "cache. Residency: resident ÷ written bytes of the commit-log files holding the backlog (fincore), "
            "measured at the build and right after a cold run's drop. drop_caches evicts only clean, unmapped pages: "
            "the broker maps its commit log, so a cold run may still find the backlog cached, and then its drain "
            "is a hot figure. The cached columns are the page_cache_bytes metric of all commit-log files.", note=True)
        summaries = mode_summaries(spark, rows)
        if len(summaries) == 2:
            hot, cold = (next(s for s in summaries if s.mode == m) for m in ("hot", "cold"))
            page.heading("Hot against cold")
            page.table(["mode", "runs", "mean read rate (msg/s)", "slowest read rate (msg/s)",
                        "mean drain rate (msg/s)"],
                       [(s.mode, s.runs, _num(s.mean_read_rate), _num(s.min_read_rate), _num(s.mean_drain_rate))
                        for s in summaries])
            page.paragraph(f"Cold reads ran at {cold.mean_read_rate / hot.mean_read_rate:.2f} × the hot rate "
                           f"(mean over runs); cold drains at {cold.mean_drain_rate / hot.mean_drain_rate:.2f} × "
                           "the hot drain rate.")
        else:
            page.paragraph("Hot against cold: needs at least one hot and one cold (cache dropped) run with a "
                           "complete drain; these runs have " + (", ".join(f"{s.runs} {s.mode}" for s in summaries)
                                                                 or "none") + ".", note=True)
        rated = [r for r in rows if r.read_rate is not None and r.drain_rate is not None]
        if rated:
            files.append(bar_plot(report_dir / "drain_rates.png", "Backlog read and drain rates",
                                  [f"{r.plan.run_id} ({'cold' if r.plan.cold else 'hot'})" for r in rated],
                                  {"read rate": [r.read_rate or 0.0 for r in rated],
                                   "net drain rate": [r.drain_rate or 0.0 for r in rated]}, "messages/s"))
            page.figure("drain_rates.png", "read and drain rates per backlog run")
        page.heading("Backlog and page cache over time")
        for n, r in enumerate(rows):
            s = series.get(r.plan.run_id)
            if s is None or not (s.backlog or s.page_cache):
                page.paragraph(f"{r.plan.run_id}: no backlog or page-cache metrics.", note=True)
                continue
            name = f"backlog_{n}.png"
            files.append(_phase_plot(report_dir / name, r, s))
            page.figure(name, f"backlog and page cache of {r.plan.run_id}")
        files.append(write_csv(report_dir / "backlog_series.csv", ["run_id", "seconds", "metric", "value"],
                               [(run_id, x, metric, y) for run_id, s in sorted(series.items())
                                for metric, points in ((BACKLOG_METRIC, s.backlog), (PAGE_CACHE_METRIC, s.page_cache),
                                                       (OFFSET_METRIC, s.written)) for x, y in points]))
        page.links([("accumulation.csv", "accumulation.csv"), ("backlog_series.csv", "backlog_series.csv")])
    if not rows:
        page.links([("accumulation.csv", "accumulation.csv")])
    runs_section(page, runs)
    index = report_dir / "index.html"
    page.write(index)
    return ReportOutput(NAME, index, tuple(files))


if __name__ == "__main__":
    from spark_reports.cli import job_main

    job_main(NAME)
