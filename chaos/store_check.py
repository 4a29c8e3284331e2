"""This module owns the offline store check at the end of a chaos cell: once the broker has recovered from its
last fault and the drain is done, the broker is stopped cleanly (SIGTERM) and its store is checked with
``python -m reference_broker admin checkStore --json``. The summary goes into chaos.json; problems fail the
verdict (the ``--gate``): whatever the fault, recovery must leave a store whose every record, unit and index
entry is sound.

At the cell's end always; after each recovery from a crash with ``--check-each-recovery`` (``tox -e crash``):
the check needs a store nobody writes, so the broker, its sends held, is stopped cleanly, checked and started
again, which adds a clean restart to every cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from chaos.verdict import Verdict
from harness.containers import ContainerBroker
from harness.launcher import BrokerProcess
from harness.store_check import run_check_store


def check_store_at_cell_end(broker: BrokerProcess | ContainerBroker, store_root: Path,
                            conf: Mapping[str, str]) -> dict[str, Any]:
    """Stop the broker (SIGTERM: a clean shutdown) and check its store; the report's summary, plus how the
    broker ended."""
    was_alive = broker.alive
    code = broker.stop() if was_alive else None
    return {"broker_running_at_end": was_alive, "broker_exit_code": code, **run_check_store(store_root, conf)}


def apply_store_check(verdict: Verdict, summary: Mapping[str, Any] | None, when: str = "at the end") -> None:
    """Fail the verdict when the check found problems (or could not read the store)."""
    if summary is None or summary.get("exit_code") == 0:
        return
    totals = ", ".join(f"{k} {n}" for k, n in summary.get("problem_totals", {}).items())
    first = "; ".join(summary.get("problems", [])[:3])
    verdict.violations.append(f"store check {when}: {summary.get('outcome')} ({totals}): {first}")
    verdict.ok = False
