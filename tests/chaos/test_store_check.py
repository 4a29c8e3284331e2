"""The chaos cell's closing store check (chaos/store_check.py): the broker stopped cleanly, its store checked,
the verdict failed on problems."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos import damage
from chaos.store_check import apply_store_check, check_store_at_cell_end
from chaos.verdict import Verdict
from tests.chaos.store_helpers import create_topic, produce, topology

pytestmark = pytest.mark.e2e


def test_cell_end_check_stops_the_broker_and_gates_the_verdict(tmp_path: Path) -> None:
    topo = topology(tmp_path / "topo")
    try:
        create_topic(topo)
        produce(topo, 500)
        broker = topo.brokers[0]
        summary = check_store_at_cell_end(broker, broker.store_root, broker.conf)
        assert not broker.alive and summary["broker_exit_code"] == 0
        assert summary["outcome"] == "clean" and summary["clean_stop"] is True, summary
        assert summary["counts"]["commitlog_records"] == 500
        v = Verdict(ok=True, violations=[])
        apply_store_check(v, summary)
        assert v.ok and not v.violations
        # The same store with a record's bytes flipped: the check names it and the verdict fails.
        path, pos = damage.locate(broker.store_root, 0)
        with open(path, "r+b") as f:
            f.seek(pos + 100)
            f.write(b"\xff\xff")
        summary = check_store_at_cell_end(broker, broker.store_root, broker.conf)
        assert summary["broker_running_at_end"] is False and summary["exit_code"] == 1
        apply_store_check(v, summary)
        assert not v.ok
        assert v.violations == [f"store check at the end: problems (commitlog-record 1): commitlog/{path.name} @ 0: "
                                "body CRC mismatch"]
        after_recovery = Verdict(ok=True, violations=[])
        apply_store_check(after_recovery, summary, "after the recovery of cycle 3")
        assert after_recovery.violations[0].startswith("store check after the recovery of cycle 3: problems")
    finally:
        topo.cleanup()
