"""Accumulation report: how each backlog run's backlog built and drained, hot or cold, and where the reads came from.

A backlog run (``locust -f scenarios/backlog.py``, the OMB backlog test) records its phases in meta.json
``results.backlog`` (scenarios/backlog_control.py): consumers paused, backlog built (the broker's count), page
cache dropped (``--cold``), consumers resumed, backlog drained (the client's count, acknowledged − delivered, at
or below the drain threshold), the broker's storage reads during the drain, and the page-cache residency of the
backlog's commit-log bytes at the build and after the drop. This report adds, in Spark, what the raw records say:
acknowledged sends and deliveries inside the drain window (resumed, drained] (events), the drain's end as the
events show it, and the broker's backlog and the commit log's page-cache bytes over time (metrics).
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_reports.backlog_runs import (
    BACKLOG_METRIC,
    DISK_READ_SHARE,
    OFFSET_METRIC,
    PAGE_CACHE_METRIC,
    BacklogRow,
    Series,
    backlog_rows,
)
from spark_reports.claims import write_findings
from spark_reports.html_report import Page, ReportOutput, write_csv
from spark_reports.job_runner import Job, submit
from spark_reports.plots import bar_plot
from spark_reports.report_io import finish_report, fixed, make_report_dir
from spark_reports.run_records import REFERENCE, discover_runs

NAME: Final = "accumulation"


@dataclass(frozen=True)
class ModeSummary:
    """Hot or cold: how many complete runs, and their read and drain rates."""

    mode: str
    runs: int
    mean_read_rate: float
    min_read_rate: float
    mean_drain_rate: float


def _heat(row: BacklogRow) -> str:
    """cold or hot; a drain whose backlog exceeded the broker's memory cgroup read from disk: cold, though nothing
    was dropped."""
    return "cold" if row.plan.cold or row.plan.beyond_cache else "hot"


def mode_summaries(spark: SparkSession, rows: list[BacklogRow]) -> list[ModeSummary]:
    """Per hot / cold (runs that asked for cold but kept the cache count as hot; runs beyond the broker's memory
    cgroup count as cold), over runs with both rates."""
    data = [(_heat(r), r.read_rate, r.drain_rate) for r in rows
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


def _share(value: float | None) -> str | None:
    return None if value is None else f"{100 * value:.1f} %"


def _ms(stage_figures: dict[str, float] | None, stage: str) -> str | None:
    value = (stage_figures or {}).get(stage)
    return None if value is None else f"{value:,.1f}"


def _memory_cgroup_section(page: Page, rows: list[BacklogRow]) -> None:
    """Runs with the broker in a memory cgroup (--memory-max, tox -e backlog-large): the tail group's read rate,
    the head readers' latency by stage, the group's cache against its limit."""
    limited = [r for r in rows if r.plan.memory_limit_bytes is not None]
    page.heading("A backlog beyond the page cache: head and tail readers")
    if not limited:
        page.paragraph("No run here had its broker in a memory cgroup (--memory-max; tox -e backlog-large as root), "
                       "so every backlog above fitted in the page cache this machine had free.", note=True)
        return
    page.table(
        ["run", "backlog (GiB)", "memory limit (GiB)", "beyond the cache", "tail read rate (msg/s)",
         "head p50 / p99 in build (ms)", "head p50 / p99 in drain (ms)", "cache max in drain (MiB)",
         "broker major faults in drain", "OOM kills", "head group behind at the drain's start (msgs)"],
        [(r.plan.run_id, fixed(None if r.plan.backlog_bytes is None else r.plan.backlog_bytes / 2**30, 2),
          fixed((r.plan.memory_limit_bytes or 0) / 2**30, 2), "yes" if r.plan.beyond_cache else "no",
          fixed(r.read_rate, 1),
          f"{_ms(r.plan.head_p50_ms, 'build')} / {_ms(r.plan.head_p99_ms, 'build')}",
          f"{_ms(r.plan.head_p50_ms, 'drain')} / {_ms(r.plan.head_p99_ms, 'drain')}",
          fixed(None if r.plan.cache_max_in_drain_bytes is None else r.plan.cache_max_in_drain_bytes / 2**20, 1),
          r.plan.major_faults_in_drain, r.plan.oom_kills, (r.plan.head_backlog_msgs or {}).get("drain"))
         for r in limited], text_columns=1)
    page.paragraph(
        "The broker ran in a memory cgroup of the given limit (harness/memory_cgroup.py): the kernel charges page "
        "cache to the group that faults it in, so a backlog larger than the limit cannot be cached whole and its "
        "drain reads from disk. Tail: the run's own consumer group, paused for the build, draining from the "
        "backlog's start. Head: a second group, never paused, reading what the producers send meanwhile; its "
        "send-to-consume latency (delivery − born time) in the build and in the drain shows what the tail's disk "
        "reads cost the readers at the head, provided they were at the head (the last column: the head group's "
        "backlog as the broker reported it when the drain began; thousands = the head readers had fallen behind "
        "during the build and their latency includes that). Cache and major faults: the group's memory.stat and "
        "the broker's /proc/PID/stat, sampled every 0.5 s.", note=True)


def run(spark: SparkSession, runs_dir: Path, out_dir: Path, broker: str = REFERENCE) -> ReportOutput:
    runs = discover_runs(runs_dir, broker)
    report_dir = make_report_dir(out_dir, NAME)
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
        first = rows[0].plan
        if first.backlog_msgs is not None and first.build_s is not None and first.drain_s is not None:
            page.finding(f"A backlog of {first.backlog_msgs:,} messages built in {first.build_s:,.1f} s and drained "
                         f"in {first.drain_s:,.1f} s ({first.mode}, {first.run_id}).")
        page.table(
            ["run", "mode", "build (s)", "backlog (msgs)", "backlog (MiB)", "drain (s)", "drain (s, events)",
             "drain rate (msg/s)", "drain (MB/s)", "read rate (msg/s)", "sends during drain (msg/s)"],
            [(r.plan.run_id, r.plan.mode, fixed(r.plan.build_s, 3), r.plan.backlog_msgs,
              fixed(None if r.plan.backlog_bytes is None else r.plan.backlog_bytes / 2**20, 1),
              fixed(r.plan.drain_s, 3), fixed(None if r.events_drain_ns is None else r.events_drain_ns / 1e9, 3),
              fixed(r.drain_rate, 1), fixed(r.drain_mb_s, 2), fixed(r.read_rate, 1), fixed(r.send_rate_in_drain, 1))
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
              fixed(None if r.plan.disk_read_bytes is None else r.plan.disk_read_bytes / 2**20, 1),
              _share(r.plan.disk_read_share), _share(r.plan.residency_at_build), _share(r.plan.residency_after_drop),
              _share(r.plan.residency_at_drain_start),
              fixed(None if r.page_cache_at_resume is None else r.page_cache_at_resume / 2**20, 1),
              fixed(None if r.page_cache_min_in_drain is None else r.page_cache_min_in_drain / 2**20, 1))
             for r in rows], text_columns=4)
        page.paragraph(
            f"Read source: disk when the broker process fetched more than {DISK_READ_SHARE:.0%} of the backlog's "
            "bytes from storage during the drain (/proc/<pid>/io read_bytes, the controller's rule), else page "
            "cache. Residency: resident ÷ written bytes of the commit-log files holding the backlog (fincore), "
            "measured at the build and right after a cold run's drop. drop_caches evicts only clean, unmapped pages: "
            "the broker maps its commit log, so a cold run may still find the backlog cached, and then its drain "
            "is a hot figure. The cached columns are the page_cache_bytes metric of all commit-log files.", note=True)
        _memory_cgroup_section(page, rows)
        summaries = mode_summaries(spark, rows)
        if len(summaries) == 2:
            hot, cold = (next(s for s in summaries if s.mode == m) for m in ("hot", "cold"))
            page.heading("Hot against cold")
            page.table(["mode", "runs", "mean read rate (msg/s)", "slowest read rate (msg/s)",
                        "mean drain rate (msg/s)"],
                       [(s.mode, s.runs, fixed(s.mean_read_rate, 1), fixed(s.min_read_rate, 1),
                         fixed(s.mean_drain_rate, 1))
                        for s in summaries])
            page.finding(f"Cold backlog reads ran at {cold.mean_read_rate / hot.mean_read_rate:.2f} × the hot rate "
                         f"({cold.mean_read_rate:,.0f} against {hot.mean_read_rate:,.0f} msg/s, means over "
                         f"{cold.runs} cold and {hot.runs} hot runs).")
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
                                  [f"{r.plan.run_id} ({_heat(r)})" for r in rated],
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
    return finish_report(page, report_dir, NAME, runs, files)


JOB: Final = Job(NAME, run)

if __name__ == "__main__":
    submit(JOB)
