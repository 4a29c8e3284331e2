"""The checker's atomicity rule for transactional messages (harness/checker.py): only a committed transaction
may be delivered; a committed one must be (at least once); a rolled-back or unresolved one is no loss. Hand-built
histories per case, and random ones against a naive per-key reading of the rule."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.checker import Category, check_events
from tests.harness.test_checker import read, recv, send


def tx(key: str, decision: str, t: int = 5) -> dict[str, Any]:
    """A local decision: "ok" COMMIT_MESSAGE, "fail" ROLLBACK_MESSAGE, "unknown" UNKNOW."""
    return dict(op="tx", key=key, outcome=decision, start_ns=t, end_ns=t, worker="p0")


def test_committed_delivered_rolled_back_and_unresolved_not_is_a_valid_run() -> None:
    rows = [send("c"), tx("c", "ok"), recv("c"),
            send("r"), tx("r", "fail"),
            send("u"), tx("u", "unknown"), tx("u", "unknown", t=50),
            send("k"), tx("k", "unknown"), tx("k", "ok", t=50), recv("k", t=120)]  # resolved by check-back
    r = check_events(rows)
    assert (r.tx_committed, r.tx_rolled_back, r.tx_unresolved, r.tx_leaked) == (2, 1, 1, 0)
    assert (r.attempted, r.acknowledged, r.lost) == (2, 2, 0), "uncommitted halves are neither sent nor lost"
    assert r.valid


def test_a_delivered_rollback_or_unresolved_transaction_breaks_atomicity() -> None:
    r = check_events([send("r"), tx("r", "fail"), recv("r"), send("u"), tx("u", "unknown"), read("u")])
    assert r.tx_leaked == 2 and not r.valid
    assert r.samples[Category.TX_LEAKED] == ["r", "u"]
    assert r.unexpected == 0, "counted once, by the atomicity rule"


def test_a_committed_transaction_never_delivered_is_lost() -> None:
    r = check_events([send("c"), tx("c", "unknown"), tx("c", "ok", t=50), send("d"), tx("d", "ok"), recv("d")])
    assert (r.lost, r.tx_committed) == (1, 2) and not r.valid
    assert r.samples[Category.LOST] == ["c"]


def test_a_history_without_transactions_reports_none() -> None:
    r = check_events([send("a"), recv("a")])
    assert (r.tx_committed, r.tx_rolled_back, r.tx_unresolved, r.tx_leaked) == (0, 0, 0, 0)


_decisions = st.lists(st.sampled_from(["ok", "fail", "unknown"]), max_size=3)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_decisions, st.integers(0, 2), st.booleans()), min_size=1, max_size=12))
def test_the_rule_per_key_matches_a_naive_reading(keys: list[tuple[list[str], int, bool]]) -> None:
    """Each key: its decisions (none = not transactional), how often it was received, whether it was read."""
    rows: list[dict[str, Any]] = []
    leaked = lost = 0
    for i, (decisions, n_recv, was_read) in enumerate(keys):
        k = f"k{i}"
        rows.append(send(k, t=i))
        rows += [tx(k, d, t=10 + j) for j, d in enumerate(decisions)]
        rows += [recv(k, t=100 + j) for j in range(n_recv)]
        if was_read:
            rows.append(read(k))
        delivered = n_recv > 0 or was_read
        committed = not decisions or "ok" in decisions
        leaked += int(not committed and delivered)
        lost += int(committed and not delivered)
    r = check_events(rows)
    assert (r.tx_leaked, r.lost) == (leaked, lost)
    assert r.valid == (leaked == 0 and lost == 0)
