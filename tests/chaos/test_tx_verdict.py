"""The transaction cells' verdict (chaos/tx_verdict.py) on hand-built histories: one rule broken at a time."""

from __future__ import annotations

from typing import Any

import pytest

from chaos.tx_verdict import Crash, TxPlan, gather, judge, plan_of, tx_key


def send(key: str, t: int = 10, outcome: str = "ok") -> dict[str, Any]:
    return dict(op="send", key=key, outcome=outcome, start_ns=t, end_ns=t + 1, session="")


def tx(key: str, d: str, t: int = 20, s: str = "local") -> dict[str, Any]:
    return dict(op="tx", key=key, outcome=d, start_ns=t, end_ns=t, session=s)


def recv(key: str, t: int = 100) -> dict[str, Any]:
    return dict(op="receive", key=key, outcome="ok", start_ns=t, end_ns=t, session="c0")


C, R, UC, UR, N = (tx_key("p0", i, p) for i, p in enumerate(TxPlan, start=1))


def good_history() -> list[dict[str, Any]]:
    return [send(C), tx(C, "ok"), recv(C),
            send(R), tx(R, "fail"),
            send(UC), tx(UC, "unknown"), tx(UC, "ok", t=1_000, s="check"), recv(UC, t=2_000),
            send(UR), tx(UR, "unknown"), tx(UR, "fail", t=1_000, s="check"),
            send(N), tx(N, "unknown"), tx(N, "unknown", t=1_000, s="check")]


def test_plans_round_trip_through_the_key() -> None:
    assert [plan_of(k) for k in (C, R, UC, UR, N)] == list(TxPlan)
    assert plan_of("w0-000000001") is None and plan_of("nodash") is None


def test_a_history_that_keeps_every_rule_passes() -> None:
    v = judge(gather(good_history()))
    assert v.ok, v.violations
    assert (v.committed, v.rolled_back, v.unresolved_never, v.resolved_by_check) == (2, 2, 1, 2)
    assert v.check_latency_ms_median is not None


@pytest.mark.parametrize(("extra", "rule"), [
    ([recv(R)], "leaked"),
    ([recv(N)], "leaked"),
    ([recv(UC, t=500)], "early"),  # delivered before the check-back committed it: a visible half message
])
def test_a_delivery_that_breaks_atomicity_fails(extra: list[dict[str, Any]], rule: str) -> None:
    v = judge(gather(good_history() + extra))
    assert not v.ok and getattr(v, rule) == 1


def test_a_committed_transaction_never_delivered_is_lost() -> None:
    rows = [r for r in good_history() if not (r["op"] == "receive" and r["key"] == C)]
    v = judge(gather(rows))
    assert (v.ok, v.lost) == (False, 1)


def test_an_unknow_never_resolved_by_check_back_fails() -> None:
    rows = [r for r in good_history() if not (r["key"] == UR and r["session"] == "check")]
    v = judge(gather(rows))
    assert (v.ok, v.unresolved) == (False, 1)


def test_a_decision_against_the_plan_fails() -> None:
    v = judge(gather([*good_history(), tx(R, "ok", t=3_000, s="check"), recv(R, t=4_000)]))
    assert not v.ok and v.wrong == 1


def test_async_power_loss_excuses_only_what_lay_past_the_flushed_offset() -> None:
    rows = [send(C, t=10), tx(C, "ok", t=20), send(UC, t=30), tx(UC, "ok", t=40)]  # neither delivered
    offsets = {C: 1_000, UC: 5_000}
    v = judge(gather(rows, offsets), power_loss_async=[Crash(fault_ns=100, flushed_offset=4_000, restored_ns=200)])
    assert (v.lost, v.lost_excused) == (1, 1), "the flushed one is lost, the unflushed one excused"
    assert v.samples["lost"] == [C]
    assert not v.ok
    late = judge(gather(rows, offsets), power_loss_async=[Crash(fault_ns=5, flushed_offset=0, restored_ns=8)])
    assert late.lost == 2, "a crash before the acknowledgement excuses nothing"


def test_a_commit_decided_after_an_unflushed_acknowledgement_lay_in_the_window() -> None:
    """C's half message was flushed, but its commit came after R's half (past the flushed offset) was
    acknowledged: the real message END_TRANSACTION wrote lay past it too."""
    rows = [send(C, t=10), send(R, t=30), tx(R, "fail", t=40), tx(C, "ok", t=50)]
    v = judge(gather(rows, {C: 1_000, R: 5_000}),
              power_loss_async=[Crash(fault_ns=100, flushed_offset=4_000, restored_ns=200)])
    assert (v.lost, v.lost_excused, v.ok) == (0, 1, True)
    early = judge(gather([send(C, t=10), tx(C, "ok", t=20), send(R, t=30)], {C: 1_000, R: 5_000}),
                  power_loss_async=[Crash(fault_ns=100, flushed_offset=4_000, restored_ns=200)])
    assert early.lost == 1, "committed before anything past the flushed offset was acknowledged"


def test_held_keys_must_be_on_record_and_resolved() -> None:
    held = [tx_key("k0", 1, TxPlan.ROLLBACK), tx_key("k0", 2, TxPlan.COMMIT)]
    rows = [send(held[0]), tx(held[0], "fail", t=900, s="check"),
            send(held[1]), tx(held[1], "ok", t=900, s="check"), recv(held[1], t=1_000)]
    v = judge(gather(rows), held=held)
    assert v.ok and (v.held, v.held_resolved) == (2, 2)
    v = judge(gather(rows[:2]), held=held)
    assert not v.ok and v.held == 1
