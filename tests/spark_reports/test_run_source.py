"""Run records from a Hadoop-compatible URL: small files are staged locally, events and metrics are read from the
URL itself, and every report gives what it gives over the same runs as a local directory."""

import json
from pathlib import Path

from click.testing import CliRunner

from spark_reports.cli import cli
from spark_reports.run_records import discover_runs, load_events
from spark_reports.run_source import STAGED_FILE, is_url, stage_runs


def test_is_url_tells_urls_from_paths() -> None:
    assert is_url("file:///data/runs") and is_url("hdfs://nn:8020/runs") and is_url("s3a://bucket/runs")
    assert not is_url("runs") and not is_url("/data/runs") and not is_url("C:\\runs")


def test_staging_copies_small_files_and_points_at_the_data(spark, synth, tmp_path: Path) -> None:
    staged = stage_runs(spark, synth.runs_dir.resolve().as_uri(), tmp_path / "stage")
    runs = discover_runs(staged)
    assert {r.run_id for r in runs} == set(synth.expected)
    for run in runs:
        assert (run.path / "meta.json").is_file() and not (run.path / "events").exists()
        where = json.loads((run.path / STAGED_FILE).read_text(encoding="utf-8"))
        assert where["url"].startswith("file:") and run.data_url == where["url"]
        assert run.events_source is not None and run.events_source[0].startswith("file:")
    remote = load_events(spark, runs, ["op", "key"]).groupBy("run_id").count().collect()
    local = load_events(spark, discover_runs(synth.runs_dir), ["op", "key"]).groupBy("run_id").count().collect()
    assert sorted(map(tuple, remote)) == sorted(map(tuple, local))
    one = stage_runs(spark, next(iter(synth.expected.values())).path.resolve().as_uri(), tmp_path / "one")
    assert [r.run_id for r in discover_runs(one)] == [next(iter(synth.expected))]


def test_reports_from_a_url_equal_the_reports_from_the_directory(spark, synth, tmp_path: Path) -> None:
    runner = CliRunner()
    for name, runs in (("by-path", str(synth.runs_dir)), ("by-url", synth.runs_dir.resolve().as_uri())):
        for report in ("latency", "loss"):  # events (read from the URL) and check.json (staged)
            result = runner.invoke(cli, [report, "--runs", runs, "--out", str(tmp_path / name)])
            assert result.exit_code == 0, result.output
    tables = sorted(p.relative_to(tmp_path / "by-path") for p in (tmp_path / "by-path").rglob("*.csv"))
    assert len(tables) >= 4
    for table in tables:
        a = (tmp_path / "by-path" / table).read_text(encoding="utf-8")
        assert a == (tmp_path / "by-url" / table).read_text(encoding="utf-8"), table
        assert a.count("\n") > 1


def test_a_url_without_runs_is_a_clear_error(spark, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["loss", "--runs", (tmp_path / "empty").as_uri(), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "cannot list run records" in result.output
    (tmp_path / "none").mkdir()
    result = CliRunner().invoke(cli, ["loss", "--runs", (tmp_path / "none").as_uri(), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "no run records" in result.output
    result = CliRunner().invoke(cli, ["loss", "--runs", str(tmp_path / "missing"), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "not a directory" in result.output
