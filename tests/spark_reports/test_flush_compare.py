"""The flush-compare report pairs comparable runs by flush mode and finds the known throughput, latency and ratios."""

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from spark_reports.html_report import local_references
from spark_reports.jobs import flush_compare as fc
from spark_reports.run_records import discover_runs
from spark_reports.synthetic_claims import (
    MasterLossSpec,
    SendRun,
    SendRunAnswer,
    pooled,
    write_master_loss_run,
    write_send_run,
)

SYNC, ASYNC = "SYNC_FLUSH", "ASYNC_FLUSH"
CLOSED = {"rate": 0.0, "in_flight": 64, "message_size": 1024}
CHAOS = {"fault": "kill9", "cycles": 1, "load": {"rate": 0.0, "in_flight": 32, "msg_size": 1024}}


@dataclass(frozen=True)
class FlushRuns:
    runs_dir: Path
    answers: list[SendRunAnswer]


@pytest.fixture(scope="module")
def flush_runs(tmp_path_factory: pytest.TempPathFactory) -> FlushRuns:
    runs_dir = tmp_path_factory.mktemp("flush_runs")
    specs = [
        # fault-free pair: one SYNC run against two ASYNC runs (pooled)
        SendRun("latency", SYNC, 400, 2_500_000, 2_000_000, 10_000, failed=3, params=CLOSED),
        SendRun("latency", ASYNC, 500, 2_000_000, 1_000_000, 5_000, params=CLOSED),
        SendRun("latency", ASYNC, 300, 2_000_000, 1_500_000, 5_000, params=CLOSED, seed=2),
        # a pair under kill -9: named by chaos with the flush mode inside the scenario
        SendRun("chaos-kill9-sync-default", SYNC, 200, 3_000_000, 5_000_000, 20_000, fault="kill9", params=CHAOS),
        SendRun("chaos-kill9-async-default", ASYNC, 200, 3_000_000, 2_000_000, 20_000, fault="kill9", params=CHAOS),
        # unpaired: another scenario, and the same scenario under another sysctl profile
        SendRun("throughput", ASYNC, 100, 1_000_000, 1_000_000, 1_000, params=CLOSED),
        SendRun("latency", SYNC, 100, 1_000_000, 1_000_000, 1_000, params=CLOSED, profile="durable"),
    ]
    return FlushRuns(runs_dir, [write_send_run(runs_dir, s, i) for i, s in enumerate(specs)])


def test_group_key_ignores_the_flush_token_seed_and_addresses(flush_runs):
    runs = {r.run_id: r for r in discover_runs(flush_runs.runs_dir)}
    a = flush_runs.answers
    assert fc.group_key(runs[a[3].run_id]) == fc.group_key(runs[a[4].run_id])
    assert json.loads(fc.group_key(runs[a[3].run_id]))["scenario"] == "chaos-kill9-default"
    assert fc.group_key(runs[a[1].run_id]) == fc.group_key(runs[a[2].run_id])  # seeds differ
    assert fc.group_key(runs[a[0].run_id]) != fc.group_key(runs[a[6].run_id])  # sysctl profile differs


def test_groups_pair_by_flush_mode_and_compare_only_fault_free_pairs(flush_runs):
    a = flush_runs.answers
    groups = fc.comparison_groups(discover_runs(flush_runs.runs_dir))
    by_runs = {g.runs[SYNC] + g.runs[ASYNC]: g for g in groups}
    latency = by_runs[(a[0].run_id, a[1].run_id, a[2].run_id)]
    chaos = by_runs[(a[3].run_id, a[4].run_id)]
    assert latency.paired and latency.fault == "none" and latency.shape == "closed loop, 64 in flight, 1024 B"
    assert chaos.paired and chaos.fault == "kill9"  # the restart entry is not a fault
    assert not by_runs[(a[5].run_id,)].paired and not by_runs[(a[6].run_id,)].paired
    compared, fault_free = fc.chosen_pairs(groups)
    assert compared == [latency] and fault_free


