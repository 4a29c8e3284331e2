"""Queues report: send rate and send latency as the same load is spread over more and more queues.

Reads the runs of scenario "queues" (``locust -f scenarios/queues.py``): meta.json ``results.phases`` has one
row per phase {label, queues, topics, start_ns, end_ns}; the offered rate is meta ``params.rate`` (0 = closed
loop). A send belongs to the phase in whose window it started. Per phase: sends attempted and acknowledged,
acknowledged/s over the window, and the send latency (ack − start) p50 / p99 / p99.9 / max by
percentile_approx over the phase's raw events.

Judges QUEUES_10K (the seed's "10,000+ queues per broker without write degradation"): a phase with at least
10,000 queues must keep ``RATE_SHARE`` of the acknowledged rate of the run's phase with the fewest queues, and
its p99 must stay within the bound in ``p99_bound_ns``.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_reports.claims import ClaimId, Finding, Verdict, settle_each
from spark_reports.html_report import Page, ReportOutput, write_csv
from spark_reports.job_runner import Job, submit
from spark_reports.percentiles import DEFAULT_ACCURACY, MIN_ACCURACY
from spark_reports.report_io import finish_report, make_report_dir
from spark_reports.run_records import REFERENCE, RunInfo, discover_runs, load_events
from spark_reports.xy_plots import xy_plot

NAME: Final = "queues"
SCENARIO: Final = "queues"
MANY_QUEUES: Final = 10_000  # the seed's "10,000+ queues per broker"
# "Without write degradation": the many-queue phase keeps at least 90 % of the few-queue phase's acknowledged
# rate (an open-loop run offers the same rate to both, so a shortfall is the broker falling behind) …
RATE_SHARE: Final = 0.90
# … and its p99 send latency stays within twice the few-queue phase's p99, or within it plus 5 ms when that is
# larger: on a 2-core machine shared by broker and load generator, GC and scheduler pauses of a few ms move a
# small p99 by more than 2× without any change in the broker.
P99_RATIO: Final = 2.0
P99_SLACK_NS: Final = 5_000_000
QUANTILES: Final = (0.5, 0.99, 0.999)
LABELS: Final = ("p50", "p99", "p99.9")


@dataclass(frozen=True)
class Phase:
    run_id: str
    index: int
    label: str
    queues: int
    topics: int
    start_ns: int
    end_ns: int


def phases_of(run: RunInfo) -> list[Phase]:
    """The run's phases; a phase without an end (the run broke off) ends at the run's end, or is left out."""
    out = []
    for i, row in enumerate((run.meta.get("results") or {}).get("phases") or []):
        end = row.get("end_ns", run.meta.get("ended_at_ns"))
        if end is None or row.get("start_ns") is None:
            continue
        out.append(Phase(run.run_id, i, str(row.get("label", f"phase {i}")), int(row.get("queues", 0)),
                         int(row.get("topics", 1)), int(row["start_ns"]), int(end)))
    return out


def intended_rate(run: RunInfo) -> float | None:
    """The offered rate in msg/s (None: closed loop, as fast as the broker answers)."""
    rate = (run.meta.get("params") or {}).get("rate")
    return float(rate) if rate else None


@dataclass(frozen=True)
class PhaseStats:
    phase: Phase
    attempted: int
    acknowledged: int
    quantiles: tuple[int, ...]  # QUANTILES, ns (empty without acknowledged sends)
    maximum: int | None
    intended: float | None

    @property
    def seconds(self) -> float:
        return (self.phase.end_ns - self.phase.start_ns) / 1e9

    @property
    def acks_per_s(self) -> float:
        return self.acknowledged / self.seconds if self.seconds > 0 else 0.0

    def q(self, label: str) -> int | None:
        if label == "max":
            return self.maximum
        return self.quantiles[LABELS.index(label)] if self.quantiles else None


def compute(spark: SparkSession, runs: list[RunInfo], accuracy: int = DEFAULT_ACCURACY) -> list[PhaseStats]:
    if accuracy < MIN_ACCURACY:
        raise ValueError(f"accuracy {accuracy} below {MIN_ACCURACY}")
    phases = [p for r in runs for p in phases_of(r)]
    if not phases:
        return []
    used = [r for r in runs if any(p.run_id == r.run_id for p in phases)]
    events = load_events(spark, used, ["op", "start_ns", "end_ns", "outcome"]).where(F.col("op") == "send")
    windows = spark.createDataFrame([(p.run_id, p.index, p.start_ns, p.end_ns) for p in phases],
                                    "p_run string, idx int, p_start long, p_end long")
    joined = events.join(F.broadcast(windows), (events.run_id == windows.p_run)
                         & (events.start_ns >= windows.p_start) & (events.start_ns < windows.p_end))
    ok = F.col("outcome") == "ok"
    latency = F.when(ok, F.col("end_ns") - F.col("start_ns"))
    agg = joined.groupBy("p_run", "idx").agg(
        F.count(F.lit(1)).alias("attempted"), F.count(latency).alias("acked"),
        F.percentile_approx(latency, list(QUANTILES), accuracy).alias("q"), F.max(latency).alias("max"))
    found = {(r["p_run"], int(r["idx"])): r for r in agg.collect()}
    rates = {r.run_id: intended_rate(r) for r in used}
    out = []
    for p in phases:
        r = found.get((p.run_id, p.index))
        acked = 0 if r is None else int(r["acked"])
        out.append(PhaseStats(p, 0 if r is None else int(r["attempted"]), acked,
                              tuple(int(v) for v in r["q"]) if r is not None and acked else (),
                              None if r is None or r["max"] is None else int(r["max"]), rates[p.run_id]))
    return out


def p99_bound_ns(base_p99_ns: int) -> int:
    return max(int(P99_RATIO * base_p99_ns), base_p99_ns + P99_SLACK_NS)


def judge(stats: list[PhaseStats]) -> Finding:
    """QUEUES_10K over every run that has a phase of ≥ 10,000 queues and a phase with fewer."""
    claim = ClaimId.QUEUES_10K
    by_run: dict[str, list[PhaseStats]] = {}
    for s in stats:
        by_run.setdefault(s.phase.run_id, []).append(s)
    lines, failures, used = [], [], []
    worst_share, worst_p99 = float("inf"), 0.0
    for run_id, phases in sorted(by_run.items()):
        base = min(phases, key=lambda s: (s.phase.queues, s.phase.index))
        many = [s for s in phases if s.phase.queues >= MANY_QUEUES]
        base_p99 = base.q("p99")
        if not many or base.phase.queues >= MANY_QUEUES or base_p99 is None or base.acks_per_s == 0:
            continue
        used.append(run_id)
        bound = p99_bound_ns(base_p99)
        for s in many:
            share = s.acks_per_s / base.acks_per_s
            p99 = s.q("p99")
            worst_share = min(worst_share, share)
            if p99 is not None:
                worst_p99 = max(worst_p99, p99 / 1e6)
            lines.append(f"{s.phase.queues:,} queues: {s.acks_per_s:,.0f} acknowledged/s = {100 * share:.1f} % of "
                         f"{base.acks_per_s:,.0f} at {base.phase.queues:,} queue{'s' if base.phase.queues != 1 else ''}"
                         f", p99 {'–' if p99 is None else f'{p99 / 1e6:.2f}'} ms against {base_p99 / 1e6:.2f} ms "
                         f"(bound {bound / 1e6:.2f} ms)" + (f" [{run_id}]" if len(by_run) > 1 else ""))
            if share < RATE_SHARE:
                failures.append(f"{run_id} {s.phase.label}: rate {100 * share:.1f} % < {100 * RATE_SHARE:.0f} %")
            if p99 is None or p99 > bound:
                failures.append(f"{run_id} {s.phase.label}: p99 above the bound")
    if not used:
        return Finding(claim, Verdict.NOT_MEASURED, "no run with a ≥ 10,000-queue phase", NAME,
                       tuple(sorted(by_run)), "Needs a queues run with a phase of at least 10,000 queues and one with "
                       "fewer (locust -f scenarios/queues.py --queue-counts 1,100,1000,10000).")
    detail = (f"Held when every phase with ≥ {MANY_QUEUES:,} queues reaches ≥ {100 * RATE_SHARE:.0f} % of the "
              "acknowledged rate of the run's phase with the fewest queues and its p99 send latency is at most "
              f"max({P99_RATIO:g} × that phase's p99, its p99 + {P99_SLACK_NS / 1e6:g} ms).")
    if failures:
        detail += " Not shown: " + "; ".join(failures) + "."
    figures = {"worst_rate_share": worst_share, "worst_p99_ms": worst_p99, "runs": float(len(used))}
    return Finding(claim, Verdict.NOT_HELD if failures else Verdict.HELD, "; ".join(lines), NAME, tuple(used),
                   detail, figures)


def _ms(ns: int | None) -> float | None:
    return None if ns is None else ns / 1e6


def run(spark: SparkSession, runs_dir: Path, out_dir: Path, accuracy: int = DEFAULT_ACCURACY,
        broker: str = REFERENCE) -> ReportOutput:
    runs = [r for r in discover_runs(runs_dir, broker) if r.scenario == SCENARIO]
    report_dir = make_report_dir(out_dir, NAME)
    stats = compute(spark, runs, accuracy)
    # Judged from each run alone too: runs that disagree read "unsettled" (claims.settle).
    (finding,) = settle_each([judge(stats)], lambda rid: [judge([s for s in stats if s.phase.run_id == rid])])

    page = Page("Queues: write rate and latency from 1 to 10,000+ queues")
    page.paragraph(
        "The same load spread over more and more queues, one phase per queue count (a count above the per-topic "
        "limit is split over several topics). A send belongs to the phase in whose window it started; "
        "acknowledged/s = acknowledged sends ÷ the phase's length; send latency = ack − start of acknowledged "
        f"sends, quantiles by percentile_approx (accuracy {accuracy:,}) over the phase's raw events. Latency in ms.")
    value_labels = (*LABELS, "max")
    rows = [(s.phase.run_id, s.phase.label, s.phase.queues, s.phase.topics, s.seconds,
             "closed loop" if s.intended is None else f"{s.intended:,.0f}", s.attempted, s.acknowledged,
             s.acks_per_s, *(_ms(s.q(lab)) for lab in value_labels)) for s in stats]
    header = ["run", "phase", "queues", "topics", "length (s)", "offered msg/s", "attempted", "acknowledged",
              "acknowledged/s", *value_labels]
    page.heading("Per phase")
    if rows:
        page.table(header, rows, text_columns=2)
    else:
        page.paragraph("No queues run with results.phases.", note=True)
    files = [write_csv(report_dir / "queues_phases.csv",
                       ["run_id", "phase", "queues", "topics", "seconds", "offered_per_s", "attempted",
                        "acknowledged", "acks_per_s", *(f"{lab}_ms" for lab in value_labels)], rows)]
    multi = len({s.phase.run_id for s in stats}) > 1
    rate_series: dict[str, list[tuple[float, float]]] = {}
    lat_series: dict[str, list[tuple[float, float]]] = {}
    for s in stats:
        prefix = f"{s.phase.run_id} " if multi else ""
        rate_series.setdefault(f"{prefix}acknowledged/s", []).append((s.phase.queues, s.acks_per_s))
        for lab in ("p50", "p99"):
            v = s.q(lab)
            if v is not None:
                lat_series.setdefault(f"{prefix}{lab}", []).append((s.phase.queues, v / 1e6))
    offered = {s.intended for s in stats}
    only = next(iter(offered)) if len(offered) == 1 else None
    files.append(xy_plot(report_dir / "rate_vs_queues.png", "Acknowledged sends/s against queue count",
                         rate_series, "queues", "acknowledged/s", logx=True,
                         reference=None if only is None else ("offered rate", only)))
    page.figure("rate_vs_queues.png", "acknowledged rate per phase against its queue count")
    files.append(xy_plot(report_dir / "latency_vs_queues.png", "Send latency against queue count", lat_series,
                         "queues", "ms", logx=True))
    page.figure("latency_vs_queues.png", "send latency p50 and p99 per phase against its queue count")
    return finish_report(page, report_dir, NAME, runs, files, link_csvs=True, findings=[finding])


JOB: Final = Job(NAME, run)

if __name__ == "__main__":
    submit(JOB)
