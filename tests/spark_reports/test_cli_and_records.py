"""The command line runs reports into OUT/<report>/ and OUT/index.html; the reader accepts loose Parquet typing."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest
from click.testing import CliRunner

from spark_reports.cli import cli
from spark_reports.html_report import local_references
from spark_reports.run_records import RunRecordError, discover_runs, load_events

ROOT = Path(__file__).resolve().parents[2]


def test_report_command_writes_report_and_front_page_and_leaves_the_session_running(spark, synth, tmp_path):
    result = CliRunner().invoke(cli, ["loss", "--runs", str(synth.runs_dir), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "loss" / "index.html").is_file()
    assert set(local_references((tmp_path / "index.html").read_text(encoding="utf-8"))) == {"loss/index.html",
                                                                                          "findings.html"}
    assert spark.range(3).count() == 3  # the command did not stop a session it did not start


def _write_loose_run(root: Path) -> Path:
    """A run whose Parquet has int64 where the contract says int32 and lacks the optional receive columns."""
    run = root / "20260103T000000-loose-000001"
    (run / "events").mkdir(parents=True)
    meta = {"schema_version": 1, "run_id": run.name, "scenario": "loose", "started_at_ns": 0,
            "broker": {"flushDiskType": "ASYNC_FLUSH"}, "sysctl": {"profile": None}, "host": {}}
    (run / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    table = pa.table({
        "op": ["send", "receive"], "key": ["k", "k"], "topic": ["T", "T"],
        "queue_id": pa.array([3, 3], pa.int64()), "queue_offset": pa.array([7, 7], pa.int64()),
        "intended_ns": [10, 10], "start_ns": [10, 50], "end_ns": [30, 60], "outcome": ["ok", "ok"],
        "code": pa.array([0, -1], pa.int64()), "bytes": pa.array([5, 5], pa.int64()), "worker": ["w0", "c0"],
    })
    pq.write_table(table, run / "events" / "part-w0-0.parquet")
    return run


def test_parquet_with_wide_integers_and_missing_optional_columns(spark, tmp_path):
    run = _write_loose_run(tmp_path)
    rows = load_events(spark, discover_runs(tmp_path)).orderBy("start_ns").collect()
    assert [(r["run_id"], r["op"], r["queue_id"], r["bytes"], r["born_ns"]) for r in rows] == [
        (run.name, "send", 3, 5, None), (run.name, "receive", 3, 5, None)]
    assert dict(load_events(spark, discover_runs(tmp_path), ["queue_id"]).dtypes)["queue_id"] == "int"


def test_unknown_schema_version_is_refused(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    (run / "meta.json").write_text(json.dumps({"schema_version": 2}), encoding="utf-8")
    with pytest.raises(RunRecordError, match="schema_version 2"):
        discover_runs(tmp_path)


@pytest.mark.slow
def test_job_runs_under_spark_submit(synth, tmp_path):
    submit = Path(sys.executable).parent / "spark-submit"
    if not submit.exists() or shutil.which("java") is None:
        pytest.skip("spark-submit or java missing")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(ROOT), "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run(
        [str(submit), "--master", "local[1]", str(ROOT / "spark_reports" / "jobs" / "offset_overflow.py"),
         "--runs", str(synth.runs_dir), "--out", str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "616.9314558" in (tmp_path / "offset-overflow" / "index.html").read_text(encoding="utf-8")
    assert (tmp_path / "index.html").is_file()
