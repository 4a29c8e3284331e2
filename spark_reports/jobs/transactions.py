"""Transactions report: per run with transactional messages (check.json's tx counts: the transactions scenario,
the chaos transaction cells), the outcomes — committed, rolled back, unresolved, leaked (delivered without a
commit: the atomicity rule broken) and committed-but-lost — beside the faults the run went through, and the
check-back latency: for each transaction whose local transaction answered UNKNOW and a check-back later
resolved (tx rows, session "local" then "check"; harness.records.schema), the time from its half message's send
to that resolution.
"""

from pathlib import Path
from typing import Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_reports.html_report import Page, ReportOutput, write_csv
from spark_reports.job_runner import Job, submit
from spark_reports.report_io import finish_report, fixed, make_report_dir
from spark_reports.run_loss import fault_label
from spark_reports.run_records import (
    REFERENCE,
    RunInfo,
    check_verdict,
    discover_runs,
    load_events,
    read_check,
    read_faults,
)

NAME: Final = "transactions"
TX_COUNTS: Final = ("tx_committed", "tx_rolled_back", "tx_unresolved", "tx_leaked")


def transactional(run: RunInfo) -> bool:
    check = read_check(run) or {}
    return any(int(check.get(k) or 0) for k in TX_COUNTS)


def check_back_latency(events: DataFrame) -> DataFrame:
    """Per run and key resolved by a check-back after a local UNKNOW: ``latency_ms`` from the half message's
    first send to the first check-back answer that committed or rolled it back."""
    sends = events.where(F.col("op") == "send").groupBy("run_id", "key").agg(F.min("start_ns").alias("prepared"))
    tx = events.where(F.col("op") == "tx")
    unknown = (tx.where((F.col("session") == "local") & (F.col("outcome") == "unknown"))
               .select("run_id", "key").distinct())
    resolved = (tx.where((F.col("session") == "check") & F.col("outcome").isin("ok", "fail"))
                .groupBy("run_id", "key").agg(F.min("end_ns").alias("resolved")))
    return (unknown.join(resolved, ["run_id", "key"]).join(sends, ["run_id", "key"])
            .select("run_id", "key", ((F.col("resolved") - F.col("prepared")) / 1e6).alias("latency_ms")))


def latency_rows(events: DataFrame) -> dict[str, tuple[int, float, float, float, float]]:
    """Per run: (resolved by check-back, p50, p90, p99, max) of the check-back latency in ms."""
    agg = check_back_latency(events).groupBy("run_id").agg(
        F.count("*").alias("n"), F.percentile_approx("latency_ms", [0.5, 0.9, 0.99], 10_000).alias("q"),
        F.max("latency_ms").alias("max"))
    return {r["run_id"]: (int(r["n"]), float(r["q"][0]), float(r["q"][1]), float(r["q"][2]), float(r["max"]))
            for r in agg.collect()}


def run(spark: SparkSession, runs_dir: Path, out_dir: Path, broker: str = REFERENCE) -> ReportOutput:
    runs = [r for r in discover_runs(runs_dir, broker) if transactional(r)]
    report_dir = make_report_dir(out_dir, NAME)
    latencies = (latency_rows(load_events(spark, runs, ("op", "key", "outcome", "start_ns", "end_ns", "session")))
                 if runs else {})
    page = Page("Transactions: outcomes and check-back latency")
    page.paragraph(
        "Runs with transactional messages: the transactions scenario (locust -f scenarios/transactions.py) and "
        "the chaos transaction cells (python -m chaos transactions). A transaction is committed when any of its "
        "decisions committed it (the local transaction's or a check-back's), rolled back when one rolled it back "
        "and none committed, unresolved when every decision was UNKNOW. Leaked: delivered without a commit (the "
        "atomicity rule broken); lost: committed, acknowledged, never delivered nor found stored. Check-back "
        "latency: for each transaction whose local transaction answered UNKNOW, from its half message's send to "
        "the check-back answer that resolved it.")
    rows = []
    for r in runs:
        check = read_check(r) or {}
        n, p50, p90, p99, mx = latencies.get(r.run_id, (0, None, None, None, None))
        rows.append((r.run_id, r.scenario, r.flush_mode, fault_label(read_faults(r)),
                     *(int(check.get(k) or 0) for k in TX_COUNTS), int(check.get("lost") or 0), n,
                     fixed(p50, 1), fixed(p90, 1), fixed(p99, 1), fixed(mx, 1), check_verdict(check)))
    header = ["run", "scenario", "flush", "faults", "committed", "rolled back", "unresolved", "leaked", "lost",
              "resolved by check-back", "check-back p50 (ms)", "p90 (ms)", "p99 (ms)", "max (ms)", "verdict"]
    page.heading("Outcomes per run")
    if rows:
        page.table(header, rows, text_columns=4)
    else:
        page.paragraph("No run with transactional messages (tx rows).", note=True)
    files = [write_csv(report_dir / "transactions.csv", header, rows)]
    if runs:
        total = {k: sum(int((read_check(r) or {}).get(k) or 0) for r in runs) for k in (*TX_COUNTS, "lost")}
        page.finding(f"{total[TX_COUNTS[0]]:,} transactions committed and {total[TX_COUNTS[1]]:,} rolled back over "
                     f"{len(runs)} run{'s' if len(runs) != 1 else ''}: {total[TX_COUNTS[3]]:,} leaked and "
                     f"{total['lost']:,} lost.")
    return finish_report(page, report_dir, NAME, runs, files, link_csvs=True)


JOB: Final = Job(NAME, run)

if __name__ == "__main__":
    submit(JOB)
