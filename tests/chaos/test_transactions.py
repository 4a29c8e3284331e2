"""chaos/transactions.py end to end on the reference broker: transactional producer processes and a push
consumer under broker kill -9 and producer kill -9 (a producer SIGKILLed between prepare and END_TRANSACTION,
then a new process of its group answering the check-backs). Every rule of chaos/tx_verdict.py holds, the run
record validates, and nothing is left behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos.experiment import FlushMode
from chaos.leftovers import Ledger
from chaos.transactions import TxFault, TxResult, TxSpec, run_transactions
from harness.records import load_events, validate_run

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]


def _run(tmp_path: Path, fault: TxFault, cycles: int = 2) -> TxResult:
    ledger = Ledger(tmp_path / "chaos-state.json")
    spec = TxSpec(fault=fault, flush=FlushMode.SYNC, cycles=cycles, runs_dir=tmp_path / "runs",
                  work_dir=tmp_path / "work", seed=7, gap_s=(0.5, 1.0), threads=2)
    result = run_transactions(spec, ledger=ledger)
    assert ledger.entries() == [], "the cell left processes or files behind"
    assert result.run_dir is not None and validate_run(result.run_dir) == []
    assert result.error is None, result.error
    assert result.verdict is not None and result.verdict.ok, result.verdict.violations
    assert len(result.cycles) == cycles and all(c.ok for c in result.cycles)
    assert result.drain is not None and result.drain.complete
    return result


def test_broker_kill9_under_transactions(tmp_path: Path) -> None:
    r = _run(tmp_path, TxFault.KILL9)
    v = r.verdict
    assert v is not None and r.check is not None
    assert v.committed > 0 and v.rolled_back > 0 and v.resolved_by_check > 0
    assert (v.leaked, v.early, v.lost, v.unresolved) == (0, 0, 0, 0)
    assert r.check.tx_leaked == 0 and r.check.tx_committed == v.committed
    assert all(c.recovery_s is not None for c in r.cycles)


def test_producer_kill9_between_prepare_and_end_transaction(tmp_path: Path) -> None:
    r = _run(tmp_path, TxFault.PRODUCER_KILL9)
    v = r.verdict
    assert v is not None and r.run_dir is not None
    assert v.held == 2 * r.spec.hold_count and v.held_resolved == v.held
    held = {k for c in r.cycles for k in c.extra["held"]}
    events = load_events(r.run_dir).to_pylist()
    # The held keys were resolved by the new processes' check-backs, never by the killed ones.
    deciders = {(e["worker"], e["session"]) for e in events if e["op"] == "tx" and e["key"] in held}
    assert deciders == {("producer-k0c", "check"), ("producer-k1c", "check")}
    delivered = {e["key"] for e in events if e["op"] == "receive" and e["key"] in held}
    assert delivered == {k for k in held if k.endswith("-c")}, "held commits delivered, held rollbacks not"
    faults = [json.loads(line) for line in (r.run_dir / "faults.jsonl").read_text().splitlines()]
    assert [f["kind"] for f in faults] == ["producer_kill9", "producer_kill9"]
