"""End to end: each scenario file run headless by locust against real broker processes, ending with a
complete, schema-valid run record in which the checker finds nothing lost."""

# pyarrow ships no type information.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.compute as pc
import pytest

from harness.driver import RocketMQDriver
from harness.launcher import Topology
from harness.records import load_check, load_events, load_faults, load_meta, load_metrics, validate_run
from harness.records.findings import read as read_findings

ROOT = Path(__file__).resolve().parents[2]
SMALL_BROKER = ["--broker-conf", f"mappedFileSizeCommitLog={64 << 20}"]

pytestmark = pytest.mark.e2e


def run_locust(scenario: str, tmp_path: Path, *args: str,
               timeout: float = 120) -> tuple[subprocess.CompletedProcess[str], Path]:
    runs = tmp_path / "runs"
    cmd = [sys.executable, "-m", "locust", "-f", str(ROOT / "scenarios" / f"{scenario}.py"), "--headless",
           "--only-summary", "-L", "WARNING", "--run-dir", str(runs), "--store-dir", str(tmp_path / "store"), *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOCUST_", "RMQ_LAB_"))}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=tmp_path, env=env)
    dirs = sorted(p for p in runs.iterdir() if p.is_dir()) if runs.is_dir() else []  # not findings.jsonl
    assert len(dirs) == 1, f"expected one run directory, got {dirs}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc, dirs[0]


def assert_good_run(proc: subprocess.CompletedProcess[str], run: Path, scenario: str,
                    impl_prefix: str = "reference_broker") -> dict:
    detail = f"\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, detail
    assert validate_run(run) == [], detail
    check = load_check(run)
    assert check is not None and check["valid"], detail
    assert check["lost"] == 0 and check["unexpected"] == 0 and check["acknowledged"] > 0, check
    assert check["attempted"] == check["acknowledged"] + check["failed"] + check["unknown"]
    meta = load_meta(run)
    assert meta["scenario"] == scenario and meta["ended_at_ns"] > meta["started_at_ns"]
    assert meta["broker"]["flushDiskType"] == "ASYNC_FLUSH"
    assert meta["broker_impl"].startswith(impl_prefix), meta["broker_impl"]
    assert set(meta["sysctl"]) >= {"profile", "applied", "reason", "values"}
    assert meta["results"]["load"]["ok"] == check["acknowledged"]
    metrics = set(load_metrics(run)["metric"].to_pylist())
    required = {"commitlog_max_offset", "dispatch_lag_bytes", "backlog_msgs", "disk_used_ratio", "send_tps",
                "consume_tps", "host_dirty_bytes", "host_writeback_bytes", "vm_nr_dirty", "vm_pgmajfault",
                "vm_allocstall"}  # the host's page cache beside the broker's (harness/vm_stats.py)
    if impl_prefix == "reference_broker":  # RocketMQ 4.9.8's runtime info has no flushed offset
        required.add("commitlog_flushed_offset")
    assert metrics >= required, metrics
    assert "check   VALID" in proc.stdout and (run / "summary.txt").is_file(), detail
    assert proc.stdout.rstrip().endswith((run / "summary.txt").read_text().rstrip())  # the last screen
    json.loads((run / "summary.json").read_text())
    return meta


def test_throughput_two_worker_processes_merge_their_events(tmp_path):
    proc, run = run_locust("throughput", tmp_path, "-t", "5s", "--processes", "2", "-u", "2", "--rate", "2000",
                           *SMALL_BROKER)
    meta = assert_good_run(proc, run, "throughput")
    assert meta["params"]["distributed"] is True and meta["results"]["load"]["processes"] == 2
    events = load_events(run, columns=["op", "worker", "intended_ns", "start_ns"])
    for op in ("send", "receive"):
        workers = set(events.filter(pc.equal(events["op"], op))["worker"].to_pylist())
        assert workers == {"w0", "w1"}, (op, workers)
    assert {p.name.split("-")[1] for p in (run / "events").glob("part-*.parquet")} == {"w0", "w1"}


@pytest.mark.machine  # applies the sysctl profile "default" (the sysctl_profiles lock and state file)
def test_latency_against_an_existing_name_server_and_topic(tmp_path):
    with Topology(tmp_path / "topo", broker_conf={"mappedFileSizeCommitLog": str(64 << 20)}) as topo:
        # An existing topic with history: the run consumes from its own start time and records only its own.
        d = RocketMQDriver(topo.namesrv_addr, instance="history")
        d.create_topic("ExistingTopic", 4)
        assert all(d.send("ExistingTopic", f"old-{i}", b"h").outcome == "ok" for i in range(20))
        d.stop()
        proc, run = run_locust("latency", tmp_path, "-t", "4s", "--host", f"rmq://{topo.namesrv_addr}",
                               "--sysctl-profile", "default", "--rate", "300", "--topic", "ExistingTopic")
    meta = assert_good_run(proc, run, "latency")
    assert meta["topology"]["embedded"] is False and meta["params"]["namesrv"] == topo.namesrv_addr
    assert meta["phases"][0]["topics"] == [["ExistingTopic", 4]]
    keys = load_events(run, columns=["key"])["key"].to_pylist()
    assert not any(k.startswith("old-") for k in keys)
    assert meta["sysctl"]["profile"] == "default" and meta["sysctl"]["applied"] is True
    assert "vm.dirty_ratio" in meta["sysctl"]["values"]
    sends = load_events(run, columns=["op", "intended_ns", "start_ns"])
    sends = sends.filter(pc.equal(sends["op"], "send"))
    intended, start = sends["intended_ns"].to_numpy(), sends["start_ns"].to_numpy()
    assert (intended <= start).all() and len(set(intended.tolist())) == len(intended)  # one slot each
    gaps = sorted(intended)[-1] - sorted(intended)[0]
    assert abs(gaps / (len(intended) - 1) - 1e9 / 300) < 1e9 / 300 * 0.01  # the schedule is 300 msg/s


def test_backlog_builds_and_drains(tmp_path):
    proc, run = run_locust("backlog", tmp_path, "-t", "9s", "--backlog-bytes", str(1 << 20), "--warmup", "1",
                           "--rate", "1500", *SMALL_BROKER)
    meta = assert_good_run(proc, run, "backlog")
    assert meta["broker"]["mappedFileSizeCommitLog"] == 64 << 20 and meta["broker"]["brokerRole"] == "ASYNC_MASTER"
    b = meta["results"]["backlog"]
    assert b["backlog_bytes"] >= 1 << 20 and b["build_s"] > 0 and b["drain_s"] > 0, b
    assert b["read_from"].startswith(("page cache", "disk")) and b["drain_rate_msgs"] > 0
    assert b["page_cache_at_build"]["range_bytes"] > 0
    assert "backlog built" in proc.stdout and "drained in" in proc.stdout


def test_a_run_ending_behind_its_producers_reads_back_what_the_consumers_never_got(tmp_path):
    """The run ends while the backlog scenario has its consumers paused, and --drain-timeout 0 gives them no
    time: thousands of acknowledged messages were never delivered. The final read finds each at the position
    its send was acknowledged at, so the check calls them unread, not lost, and the run is VALID."""
    proc, run = run_locust("backlog", tmp_path, "-t", "4s", "--backlog-bytes", str(64 << 20), "--warmup", "1",
                           "--rate", "1500", "--drain-timeout", "0", *SMALL_BROKER)
    assert_good_run(proc, run, "backlog")
    check, results = load_check(run), load_meta(run)["results"]
    read = results["final_read"]
    assert results["drain_at_end"]["caught_up"] is False, results["drain_at_end"]
    assert read["complete"] and read["wanted"] > 500 and read["found"] == read["wanted"], read
    assert check["unread"] == read["found"] and check["lost"] == 0, check
    ev = load_events(run, columns=["op", "worker"])
    reads = ev.filter(pc.equal(ev["op"], "read"))
    assert reads.num_rows == read["found"] and set(reads["worker"].to_pylist()) == {"final-read"}
    assert f"{read['found']:,} of {read['wanted']:,} acknowledged, unreceived messages still served" in proc.stdout
    assert f"({check['unread']:,} unread: served at the end, never delivered)" in proc.stdout


def test_queues_phases(tmp_path):
    proc, run = run_locust("queues", tmp_path, "-t", "6s", "--queue-counts", "1,100", "--rate", "1000",
                           *SMALL_BROKER)
    meta = assert_good_run(proc, run, "queues")
    assert [p["label"] for p in meta["results"]["phases"]] == ["q=1", "q=100"]
    topics = set(load_events(run, columns=["topic"])["topic"].to_pylist())
    assert {t.rsplit("_", 2)[-2] for t in topics} == {"n1", "n100"}
    assert "phase q=100" in proc.stdout


@pytest.mark.slow
def test_queues_default_phases_up_to_10000_queues(tmp_path):
    proc, run = run_locust("queues", tmp_path, "-t", "12s", timeout=300)
    meta = assert_good_run(proc, run, "queues")
    assert [p["queues"] for p in meta["results"]["phases"]] == [1, 100, 1000, 10000]


@pytest.mark.slow
def test_without_recording_nothing_is_checked(tmp_path):
    proc, run = run_locust("throughput", tmp_path, "-t", "3s", "--no-record", *SMALL_BROKER)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert validate_run(run) == [] and load_check(run) is None
    assert load_meta(run)["results"]["load"]["ok"] > 0 and "check   skipped" in proc.stdout


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="dropping the page cache needs root")
def test_cold_backlog_drops_the_page_cache_and_records_it(tmp_path):
    proc, run = run_locust("backlog", tmp_path, "-t", "10s", "--backlog-bytes", str(2 << 20), "--warmup", "1",
                           "--cold", "--fio", *SMALL_BROKER, timeout=300)
    meta = assert_good_run(proc, run, "backlog")
    faults = load_faults(run)
    assert [f["kind"] for f in faults] == ["drop_caches"] and faults[0]["params"]["done"] is True
    assert meta["results"]["backlog"]["cold"]["dropped"] is True
    assert meta["fio"]["seq_write_bytes_per_s"] > 0


