"""Running report jobs: one Spark session, the runs (a directory, or a URL whose small files are staged), each
job's report, then the front page.

The command line (``spark_reports.cli``) runs it for the jobs it names; a job file run by spark-submit
(``spark-submit spark_reports/jobs/<job>.py --runs DIR --out DIR``) runs it for itself with ``submit``. This
module imports no job, so the jobs and the command line import it and not each other.
"""

import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import click
from pyspark.sql import SparkSession

from spark_reports.html_report import ReportOutput
from spark_reports.percentiles import DEFAULT_ACCURACY, DEFAULT_WINDOW_ACCURACY, MIN_ACCURACY
from spark_reports.run_records import BROKERS, REFERENCE, discover_runs
from spark_reports.run_source import RunSourceError, is_url, stage_runs
from spark_reports.session import build_session
from spark_reports.site import broker_dir, write_site_index


@dataclass(frozen=True)
class Job:
    """A report: its name and ``run(spark, runs_dir, out_dir, ...)``. A job with ``percentile_options`` also
    takes ``accuracy`` and ``window_accuracy`` (percentile_approx accuracies), offered as command options."""

    name: str
    run: Callable[..., ReportOutput]
    percentile_options: bool = False


def run_reports(jobs: Sequence[Job], runs_arg: str, out: Path, master: str | None, driver_memory: str | None,
                accuracy: int = DEFAULT_ACCURACY, window_accuracy: int = DEFAULT_WINDOW_ACCURACY) -> None:
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
        # The reference broker's reports in OUT, RocketMQ's (when its runs are there) in OUT/rocketmq: each
        # report sees one implementation's runs, so each claim gets a verdict per implementation.
        brokers = [b for b in BROKERS if b == REFERENCE or discover_runs(runs, b)]
        for broker in brokers:
            broker_out = broker_dir(out, broker)
            for job in jobs:
                began = time.perf_counter()
                if job.percentile_options:
                    output = job.run(spark, runs, broker_out, accuracy, window_accuracy, broker=broker)
                else:
                    output = job.run(spark, runs, broker_out, broker=broker)
                click.echo(f"{job.name} ({broker}): {output.index} ({time.perf_counter() - began:.1f} s)")
        click.echo(f"index: {write_site_index(out, runs)}")
    finally:
        if staging is not None:
            staging.cleanup()
        if owned:
            spark.stop()


def report_command(name: str, jobs: Sequence[Job], help_text: str) -> click.Command:
    """The click command ``name`` that runs ``jobs`` in order."""

    def command(runs: str, out: Path, master: str | None, driver_memory: str | None,
                accuracy: int = DEFAULT_ACCURACY, window_accuracy: int = DEFAULT_WINDOW_ACCURACY) -> None:
        run_reports(jobs, runs, out, master, driver_memory, accuracy, window_accuracy)

    if any(job.percentile_options for job in jobs):
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


def submit(job: Job) -> None:
    """spark-submit entry of one job: ``spark-submit spark_reports/jobs/<job>.py --runs DIR --out DIR``."""
    report_command(job.name, [job], f"Run the {job.name} report.").main(
        args=sys.argv[1:], prog_name=f"spark_reports {job.name}")
