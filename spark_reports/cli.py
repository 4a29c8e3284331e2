"""Command line: `python -m spark_reports <report>|all --runs DIR --out DIR [--master URL]` and `synth`.

The job modules' spark-submit entries call `job_main`, which runs the same command.
"""

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

import click
from pyspark.sql import SparkSession

from spark_reports import REPORT_NAMES
from spark_reports.html_report import ReportOutput
from spark_reports.jobs import (
    accumulation,
    backlog_capacity,
    flush_compare,
    latency,
    loss,
    offset_overflow,
    queues,
    recovery,
)
from spark_reports.percentiles import DEFAULT_ACCURACY, DEFAULT_WINDOW_ACCURACY, MIN_ACCURACY
from spark_reports.run_source import RunSourceError, is_url, stage_runs
from spark_reports.session import build_session
from spark_reports.site import write_site_index

JOBS: Final[dict[str, Callable[[SparkSession, Path, Path], ReportOutput]]] = {
    offset_overflow.NAME: offset_overflow.run,
    latency.NAME: latency.run,
    loss.NAME: loss.run,
    flush_compare.NAME: flush_compare.run,
    recovery.NAME: recovery.run,
    queues.NAME: queues.run,
    accumulation.NAME: accumulation.run,
    backlog_capacity.NAME: backlog_capacity.run,
}
assert tuple(JOBS) == REPORT_NAMES


def _run_reports(names: tuple[str, ...], runs_arg: str, out: Path, master: str | None,
                 driver_memory: str | None, accuracy: int, window_accuracy: int) -> None:
    if not is_url(runs_arg) and not Path(runs_arg).is_dir():
        raise click.BadParameter(f"{runs_arg!r} is not a directory (or a Hadoop-compatible URL such as "
                                 "hdfs://HOST/runs)", param_hint="--runs")
    owned = SparkSession.getActiveSession() is None  # stop only a session this command started
    spark = build_session(master, driver_memory=driver_memory)
    staging = tempfile.TemporaryDirectory(prefix="spark-reports-runs-") if is_url(runs_arg) else None
    try:
        if staging is not None:
            try:
                runs = stage_runs(spark, runs_arg, Path(staging.name))
            except RunSourceError as exc:
                raise click.BadParameter(str(exc), param_hint="--runs") from None
            click.echo(f"runs: {runs_arg} (small files staged in {runs}; events and metrics read from the URL)")
        else:
            runs = Path(runs_arg)
        for name in names:
            began = time.perf_counter()
            if name == latency.NAME:
                output = latency.run(spark, runs, out, accuracy, window_accuracy)
            else:
                output = JOBS[name](spark, runs, out)
            click.echo(f"{name}: {output.index} ({time.perf_counter() - began:.1f} s)")
        click.echo(f"index: {write_site_index(out, runs)}")
    finally:
        if staging is not None:
            staging.cleanup()
        if owned:
            spark.stop()


def _report_command(name: str) -> click.Command:
    names = REPORT_NAMES if name == "all" else (name,)
    help_text = "Run every report." if name == "all" else f"Run the {name} report."

    def command(runs: str, out: Path, master: str | None, driver_memory: str | None,
                accuracy: int = DEFAULT_ACCURACY, window_accuracy: int = DEFAULT_WINDOW_ACCURACY) -> None:
        _run_reports(names, runs, out, master, driver_memory, accuracy, window_accuracy)

    if latency.NAME in names:
        command = click.option("--window-accuracy", default=DEFAULT_WINDOW_ACCURACY, show_default=True,
                               type=click.IntRange(min=MIN_ACCURACY),
                               help="latency: percentile_approx accuracy for 10 s windows.")(command)
        command = click.option("--accuracy", default=DEFAULT_ACCURACY, show_default=True,
                               type=click.IntRange(min=MIN_ACCURACY),
                               help="latency: percentile_approx accuracy for run totals.")(command)
    command = click.option("--driver-memory", default=None,
                           help="spark.driver.memory, e.g. 4g (local masters only).")(command)
    command = click.option("--master", default=None,
                           help="Spark master URL (default: local[*], or what spark-submit chose).")(command)
    command = click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
                           help="Output directory; each report writes OUT/<report>/index.html.")(command)
    command = click.option("--runs", "runs", required=True,
                           help="Directory of run records (runs/<run-id>/) or one run directory; a local path or "
                                "any Hadoop-compatible URL (file://, hdfs://, ...).")(command)
    return click.command(name=name, help=help_text)(command)


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


@click.group()
def cli() -> None:
    """PySpark reports over run records."""


for _name in (*REPORT_NAMES, "all"):
    cli.add_command(_report_command(_name))
cli.add_command(synth)


def job_main(name: str) -> None:
    """spark-submit entry of one job: ``spark-submit spark_reports/jobs/<job>.py --runs DIR --out DIR``."""
    cli.main(args=[name, *sys.argv[1:]], prog_name=f"spark_reports {name}")
