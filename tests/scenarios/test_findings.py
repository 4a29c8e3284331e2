"""scenarios.findings: which runs' end-of-run drains are a stall finding about RocketMQ, and what it says."""

from __future__ import annotations

from typing import Any

from harness.records.findings import FindingKind
from scenarios.findings import DRAIN_BOUND_S, drain_stall


def summary(impl: str = "V4_9_8", waited: float = 66.0, caught_up: bool = True, **extra: Any) -> dict[str, Any]:
    return {"broker_impl": impl, "scenario": "queues", "run_dir": "runs/r1", "params": {"queues": 8},
            "phases": [{"queues": 1}, {"queues": 1000}, {"queues": 10000}],
            "metrics": {"dispatch_lag_max_bytes": 22.7 * (1 << 20)},
            "results": {"drain_at_end": {"waited_s": waited, "caught_up": caught_up, "reason": "caught up"},
                        **extra}}


def test_a_rocketmq_drain_longer_than_the_bound_is_a_stall_with_its_queues_and_dispatch_lag() -> None:
    f = drain_stall(summary(), "locust -f scenarios/queues.py")
    assert f is not None and f.kind is FindingKind.STALL and f.broker == "V4_9_8" and f.run_dir == "runs/r1"
    assert f.key == "scenario/queues: consumers behind at the end" and "F10" in f.title
    assert "caught up 66.0 s after the producers stopped, with up to 10,000 queues" in f.detail
    assert "reached 22.7 MiB" in f.detail and f.reproduce == "locust -f scenarios/queues.py"


def test_a_drain_that_never_caught_up_names_its_reason_and_the_final_read() -> None:
    s = summary(waited=5.0, caught_up=False, final_read={"wanted": 120, "found": 120})
    s["results"]["drain_at_end"]["reason"] = "drain timeout (5 s)"
    f = drain_stall(s, "x")
    assert f is not None
    assert "had not caught up 5.0 s after the producers stopped (drain timeout (5 s))" in f.detail
    assert "found 120 of the 120 acknowledged messages" in f.detail


def test_no_finding_within_the_bound_for_the_reference_broker_or_without_a_drain() -> None:
    assert drain_stall(summary(waited=DRAIN_BOUND_S), "x") is None
    assert drain_stall(summary(impl="reference_broker 0.1.0"), "x") is None
    assert drain_stall({"broker_impl": "V4_9_8", "results": {}}, "x") is None
