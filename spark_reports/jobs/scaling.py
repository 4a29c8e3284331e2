"""Scaling report: how the reference broker's cost grows (``python -m harness scaling`` rows, harness.records.scaling),
each curve beside its limit — fio's sequential write (the device) and the bare broker (this interpreter's floor).

Per (curve, x, target) over every session in the file: the median rate with its spread (min–max) and the median
p99 and broker CPU per message. The page opens with its finding: how far from each wall the broker stands at
the curves' ends. Plots: small multiples, one panel per curve (rate, then p99), log-scaled.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from matplotlib.figure import Figure
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from harness.records.scaling import CURVES, SCALING_FILE
from spark_reports.html_report import Page, ReportOutput, write_csv
from spark_reports.plots import grid, save_figure
from spark_reports.report_io import finish_report, fixed, make_report_dir

NAME: Final = "scaling"
X_LABELS: Final = {"size": "body bytes", "depth": "messages in flight (one process)",
                   "producers": "producer processes (64 in flight each)", "queues": "queues in the topic",
                   "groups": "broker groups (a producer process each)",
                   "backlog": "messages stored before the consumers start",
                   "backlog_cold": "messages stored (the broker's memory cgroup smaller than the backlog)"}
Y_RATE: Final = {"backlog": "consumed msg/s", "backlog_cold": "consumed msg/s (from the device)"}
Y_P99: Final = {"backlog": "send-to-consume p99 ms (mostly the backlog's age)",
                "backlog_cold": "send-to-consume p99 ms (mostly the backlog's age)"}
TARGET_STYLE: Final = {"broker": ("-", "o"), "bare": ("--", "s"), "fio": (":", None)}


@dataclass(frozen=True)
class Point:
    curve: str
    x: int
    target: str
    rate: float  # median msg/s over sessions
    rate_min: float
    rate_max: float
    mb_per_s: float | None
    p99_ms: float | None
    broker_us: float | None
    sessions: int
    drained: bool


def points(spark: SparkSession, runs_dir: Path) -> list[Point]:
    path = runs_dir / SCALING_FILE
    if not path.is_file():
        return []
    df = spark.read.json(str(path))
    for col in ("p99_ms", "broker_cpu_us_per_msg", "mb_per_s", "drained", "session"):
        if col not in df.columns:
            df = df.withColumn(col, F.lit(None))
    agg = (df.where(F.col("curve").isin(*CURVES) & F.col("x").isNotNull() & F.col("msgs_per_s").isNotNull())
           .groupBy("curve", "x", "target")
           .agg(F.percentile_approx("msgs_per_s", 0.5).alias("rate"), F.min("msgs_per_s").alias("rate_min"),
                F.max("msgs_per_s").alias("rate_max"), F.percentile_approx("mb_per_s", 0.5).alias("mb"),
                F.percentile_approx("p99_ms", 0.5).alias("p99"),
                F.percentile_approx("broker_cpu_us_per_msg", 0.5).alias("cpu"),
                F.countDistinct("session").alias("sessions"),
                F.max(F.coalesce(F.col("drained").cast("int"), F.lit(0))).alias("drained")))

    def opt(v: object) -> float | None:
        return None if v is None else float(v)  # type: ignore[arg-type]

    return sorted((Point(r["curve"], int(r["x"]), r["target"], float(r["rate"]), float(r["rate_min"]),
                         float(r["rate_max"]), opt(r["mb"]), opt(r["p99"]), opt(r["cpu"]), int(r["sessions"]),
                         bool(r["drained"])) for r in agg.collect()),
                  key=lambda p: (CURVES.index(p.curve), p.target, p.x))


def _at(pts: Sequence[Point], curve: str, target: str) -> dict[int, Point]:
    return {p.x: p for p in pts if p.curve == curve and p.target == target}


def finding(pts: Sequence[Point]) -> str:
    """One sentence per curve that has both the broker and its wall, computed from the points."""
    parts = []
    for curve in CURVES:
        broker = _at(pts, curve, "broker")
        if not broker:
            continue
        lo, hi = min(broker), max(broker)
        text = f"{curve}: {broker[lo].rate:,.0f} msg/s at {lo:,} → {broker[hi].rate:,.0f} at {hi:,}"
        shares = [f"{broker[hi].rate / wall[hi].rate:.0%} of {target}"
                  for target in ("bare", "fio") if hi in (wall := _at(pts, curve, target)) and wall[hi].rate]
        if shares:
            text += f" ({', '.join(shares)} there)"
        if curve == "queues" and lo == 1 and broker[lo].rate:
            text += f"; {hi:,} queues run at {broker[hi].rate / broker[lo].rate:.2f}× one queue"
        if curve == "groups" and lo == 1 and broker[lo].rate:
            text += f"; {hi} groups give {broker[hi].rate / broker[lo].rate:.2f}× one group"
        parts.append(text)
    return ("; ".join(parts) + ".") if parts else "No scaling rows (python -m harness scaling makes them)."


def panels(path: Path, title: str, pts: Sequence[Point], value: str, ylabel: str,
           per_curve_ylabel: Mapping[str, str] | None = None) -> Path:
    """Small multiples: one panel per curve present, a line per target, log-log."""
    curves = [c for c in CURVES if any(p.curve == c for p in pts)]
    rows, cols = grid(len(curves))
    fig = Figure(figsize=(5 * cols, 4 * rows))
    for i, curve in enumerate(curves):
        ax = fig.add_subplot(rows, cols, i + 1)
        ys: list[float] = []
        for target, (style, marker) in TARGET_STYLE.items():
            line = sorted((p.x, getattr(p, value)) for p in pts if p.curve == curve and p.target == target
                          and getattr(p, value) is not None)
            if line:
                ax.plot([x for x, _ in line], [y for _, y in line], linestyle=style, marker=marker, label=target)
                ys.extend(y for _, y in line)
        ax.set_xscale("log")
        ax.set_yscale("log")
        positive = [y for y in ys if y > 0]
        if positive:  # at least a decade, so a 5 % change does not fill the panel
            ax.set_ylim(min(positive) / 3, max(max(positive) * 1.5, min(positive) * 10))
        ax.set_xlabel(X_LABELS.get(curve, curve), fontsize="small")
        ax.set_ylabel((per_curve_ylabel or {}).get(curve, ylabel), fontsize="small")
        ax.set_title(curve)
        ax.grid(True, which="both", alpha=0.3)
        if ys:
            ax.legend(fontsize="x-small")
    fig.suptitle(title)
    return save_figure(fig, path, curves)


def run(spark: SparkSession, runs_dir: Path, out_dir: Path) -> ReportOutput:
    report_dir = make_report_dir(out_dir, NAME)
    pts = points(spark, Path(runs_dir))
    page = Page("Scaling: how the broker's cost grows, beside its walls")
    page.finding(finding(pts))
    files: list[Path] = []
    if pts:
        files.append(panels(report_dir / "rate.png", "Rate per curve (broker, bare broker, fio)", pts, "rate",
                            "acknowledged msg/s", Y_RATE))
        page.figure("rate.png", "rate against each curve's variable, beside the bare broker and fio")
        if any(p.p99_ms is not None for p in pts):
            files.append(panels(report_dir / "p99.png", "p99 latency per curve (ms)", pts, "p99_ms", "send p99 ms",
                                Y_P99))
            page.figure("p99.png", "p99 latency against each curve's variable")
    page.paragraph(
        "Rows from python -m harness scaling (harness/scaling.py): the lean load generator against a fresh embedded "
        "broker per curve; bare = bench bare-broker, the same requests parsed, appended and answered with no "
        "broker around them; fio = the store filesystem's sequential write as messages of the point's size per "
        "second. The backlog curve's rate is consumption (two push-consumer processes from the first offset); a "
        "'drained' point read everything before its time was up and is the rate to its last delivery, start-up "
        "included (a lower bound). Median over sessions, spread min–max.")
    header = ["curve", "x", "target", "msg/s (median)", "min", "max", "MB/s", "p99 ms", "broker µs/msg", "sessions",
              "drained"]
    rows = [[p.curve, p.x, p.target, fixed(p.rate), fixed(p.rate_min), fixed(p.rate_max), fixed(p.mb_per_s, 1),
             fixed(p.p99_ms, 2), fixed(p.broker_us, 1), p.sessions, "yes" if p.drained else ""] for p in pts]
    page.heading("Points")
    if rows:
        page.table(header, rows, text_columns=3)
    else:
        page.paragraph(f"No {SCALING_FILE} in {runs_dir}.", note=True)
    files.append(write_csv(report_dir / "scaling.csv", header, rows))
    return finish_report(page, report_dir, NAME, [], files, link_csvs=True)
