"""One small SparkSession for the whole area, plus synthetic runs and the reports over them, built once."""

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark_reports.html_report import ReportOutput
from spark_reports.jobs import latency, loss, offset_overflow
from spark_reports.session import TEST_MASTER, build_session
from spark_reports.site import write_site_index
from spark_reports.synthetic import ExpectedRun, default_specs, generate

SYNTH_EVENTS = 8_000  # 4 runs × ~1,000 messages: every percentile group is small enough to be exact


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    if shutil.which("java") is None:
        pytest.skip("no java on PATH: PySpark needs a JVM (Debian: openjdk-17-jre-headless)")
    session = build_session(TEST_MASTER)
    yield session
    session.stop()


@dataclass(frozen=True)
class Synth:
    runs_dir: Path
    expected: dict[str, ExpectedRun]


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    runs_dir = tmp_path_factory.mktemp("runs")
    return Synth(runs_dir, generate(runs_dir, default_specs(SYNTH_EVENTS)))


@dataclass(frozen=True)
class Reports:
    out_dir: Path
    outputs: dict[str, ReportOutput]


@pytest.fixture(scope="session")
def reports(spark: SparkSession, synth: Synth, tmp_path_factory: pytest.TempPathFactory) -> Reports:
    out_dir = tmp_path_factory.mktemp("reports")
    outputs = {job.NAME: job.run(spark, synth.runs_dir, out_dir) for job in (offset_overflow, latency, loss)}
    write_site_index(out_dir)
    return Reports(out_dir, outputs)