def test_throughput_and_latency_per_mode_equal_the_written_runs(spark, flush_runs):
    a = flush_runs.answers
    groups = fc.comparison_groups(discover_runs(flush_runs.runs_dir))
    compared, _ = fc.chosen_pairs(groups)
    perf = fc.compute(spark, compared, discover_runs(flush_runs.runs_dir))
    pooled_rows = {p.mode: p for p in perf if p.run_id is None}
    per_run = {p.run_id: p for p in perf if p.run_id is not None}
    assert set(per_run) == {a[0].run_id, a[1].run_id, a[2].run_id}
    expected = {SYNC: a[0], ASYNC: pooled([a[1], a[2]])}
    for mode, want in expected.items():
        got = pooled_rows[mode]
        assert got.acknowledged == len(want.latencies)
        assert got.window_ns == want.window_ns
        assert got.acks_per_s == pytest.approx(want.acks_per_s)
        assert [got.q(lab) for lab in ("p50", "p99", "p99.9")] == [want.q(p) for p in (0.5, 0.99, 0.999)]
        assert got.maximum == want.latencies[-1]
    assert per_run[a[0].run_id].attempted == 403  # the refused sends are attempted, not acknowledged
    assert per_run[a[2].run_id].q("p50") == a[2].q(0.5)  # per-run quantiles from the run's own samples

    r = fc.ratio(pooled_rows[SYNC], pooled_rows[ASYNC])
    assert r.throughput == pytest.approx(expected[SYNC].acks_per_s / expected[ASYNC].acks_per_s)
    assert r.p99 == pytest.approx(expected[SYNC].q(0.99) / expected[ASYNC].q(0.99))
    assert r.p99_delta_ms == pytest.approx((expected[SYNC].q(0.99) - expected[ASYNC].q(0.99)) / 1e6)
    words = fc.ratio_words(compared[0], pooled_rows[SYNC], pooled_rows[ASYNC], r)
    assert f"durability costs {100 * (1 - r.throughput):.1f} % of throughput" in words
    assert f"{r.p99_delta_ms:+.2f} ms at p99" in words


def test_pairs_under_faults_are_compared_only_when_no_fault_free_pair_exists(spark, flush_runs, tmp_path):
    a = flush_runs.answers
    for ans in (a[3], a[4], a[5]):
        shutil.copytree(flush_runs.runs_dir / ans.run_id, tmp_path / "runs" / ans.run_id)
    groups = fc.comparison_groups(discover_runs(tmp_path / "runs"))
    compared, fault_free = fc.chosen_pairs(groups)
    assert [g.runs[SYNC] for g in compared] == [(a[3].run_id,)] and not fault_free
    output = fc.run(spark, tmp_path / "runs", tmp_path / "out")
    page = output.index.read_text(encoding="utf-8")
    assert "No fault-free pair of runs exists" in page
    assert "durability costs" in page


def test_report_page_files_loss_table_and_empty_findings(spark, flush_runs, tmp_path):
    output = fc.run(spark, flush_runs.runs_dir, tmp_path)
    page = output.index.read_text(encoding="utf-8")
    assert all((output.index.parent / ref).is_file() for ref in local_references(page))
    assert "cdf_0.png" in page and "cdf_1.png" not in page  # one compared pair, one CDF
    assert "Loss under each fault, per flush mode" in page and "all 200 acknowledged kept" in page
    assert "no: under faults" in page and "no: one mode only" in page
    assert "per replication mode" not in page  # no broker-group run here
    assert json.loads((tmp_path / "flush-compare" / "findings.json").read_text()) == []
    for ans in flush_runs.answers:
        assert ans.run_id in page  # every run with a check.json feeds the loss table, so all are used


def test_empty_runs_directory_writes_a_valid_page(spark, tmp_path):
    (tmp_path / "runs").mkdir()
    output = fc.run(spark, tmp_path / "runs", tmp_path / "out")
    page = output.index.read_text(encoding="utf-8")
    assert "nothing to compare" in page and "No runs with records were found" in page


def test_runs_that_lost_their_master_are_compared_per_replication_mode(spark, flush_runs, tmp_path):
    """Broker-group runs are read from the slave: their loss goes to the replication table, not the flush one."""
    runs_dir = tmp_path / "runs"
    shutil.copytree(flush_runs.runs_dir, runs_dir)
    write_master_loss_run(runs_dir, 50, MasterLossSpec("SYNC_MASTER", 1000, lost=4, master_only=30))
    write_master_loss_run(runs_dir, 51, MasterLossSpec("ASYNC_MASTER", 2000, lost=20, lost_promised=20))
    page = fc.run(spark, runs_dir, tmp_path / "out").index.read_text(encoding="utf-8")
    flush_part, replication_part = page.split("Loss when the master is lost, per replication mode")
    assert "master_disk_destroyed" not in flush_part.split("Loss under each fault, per flush mode")[1]
    assert "SYNC_MASTER (ASYNC_FLUSH)" in replication_part and "ASYNC_MASTER (ASYNC_FLUSH)" in replication_part
    assert "996 of 1,000 kept (99.6 %); 4 lost, 4,096 B (1 run); 0 of the lost had a SEND_OK; 30 acknowledged on " \
           "the master only" in replication_part
    assert "1,980 of 2,000 kept (99 %); 20 lost, 20,480 B (1 run); 20 of the lost had a SEND_OK" in replication_part

