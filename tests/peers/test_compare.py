"""``python -m harness compare`` and ``python -m spark_reports compare``: the verdict rule on known figures, and
(slow) a real session against the reference broker and NATS JetStream rendered into the report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.compare import CompareSpec, durability_of, workload_shape
from harness.peers import unavailable_reason
from spark_reports.claims import ClaimId, Verdict
from spark_reports.jobs.compare import QUANTILES, Perf, judge
from spark_reports.percentiles import CDF_GRID

ROOT = Path(__file__).resolve().parents[2]


def _perf(broker: str, workload: str, acked: int, p99_ms: float) -> Perf:
    q = (1_000_000, int(p99_ms * 1e6), int(p99_ms * 2e6))
    return Perf(f"run-{broker}-{workload}", broker, workload, "x", acked, acked, 1_000_000_000,
                q + tuple(0 for _ in CDF_GRID), None, (), 0, True)


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
                           "--report", str(tmp_path / "report")], capture_output=True, text=True, timeout=600,
                          cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (session,) = (tmp_path / "runs").iterdir()
    summary = json.loads((session / "compare.json").read_text())
    assert summary["skipped"] == {}
    rows = {(r["broker"], r["workload"]): r for r in summary["runs"]}
    assert set(rows) == {(b, w) for b in ("reference-async", "nats") for w in ("rate", "max", "one")}
    assert all(r["valid"] and r["lost"] == 0 and r["acked"] > 0 for r in rows.values()), rows
    assert not (session / "work").exists()  # stores removed, run records kept
    page = (tmp_path / "report" / "compare" / "index.html").read_text()
    assert "nats" in page and "reference-async" in page
    for w in ("rate", "max", "one"):
        assert (tmp_path / "report" / "compare" / f"cdf_{w}.png").stat().st_size > 0
    (finding,) = json.loads((tmp_path / "report" / "compare" / "findings.json").read_text())
    assert finding["claim"] == "peer-async-vs-nats" and finding["verdict"] in ("held", "not held")
