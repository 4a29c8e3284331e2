"""Backlog runs: what a backlog run's controller recorded (meta.json ``results.backlog``, written by
scenarios/backlog_control.py) and what Spark finds in its events and metrics — the drain window's sends and
deliveries, the drain's end, the broker's backlog and the commit log's page-cache bytes over time.

The accumulation report shows these rows; the backlog-capacity report judges the cold-read claim from them.
"""

from collections import defaultdict
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from pyspark.sql import Column, SparkSession, Window
from pyspark.sql import functions as F

from spark_reports.run_records import RunInfo, load_events, load_metrics

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
    # --memory-max runs (scenarios/backlog_control.py results.backlog.memory_cgroup, .head, .tail); None otherwise.
    memory_limit_bytes: int | None = None
    cache_max_in_drain_bytes: int | None = None
    major_faults_in_drain: int | None = None
    oom_kills: int | None = None
    head_p99_ms: dict[str, float] | None = None  # stage -> the head readers' p99 send-to-consume latency
    head_p50_ms: dict[str, float] | None = None
    head_backlog_msgs: dict[str, int] | None = None  # the head group's backlog when each stage began
    message_bytes: int | None = None  # params.message_size

    @property
    def beyond_cache(self) -> bool:
        """The broker ran in a memory cgroup smaller than the backlog: its page cache could not hold it, so
        the drain read the backlog's start from disk by construction."""
        return (self.memory_limit_bytes is not None and self.backlog_bytes is not None
                and self.backlog_bytes > self.memory_limit_bytes)

    @property
    def scale(self) -> str:
        """The backlog size and memory limit a figure was measured at, in words."""
        size = "unknown size" if self.backlog_bytes is None else f"{self.backlog_bytes / 2**30:.2f} GiB"
        if self.message_bytes:
            size += f" ({self.message_bytes:,} B messages)"
        if self.memory_limit_bytes is None:
            return f"a {size} backlog, the broker's page cache not limited"
        return f"a {size} backlog, the broker in a {self.memory_limit_bytes / 2**30:.2f} GiB memory cgroup"

    @property
    def complete(self) -> bool:
        return None not in (self.paused_ns, self.built_ns, self.resumed_ns, self.drained_ns, self.backlog_msgs)

    @property
    def cold(self) -> bool:
        """A cold drain: the page cache was dropped before the consumers resumed."""
        return self.cold_requested and self.cache_dropped

    @property
    def mode(self) -> str:
        if self.beyond_cache:
            return "beyond the cache (memory cgroup)"
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


def _stage_figure(head: Any, stage: str, key: str) -> float | None:
    d = head.get(stage) if isinstance(head, dict) else None
    return float(d[key]) if isinstance(d, dict) and d.get(key) is not None else None


def _per_stage(head: Any, key: str) -> dict[str, float] | None:
    if not isinstance(head, dict):
        return None
    out = {stage: v for stage in head if (v := _stage_figure(head, stage, key)) is not None}
    return out or None


def backlog_plan(run: RunInfo) -> BacklogPlan | None:
    """The run's results.backlog, or None for a run that is not a backlog run."""
    b = (run.meta.get("results") or {}).get("backlog")
    if not isinstance(b, dict):
        return None
    raw_cg = b.get("memory_cgroup")
    cg: dict[str, Any] = raw_cg if isinstance(raw_cg, dict) else {}
    stages = cg.get("stages")
    raw_drain = stages.get("drain") if isinstance(stages, dict) else None
    drain: dict[str, Any] = raw_drain if isinstance(raw_drain, dict) else {}
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
        note=str(b["note"]) if b.get("note") else None,
        memory_limit_bytes=_int(cg.get("limit_bytes")), cache_max_in_drain_bytes=_int(drain.get("cache_max_bytes")),
        major_faults_in_drain=_int(drain.get("broker_major_faults")), oom_kills=_int(cg.get("oom_kills")),
        head_p99_ms=_per_stage(b.get("head"), "p99_ms"), head_p50_ms=_per_stage(b.get("head"), "p50_ms"),
        head_backlog_msgs=({str(k): int(v) for k, v in b["head_backlog_msgs"].items()}
                           if isinstance(b.get("head_backlog_msgs"), dict) else None),
        message_bytes=_int((run.meta.get("params") or {}).get("message_size")))


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
