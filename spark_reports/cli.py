"""Command line: `python -m spark_reports <report>|all --runs DIR --out DIR [--master URL]` and `synth`.

Each job module is also a spark-submit entry (``job_runner.submit``) running the same command for itself.
"""

import time
from pathlib import Path
from typing import Final

import click

from spark_reports import REPORT_NAMES
from spark_reports.job_runner import Job, report_command
from spark_reports.jobs import (
    accumulation,
    backlog_capacity,
    filtering,
    flush_compare,
    latency,
    loss,
    offset_overflow,
    profiles,
    queues,
    recovery,
    transactions,
)

JOBS: Final[dict[str, Job]] = {job.name: job for job in (
    offset_overflow.JOB, latency.JOB, loss.JOB, flush_compare.JOB, recovery.JOB, queues.JOB, accumulation.JOB,
    backlog_capacity.JOB, transactions.JOB, filtering.JOB, profiles.JOB)}
assert tuple(JOBS) == REPORT_NAMES


@click.command(name="synth")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory to write synthetic runs into (one subdirectory per run).")
@click.option("--events", "events", default=100_000, show_default=True, type=click.IntRange(min=200),
              help="About this many event rows in all, split over the runs.")
@click.option("--seed", default=1, show_default=True, help="Random seed.")
def synth(out: Path, events: int, seed: int) -> None:
    """Write synthetic run records with known answers (and OUT/expected.json)."""
    from spark_reports.synthetic import default_specs, generate

    began = time.perf_counter()
    expected = generate(out, default_specs(events, seed=seed))
    rows = sum(e.event_rows for e in expected.values())
    click.echo(f"wrote {len(expected)} runs, {rows:,} events to {out} ({time.perf_counter() - began:.1f} s)")


def session_command(name: str, runs_help: str, doc: str) -> click.Command:
    """A report over one experiment session's directory (not the runs directory ``all`` reads): ``compare``
    and ``scaling``. The job module ``spark_reports.jobs.<name>`` has ``run(spark, runs, out)``."""

    @click.command(name=name, help=doc)
    @click.option("--runs", "runs", required=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
                  help=runs_help)
    @click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
                  help=f"Output directory; the report goes to OUT/{name}/index.html.")
    @click.option("--master", default=None, help="Spark master URL (default: local[*]).")
    def command(runs: Path, out: Path, master: str | None) -> None:
        import importlib

        from pyspark.sql import SparkSession

        from spark_reports.session import build_session

        job = importlib.import_module(f"spark_reports.jobs.{name}")
        owned = SparkSession.getActiveSession() is None
        spark = build_session(master)
        try:
            output = job.run(spark, runs, out)
        finally:
            if owned:
                spark.stop()
        click.echo(f"{name}: {output.index}")

    return command


compare = session_command(
    "compare", "A python -m harness compare session directory (its run records and compare.json).",
    "The brokers side by side (throughput, send latency CDF, send-to-consume latency, loss) and the claims-page "
    "rows on the reference broker against NATS and RabbitMQ.")
scaling = session_command(
    "scaling", "A python -m harness scaling output directory (its scaling.jsonl).",
    "How the broker's cost grows: rate and p99 against message size, in-flight depth, producers, queue count and "
    "backlog depth, each curve beside its walls (fio, the bare broker).")


@click.group()
def cli() -> None:
    """PySpark reports over run records."""


for _job in JOBS.values():
    cli.add_command(report_command(_job.name, [_job], f"Run the {_job.name} report."))
cli.add_command(report_command("all", list(JOBS.values()), "Run every report."))
cli.add_command(synth)
cli.add_command(compare)
cli.add_command(scaling)