def test_throughput_against_rocketmq_498(tmp_path, rocketmq_home):
    """--broker-impl rocketmq: the embedded topology is Apache RocketMQ's, and the run record says so
    (meta.json's broker_impl is its brokerVersionDesc)."""
    proc, run = run_locust("throughput", tmp_path, "-t", "4s", "--broker-impl", "rocketmq",
                           "--rocketmq-home", str(rocketmq_home), *SMALL_BROKER,
                           timeout=240)
    assert_good_run(proc, run, "throughput", impl_prefix="V4_9_8")


@pytest.mark.slow
def test_on_rocketmq_a_run_ending_behind_reads_back_from_its_store_and_records_a_stall(tmp_path, rocketmq_home):
    """The same end as above on Apache RocketMQ 4.9.8: the final read pulls the unreceived positions from
    RocketMQ's own store, and a RocketMQ run whose consumers had not caught up is a stall finding in
    runs/findings.jsonl, with its run record."""
    proc, run = run_locust("backlog", tmp_path, "-t", "5s", "--backlog-bytes", str(64 << 20), "--warmup", "1",
                           "--rate", "1000", "--drain-timeout", "0", "--broker-impl", "rocketmq",
                           "--rocketmq-home", str(rocketmq_home), *SMALL_BROKER, timeout=240)
    assert_good_run(proc, run, "backlog", impl_prefix="V4_9_8")
    check, read = load_check(run), load_meta(run)["results"]["final_read"]
    assert read["complete"] and read["wanted"] > 500 and read["found"] == read["wanted"], read
    assert check["unread"] == read["found"] and check["lost"] == 0, check
    found, problems = read_findings(tmp_path / "runs")
    assert problems == [] and [f.key for f in found] == ["scenario/backlog: consumers behind at the end"]
    assert found[0].broker == "V4_9_8" and found[0].run_dir == str(run.resolve())
    assert "had not caught up" in found[0].detail and f"finding {found[0].title}" in proc.stdout


