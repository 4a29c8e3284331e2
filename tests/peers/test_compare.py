"""``python -m harness compare`` and ``python -m spark_reports compare``: the verdict rule on known figures, and
(slow) a real session against the reference broker and NATS JetStream rendered into the report."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
from pathlib import Path

import pyarrow.compute as pc
import pytest

from harness.compare import CompareSpec, durability_of, workload_shape
from harness.peers import unavailable_reason
from harness.records import load_events
from spark_reports.claims import ClaimId, Verdict
from spark_reports.jobs.compare import QUANTILES, Perf, judge
from spark_reports.percentiles import CDF_GRID

ROOT = Path(__file__).resolve().parents[2]


def _perf(broker: str, workload: str, acked: int, p99_ms: float, bound: str | None = None,
          client_us: float = 80.0, broker_us: float = 30.0) -> Perf:
    q = (1_000_000, int(p99_ms * 1e6), int(p99_ms * 2e6))
    return Perf(f"run-{broker}-{workload}", broker, workload, "x", acked, acked, 1_000_000_000,
                q + tuple(0 for _ in CDF_GRID), None, (), 0, True, 2, (0.97, 0.96), 0.4, client_us, broker_us,
                bound, 0.99, 0.3)


def test_durability_and_shapes() -> None:
    assert durability_of("nats") == "ASYNC_FLUSH" and durability_of("reference-async") == "ASYNC_FLUSH"
    assert durability_of("rabbitmq-quorum") == "SYNC_FLUSH" and durability_of("rocketmq-sync") == "SYNC_FLUSH"
    spec = CompareSpec(rate=1234)
    assert workload_shape("rate", spec).rate == 1234
    assert workload_shape("max", spec).rate == 0 and workload_shape("one", spec).in_flight == 1


@pytest.mark.parametrize(("ours_acked", "ours_p99", "verdict"), [
    (9000, 5.0, Verdict.HELD),       # more throughput, lower p99
    (9000, 50.0, Verdict.NOT_HELD),  # more throughput, worse p99
    (4000, 5.0, Verdict.NOT_HELD),   # less throughput
])
def test_judge_needs_both_throughput_and_p99(ours_acked: int, ours_p99: float, verdict: Verdict) -> None:
    perfs = [_perf("reference-async", "max", ours_acked, 1.0), _perf("nats", "max", 5000, 1.0),
             _perf("reference-async", "rate", 2000, ours_p99), _perf("nats", "rate", 2000, 10.0)]
    (finding,) = judge(perfs)
    assert finding.claim is ClaimId.PEER_ASYNC_VS_NATS and finding.verdict is verdict
    assert finding.figures["ours_acks_per_s"] == pytest.approx(ours_acked)
    assert len(QUANTILES) == 3


@pytest.mark.parametrize(("ours_bound", "peer_bound", "client_us", "verdict"), [
    ("generator", None, 20.0, Verdict.INCONCLUSIVE),
    (None, "generator", 20.0, Verdict.INCONCLUSIVE),
    ("generator", "generator", 20.0, Verdict.INCONCLUSIVE),
    ("machine", "broker", 20.0, Verdict.HELD),  # the cores saturated, the broker the heavier side: judged
    ("machine", "broker", 80.0, Verdict.INCONCLUSIVE),  # the cores saturated, mostly by the load
    ("neither", "neither", 80.0, Verdict.HELD),  # CPU was not the bound: judged on the figures
])
def test_judge_says_when_the_generator_was_the_bound(ours_bound: str | None, peer_bound: str | None,
                                                     client_us: float, verdict: Verdict) -> None:
    perfs = [_perf("reference-async", "max", 9000, 1.0, ours_bound, client_us),
             _perf("nats", "max", 5000, 1.0, peer_bound, client_us),
             _perf("reference-async", "rate", 2000, 5.0), _perf("nats", "rate", 2000, 10.0)]
    (finding,) = judge(perfs)
    assert finding.verdict is verdict
    if verdict is Verdict.INCONCLUSIVE:
        assert finding.measured.startswith("not measured fairly: generator bound")
        assert "9,000 msg/s" in finding.measured  # the figures are still shown
        # ... and the bound a free load generator would leave: both brokers cost 30 µs per message here.
        assert "reference-async 30 µs of CPU per acknowledged message (33,333 msg/s per core)" in finding.detail
        assert "nats 30 µs (33,333 msg/s per core): ours costs as much" in finding.detail
    assert "load in 2 process(es)" in finding.detail


def test_an_inconclusive_pair_names_the_brokers_cost() -> None:
    perfs = [_perf("reference-async", "max", 9000, 1.0, "generator", broker_us=50.0),
             _perf("nats", "max", 5000, 1.0, "generator", broker_us=40.0),
             _perf("reference-async", "rate", 2000, 5.0), _perf("nats", "rate", 2000, 10.0)]
    (finding,) = judge(perfs)
    assert finding.verdict is Verdict.INCONCLUSIVE
    assert "ours costs more, 1.25x" in finding.detail and "(20,000 msg/s per core)" in finding.detail


@pytest.mark.parametrize(("ours_acked", "ours_client", "peer_client", "ours_p99", "verdict"), [
    (4000, 60.0, 90.0, 5.0, Verdict.NOT_HELD),  # behind with the lighter load: the order stands
    (4000, 90.0, 60.0, 5.0, Verdict.INCONCLUSIVE),  # behind with the heavier load: it may be the client
    (9000, 90.0, 60.0, 5.0, Verdict.HELD),  # ahead with the heavier load: the order stands
    (9000, 60.0, 90.0, 5.0, Verdict.INCONCLUSIVE),  # ahead with the lighter load: it may be the client
    (9000, 60.0, 90.0, 50.0, Verdict.NOT_HELD),  # the fixed-rate p99 fails it whatever the unbounded runs
])
def test_a_generator_bound_order_stands_when_the_side_behind_had_the_lighter_load(
        ours_acked: int, ours_client: float, peer_client: float, ours_p99: float, verdict: Verdict) -> None:
    perfs = [_perf("reference-async", "max", ours_acked, 1.0, "machine", ours_client, 40.0),
             _perf("nats", "max", 5000, 1.0, "machine", peer_client, 30.0),
             _perf("reference-async", "rate", 2000, ours_p99), _perf("nats", "rate", 2000, 10.0)]
    (finding,) = judge(perfs)
    assert finding.verdict is verdict
    if verdict is not Verdict.INCONCLUSIVE:
        assert "generator bound" in finding.detail and not finding.measured.startswith("not measured fairly")


def test_judge_skips_a_pair_with_a_missing_run() -> None:
    assert judge([_perf("reference-sync", "max", 1, 1.0), _perf("rabbitmq-quorum", "max", 1, 1.0)]) == []


@pytest.mark.slow
@pytest.mark.e2e
def test_compare_session_and_report(tmp_path: Path) -> None:
    if unavailable_reason("nats") is not None:
        pytest.skip(unavailable_reason("nats"))
    pytest.importorskip("nats")
    done = subprocess.run([sys.executable, "-m", "harness", "compare", "--out", str(tmp_path / "runs"),
                           "--brokers", "reference-async,nats", "--seconds", "2", "--rate", "500",
                           "--load-processes", "1", "--report", str(tmp_path / "report")], capture_output=True,
                          text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (session,) = (tmp_path / "runs").iterdir()
    summary = json.loads((session / "compare.json").read_text())
    assert summary["skipped"] == {}
    rows = {(r["broker"], r["workload"]): r for r in summary["runs"]}
    assert set(rows) == {(b, w) for b in ("reference-async", "nats") for w in ("rate", "max", "one")}
    assert all(r["valid"] and r["lost"] == 0 and r["acked"] > 0 for r in rows.values()), rows
    # The load in this process, as before --load-processes: one writer each side, its CPU measured all the same.
    assert all(r["load_processes"] == 1 and r["client_cpu_us_per_msg"] > 0 for r in rows.values()), rows
    assert all(json.loads((session / r["run"] / "meta.json").read_text())["load"]["coordinator_cpu_s"] is None
               for r in rows.values())
    assert not (session / "work").exists()  # stores removed, run records kept
    page = (tmp_path / "report" / "compare" / "index.html").read_text()
    assert "nats" in page and "reference-async" in page
    for w in ("rate", "max", "one"):
        assert (tmp_path / "report" / "compare" / f"cdf_{w}.png").stat().st_size > 0
    (finding,) = json.loads((tmp_path / "report" / "compare" / "findings.json").read_text())
    assert finding["claim"] == "peer-async-vs-nats" and finding["verdict"] in ("held", "not held", "inconclusive")
    if finding["verdict"] == "inconclusive":  # on a busy 2-core machine the Python clients are usually the bound
        assert finding["measured"].startswith("not measured fairly: generator bound"), finding


@pytest.mark.slow
@pytest.mark.e2e
def test_compare_in_two_load_processes(tmp_path: Path) -> None:
    """``--load-processes 2``: both parts' producers and consumers in each run record, nothing lost, and what the
    load and the broker cost in meta.json, compare.json and the report."""
    if unavailable_reason("nats") is not None:
        pytest.skip(unavailable_reason("nats"))
    pytest.importorskip("nats")
    done = subprocess.run([sys.executable, "-m", "harness", "compare", "--out", str(tmp_path / "runs"),
                           "--brokers", "reference-async,nats", "--workloads", "rate,max", "--seconds", "2",
                           "--rate", "400", "--load-processes", "2", "--report", str(tmp_path / "report")],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (session,) = (tmp_path / "runs").iterdir()
    summary = json.loads((session / "compare.json").read_text())
    assert summary["skipped"] == {} and summary["spec"]["load_processes"] == 2
    assert len(summary["runs"]) == 4
    for row in summary["runs"]:
        assert row["valid"] and row["lost"] == 0 and row["acked"] > 0, row
        assert row["load_processes"] == 2 and len(row["client_util"]) == 2
        assert row["client_cpu_us_per_msg"] > 0 and row["broker_cpu_us_per_msg"] > 0, row
        assert row["bound"] in ("generator", "broker", "machine", "neither")
        assert row["peer_client"] == ("lean" if row["broker"] == "nats" else None)  # the default send path
        assert row["rocketmq_client"] == ("lean" if row["broker"] == "reference-async" else None)  # compare's default
        run_dir = session / row["run"]
        events = load_events(run_dir, columns=["op", "worker", "key"])
        sends = events.filter(pc.equal(events["op"], "send"))
        by_worker = collections.Counter(sends["worker"].to_pylist())
        assert by_worker["producer-p0"] > 0 and by_worker["producer-p1"] > 0, by_worker
        assert len(set(sends["key"].to_pylist())) == sends.num_rows  # one send per key across the processes
        received = events.filter(pc.equal(events["op"], "receive"))
        assert set(received["worker"].to_pylist()) <= {"consumer-c0", "consumer-c1"}
        assert len(set(received["key"].to_pylist())) >= row["acked"]
        meta = json.loads((run_dir / "meta.json").read_text())
        assert meta["load"]["processes"] == 2 and meta["load"]["broker_cpu_s"] > 0
        assert meta["rocketmq_client"] == row["rocketmq_client"]
        check = json.loads((run_dir / "check.json").read_text())
        assert check["lost"] == 0
    page = (tmp_path / "report" / "compare" / "index.html").read_text()
    assert "broker CPU µs/msg" in page and "load in 2 process(es)" in page
    assert "--rocketmq-client): reference-async: lean" in page  # the RocketMQ side's send path


@pytest.mark.slow
@pytest.mark.e2e
def test_compare_with_faults_reports_the_loss_under_each(tmp_path: Path) -> None:
    """``--faults kill9``: after the workloads, a kill -9 cell per broker into the same session; the report's
    "Loss under each fault" table and the claim's details say where each stands."""
    if unavailable_reason("nats") is not None:
        pytest.skip(unavailable_reason("nats"))
    pytest.importorskip("nats")
    done = subprocess.run([sys.executable, "-m", "harness", "compare", "--out", str(tmp_path / "runs"),
                           "--brokers", "reference-async,nats", "--workloads", "rate,max", "--seconds", "1",
                           "--rate", "300", "--load-processes", "1", "--faults", "kill9", "--fault-cycles", "1",
                           "--report", str(tmp_path / "report")], capture_output=True, text=True, timeout=900,
                          cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (session,) = (tmp_path / "runs").iterdir()
    summary = json.loads((session / "compare.json").read_text())
    assert summary["spec"]["faults"] == ["kill9"]
    faults = {r["label"]: r for r in summary["faults"]}
    assert set(faults) == {"reference-async", "nats"}
    for label, row in faults.items():
        assert row["fault"] == "kill9" and row["acknowledged"] > 0 and row["lost"] == 0, (label, row)
        assert (session / Path(row["run_dir"]).name / "meta.json").is_file()  # the cell's record, in the session
    csv = (tmp_path / "report" / "compare" / "faults.csv").read_text().splitlines()
    assert csv[0].startswith("fault,broker,durability") and len(csv) == 3
    assert {line.split(",")[1] for line in csv[1:]} == {"reference-async", "nats"}
    assert all(line.split(",")[5] == "0" and "kept its promise" in line for line in csv[1:]), csv
    page = (tmp_path / "report" / "compare" / "index.html").read_text()
    assert "Loss under each fault" in page
    (finding,) = json.loads((tmp_path / "report" / "compare" / "findings.json").read_text())
    assert "Under faults (one sitting): kill9: reference-async 0 lost, promise kept, nats 0 lost" in json.dumps(finding)
