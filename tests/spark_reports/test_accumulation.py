"""The accumulation report finds each synthetic backlog run's known build, drain, rates and residency."""

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark_reports.backlog_runs import BacklogRow, ReadSource, backlog_plan, backlog_rows
from spark_reports.html_report import local_references
from spark_reports.jobs import accumulation
from spark_reports.jobs.accumulation import mode_summaries
from spark_reports.run_records import discover_runs, load_metrics
from spark_reports.synthetic_backlog import ExpectedBacklog, generate, variety_specs


@dataclass(frozen=True)
class Backlogs:
    runs_dir: Path
    out_dir: Path
    expected: dict[str, ExpectedBacklog]
    by_name: dict[str, ExpectedBacklog]
    rows: dict[str, BacklogRow]


@pytest.fixture(scope="module")
def backlogs(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Backlogs:
    runs_dir = tmp_path_factory.mktemp("backlog_runs")
    specs = variety_specs()
    expected = generate(runs_dir, specs)
    by_name = {spec.name: e for spec, e in zip(specs, expected.values(), strict=True)}
    out_dir = tmp_path_factory.mktemp("accumulation_out")
    accumulation.run(spark, runs_dir, out_dir)
    rows, _ = backlog_rows(spark, discover_runs(runs_dir))
    return Backlogs(runs_dir, out_dir, expected, by_name, {r.plan.run_id: r for r in rows})


def _csv(path: Path) -> dict[str, dict[str, str]]:
    with path.open(encoding="utf-8") as f:
        return {row["run_id"]: row for row in csv.DictReader(f)}


def test_phase_times_and_backlog_come_from_results_backlog(backlogs):
    for run_id, e in backlogs.expected.items():
        p = backlogs.rows[run_id].plan
        assert p.complete
        assert p.build_s == pytest.approx(e.build_s, abs=1e-9)
        assert (p.backlog_msgs, p.backlog_bytes, p.threshold) == (e.backlog_msgs, e.backlog_bytes, e.threshold)
        assert p.drain_s == pytest.approx(e.drain_s, abs=1e-9)


def test_drain_window_counts_and_rates_equal_the_known_history(backlogs):
    for run_id, e in backlogs.expected.items():
        row = backlogs.rows[run_id]
        assert (row.sends_in_drain, row.receives_in_drain) == (e.sends_in_drain, e.receives_in_drain)
        assert row.events_drain_ns == e.drain_ns  # the events put the drain's end where the history does
        assert row.send_rate_in_drain == pytest.approx(e.send_rate_in_drain, rel=1e-12)
        assert row.read_rate == pytest.approx(e.read_rate, rel=1e-12)
        assert row.drain_rate == pytest.approx(e.drain_rate, rel=1e-12)
        assert row.drain_mb_s == pytest.approx(e.backlog_bytes / e.drain_s / 1e6, rel=1e-12)


def test_read_rates_follow_the_constructed_consumer(backlogs):
    # Deliveries run at the consumer's rate for the whole drain window (the backlog never empties in it).
    assert backlogs.rows[backlogs.by_name["hot"].run_id].read_rate == pytest.approx(10_000, rel=1e-3)
    assert backlogs.rows[backlogs.by_name["cold-disk"].run_id].read_rate == pytest.approx(8_000, rel=1e-3)
    assert backlogs.rows[backlogs.by_name["cold-slow"].run_id].read_rate == pytest.approx(4_000, rel=1e-3)
    # Sends go on at 1,000/s during every drain.
    for row in backlogs.rows.values():
        assert row.send_rate_in_drain == pytest.approx(1_000, rel=2e-3)


def test_read_source_mode_and_residency(backlogs):
    for run_id, e in backlogs.expected.items():
        p = backlogs.rows[run_id].plan
        assert p.read_source.value == e.read_source
        assert p.residency_at_drain_start == pytest.approx(e.residency_at_drain_start)
        assert p.cold == (e.cold and e.cache_dropped)
    modes = {name: backlogs.rows[e.run_id].plan.mode for name, e in backlogs.by_name.items()}
    assert modes["hot"] == "hot" and modes["cold-disk"] == "cold" and modes["cold-cached"] == "cold"
    assert modes["cold-not-root"] == "cold requested, cache not dropped (not root (euid 1000))"
    assert backlogs.rows[backlogs.by_name["cold-cached"].run_id].plan.read_source is ReadSource.PAGE_CACHE


def test_metric_figures(backlogs):
    for run_id, e in backlogs.expected.items():
        row = backlogs.rows[run_id]
        assert row.max_backlog_metric == e.max_backlog_metric
        assert row.page_cache_min_in_drain == e.page_cache_min_in_drain
    # A cold drop shows in the page-cache metric during the drain; a hot run keeps everything it wrote cached.
    cold = backlogs.rows[backlogs.by_name["cold-slow"].run_id]
    assert cold.page_cache_min_in_drain is not None and cold.page_cache_at_resume is not None
    assert cold.page_cache_min_in_drain < cold.page_cache_at_resume


def test_hot_against_cold_summary(spark, backlogs):
    summaries = {s.mode: s for s in mode_summaries(spark, list(backlogs.rows.values()))}
    hot = [backlogs.by_name[n] for n in ("hot", "cold-not-root")]  # the cache was never dropped: hot
    cold = [backlogs.by_name[n] for n in ("cold-disk", "cold-slow", "cold-cached")]
    assert (summaries["hot"].runs, summaries["cold"].runs) == (2, 3)
    assert summaries["hot"].mean_read_rate == pytest.approx(sum(e.read_rate for e in hot) / 2)
    assert summaries["cold"].min_read_rate == pytest.approx(min(e.read_rate for e in cold))
    assert summaries["cold"].mean_drain_rate == pytest.approx(sum(e.drain_rate for e in cold) / 3)
    page = (backlogs.out_dir / "accumulation" / "index.html").read_text(encoding="utf-8")
    assert "Hot against cold" in page


def test_csv_page_and_empty_findings(backlogs):
    out = backlogs.out_dir / "accumulation"
    rows = _csv(out / "accumulation.csv")
    assert set(rows) == set(backlogs.expected)
    for run_id, e in backlogs.expected.items():
        assert float(rows[run_id]["drain_s_events"]) == pytest.approx(e.drain_s)
        assert int(rows[run_id]["receives_in_drain"]) == e.receives_in_drain
    page = (out / "index.html").read_text(encoding="utf-8")
    refs = local_references(page)
    assert sum(r.startswith("backlog_") and r.endswith(".png") for r in refs) == len(backlogs.expected)
    assert all((out / r).is_file() for r in refs)
    assert "Runs used" in page and all(run_id in page for run_id in backlogs.expected)
    assert json.loads((out / "findings.json").read_text(encoding="utf-8")) == []


def test_runs_without_backlog_results_give_a_valid_page(spark, tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "out"
    runs.mkdir()
    output = accumulation.run(spark, runs, out)
    page = output.index.read_text(encoding="utf-8")
    assert "No backlog runs" in page
    assert all((output.index.parent / r).is_file() for r in local_references(page))
    assert json.loads((out / "accumulation" / "findings.json").read_text(encoding="utf-8")) == []


def test_an_unfinished_run_has_a_plan_without_rates(backlogs, tmp_path):
    run = discover_runs(backlogs.runs_dir)[0]
    meta = dict(run.meta)
    results = dict(meta["results"]["backlog"])
    for key in ("resumed_at_ns", "drained_at_ns", "drain_s"):
        results.pop(key)
    results["note"] = "the run ended while draining"
    plan = backlog_plan(type(run)(run.run_id, run.path, {**meta, "results": {"backlog": results}}))
    assert plan is not None and not plan.complete and plan.drain_s is None and plan.note
    row = BacklogRow(plan, 0, None, None, None, None, None, None)
    assert (row.read_rate, row.drain_rate, row.drain_mb_s) == (None, None, None)


def test_load_metrics_reads_parquet_and_jsonl_runs_alike(spark, backlogs):
    runs = discover_runs(backlogs.runs_dir)
    df = load_metrics(spark, runs)
    assert df.columns == ["run_id", "ts_ns", "metric", "value", "label"]
    assert dict(df.dtypes) == {"run_id": "string", "ts_ns": "bigint", "metric": "string", "value": "double",
                               "label": "string"}
    counts = {r["run_id"]: r["count"] for r in df.groupBy("run_id").count().collect()}
    assert set(counts) == set(backlogs.expected)  # cold-disk writes metrics.jsonl, the others Parquet
    labels = {r["label"] for r in df.where("metric = 'page_cache_bytes'").select("label").distinct().collect()}
    assert labels == {"commitlog", "consumequeue", "index"}
    assert load_metrics(spark, []).count() == 0


def test_a_memory_cgroup_run_has_its_limit_head_and_cache_figures(backlogs):
    """results.backlog of a --memory-max run (scenarios/backlog_control.py) as the plan reads it."""
    run = discover_runs(backlogs.runs_dir)[0]
    meta = dict(run.meta)
    results = dict(meta["results"]["backlog"])
    backlog = results["backlog_bytes"]
    results["memory_cgroup"] = {"version": "v1", "limit_bytes": backlog // 2, "oom_kills": 0, "stages": {
        "build": {"cache_max_bytes": 7, "broker_major_faults": 1},
        "drain": {"cache_max_bytes": backlog // 3, "broker_major_faults": 4321}}}
    results["head"] = {"build": {"n": 10, "p50_ms": 2.0, "p99_ms": 5.0}, "drain": {"n": 9, "p50_ms": 3.0,
                                                                                  "p99_ms": 80.5}}
    plan = backlog_plan(type(run)(run.run_id, run.path, {**meta, "results": {"backlog": results}}))
    assert plan is not None and plan.beyond_cache
    assert (plan.memory_limit_bytes, plan.cache_max_in_drain_bytes, plan.major_faults_in_drain, plan.oom_kills) == (
        backlog // 2, backlog // 3, 4321, 0)
    assert plan.head_p99_ms == {"build": 5.0, "drain": 80.5} and plan.head_p50_ms == {"build": 2.0, "drain": 3.0}
    assert "memory cgroup" in plan.scale
    unlimited = backlog_plan(run)
    assert unlimited is not None and not unlimited.beyond_cache and unlimited.head_p99_ms is None
    assert "not limited" in unlimited.scale