def test_an_unknown_broker_impl_is_refused(tmp_path):
    cmd = [sys.executable, "-m", "locust", "-f", str(ROOT / "scenarios" / "throughput.py"), "--headless", "-t", "1s",
           "--broker-impl", "kafka", "--run-dir", str(tmp_path / "runs")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode != 0
    assert "--broker-impl must be one of reference, rocketmq" in proc.stdout + proc.stderr


def test_transactions_scenario_judged_by_the_atomicity_rule(tmp_path):
    """Transactions under locust: commits delivered, rollbacks and never-resolved ones not, UNKNOWs resolved by
    the broker's check-back (tx rows from "check"), and the checker's verdict valid."""
    proc, run = run_locust("transactions", tmp_path, "-t", "6s", "-u", "4", "--rate", "200",
                           "--tx-mix", "commit=0.4,rollback=0.2,unknown_commit=0.2,unknown_rollback=0.1,never=0.1",
                           *SMALL_BROKER)
    detail = f"\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0 and validate_run(run) == [], detail
    check, meta = load_check(run), load_meta(run)
    assert check is not None and check["valid"] and "check   VALID" in proc.stdout, detail
    assert check["lost"] == 0 and check["unexpected"] == 0 and check["acknowledged"] > 0, check
    assert meta["scenario"] == "transactions" and meta["params"]["tx_mix"].startswith("commit=0.4")
    assert check["tx_committed"] > 0 and check["tx_rolled_back"] > 0 and check["tx_leaked"] == 0, check
    # Every acknowledged half message has a decision; only the committed ones count as acknowledged sends.
    transactions = check["tx_committed"] + check["tx_rolled_back"] + check["tx_unresolved"]
    assert transactions >= meta["results"]["load"]["ok"] > check["acknowledged"], (check, meta["results"])
    events = load_events(run, columns=["op", "key", "outcome", "session"]).to_pylist()
    checks = [e for e in events if e["op"] == "tx" and e["session"] == "check"]
    assert {e["outcome"] for e in checks} >= {"ok", "fail"}, "check-backs committed and rolled back UNKNOWs"
    received = {e["key"] for e in events if e["op"] == "receive"}
    committed = {e["key"] for e in events if e["op"] == "tx" and e["outcome"] == "ok"}
    assert received and received <= committed
