"""An experiment that stops early (a cycle raised: the soak's "File name too long" at crash 33) still drains
what the broker holds and is judged on that drain; with its broker down it reads "incomplete: not drained" and
calls nothing lost (chaos.verdict rule 8). Real broker, real load, a fault that breaks on purpose."""

from __future__ import annotations

import pytest

from chaos import ExperimentSpec, FaultName, FlushMode, LoadSpec, run_experiment
from chaos.experiment import Cell, CycleRecord
from chaos.kill9 import Kill9
from chaos.leftovers import Ledger

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


class BreaksOnSecondCycle(Kill9):
    """Cycle 0 is a real kill -9 and restart; cycle 1 raises — after killing the broker if ``kill_first``."""

    def __init__(self, kill_first: bool) -> None:
        super().__init__()
        self.kill_first = kill_first

    def cycle(self, cell: Cell, i: int) -> CycleRecord:
        if i == 0:
            return super().cycle(cell, i)
        if self.kill_first:
            cell.broker.kill()
        raise OSError(36, "File name too long")


@pytest.mark.parametrize("kill_first", [False, True], ids=["broker-up", "broker-down"])
def test_an_experiment_that_stops_early(tmp_path, kill_first):
    ledger = Ledger(tmp_path / "chaos-state.json")
    spec = ExperimentSpec(fault=FaultName.KILL9, flush=FlushMode.SYNC, cycles=3, profile=None,
                          runs_dir=tmp_path / "runs", work_dir=tmp_path / "work", seed=7, gap_s=(0.3, 0.6),
                          load=LoadSpec(in_flight=16))
    result = run_experiment(spec, BreaksOnSecondCycle(kill_first), ledger=ledger)
    assert ledger.entries() == [], "the experiment left processes, mounts or loop devices behind"
    assert result.error is not None and "File name too long" in result.error
    assert [c.cycle for c in result.cycles] == [0], "the cycles stopped at the one that raised"
    v = result.verdict
    assert v is not None and not v.ok
    assert not any("missing from the broker" in x for x in v.violations), v.violations
    assert result.drain is not None
    if kill_first:
        assert not result.drain.complete and not v.complete
        assert any(x.startswith("incomplete: not drained") for x in v.violations), v.violations
    else:
        # Drained: every acknowledged message is accounted for, and the only failure is the error itself.
        assert result.drain.complete and v.complete and v.absent == 0
        assert v.violations == [f"experiment error: {result.error}"]
    row = result.summary()
    if kill_first:
        assert row["complete"] is False and row["lost"] is None and row["absent"] is None
        assert row["not_seen"] is not None and row["not_seen"] >= 0
        from chaos.matrix import summary_rows
        assert summary_rows([result])[0]["verdict"] == "INCOMPLETE"
    else:
        assert row["complete"] is True and row["lost"] == 0 and row["absent"] == 0
