"""chaos/replication.py end to end: a master and a slave as real processes under load, the master killed with -9
(and restarted, in the earlier cycles), then killed for good or killed with its store deleted; the topic drained
from the slave alone. A SYNC_MASTER loses no SEND_OK; an ASYNC_MASTER's loss is measured, with the lag."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.leftovers import Ledger
from chaos.load import LoadSpec
from chaos.replication import ReplicationFault, ReplicationResult, ReplicationSpec, run_replication
from chaos.replication_verdict import ReplicationMode
from harness.records import validate_run

pytestmark = pytest.mark.e2e


def _run(tmp_path: Path, fault: ReplicationFault, mode: ReplicationMode, cycles: int = 2,
         impl: str = "reference") -> ReplicationResult:
    ledger = Ledger(tmp_path / "chaos-state.json")
    spec = ReplicationSpec(fault=fault, mode=mode, cycles=cycles, runs_dir=tmp_path / "runs",
                           work_dir=tmp_path / "work", seed=42, gap_s=(0.5, 1.0), load=LoadSpec(in_flight=16),
                           broker_impl=impl)  # type: ignore[arg-type]
    result = run_replication(spec, ledger=ledger)
    if result.skipped is not None:
        pytest.skip(result.skipped)
    assert ledger.entries() == [], "the experiment left processes or files behind"
    assert result.run_dir is not None and validate_run(result.run_dir) == []
    return result


def _common(result: ReplicationResult, fault: ReplicationFault, cycles: int) -> dict[str, object]:
    assert result.run_dir is not None
    assert result.error is None, result.error
    assert result.drain is not None and result.drain.complete and result.drain.messages > 0
    assert len(result.cycles) == cycles and all(c.ok for c in result.cycles)
    # The earlier cycles restarted the master and waited for the slave to take new bytes from it.
    assert all(c.recovery_s is not None and "slave_caught_up_s" in c.extra for c in result.cycles[:-1])
    faults = [json.loads(line) for line in (result.run_dir / "faults.jsonl").read_text().splitlines()]
    final = faults[-1]
    assert final["kind"] == fault.value and final["params"]["final"] is True
    assert final["params"]["lag_bytes"] >= 0 and final["params"]["slave_offset"] > 0
    meta = json.loads((result.run_dir / "meta.json").read_text())
    assert meta["broker"]["brokerRole"] == result.spec.mode.value
    recorded = json.loads((result.run_dir / "chaos.json").read_text())
    slave_conf = recorded["slave"]["conf"]
    assert (slave_conf["brokerRole"], slave_conf["brokerId"], slave_conf["slaveReadEnable"]) == ("SLAVE", "1", "true")
    assert recorded["slave"]["store_check"]["outcome"] == "clean"
    check = json.loads((result.run_dir / "check.json").read_text())
    assert check["lost_promised"] == result.summary()["lost_promised"]
    return recorded


@pytest.mark.parametrize("fault", list(ReplicationFault), ids=lambda f: f.value)
def test_sync_master_loses_no_send_ok(tmp_path: Path, fault: ReplicationFault) -> None:
    result = _run(tmp_path, fault, ReplicationMode.SYNC)
    recorded = _common(result, fault, 2)
    row = result.summary()
    assert result.ok, row["violations"]
    assert row["acknowledged"] > 0 and row["lost_promised"] == 0 and row["absent_promised"] == 0
    # Whatever the slave lacks was acknowledged by the master alone (FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE).
    assert recorded["verdict"]["absent"] == recorded["verdict"]["absent_master_only"]
    if fault is ReplicationFault.MASTER_DISK_DESTROYED:
        assert result.cycles[-1].extra["store_deleted"]


@pytest.mark.slow
@pytest.mark.parametrize("fault", list(ReplicationFault), ids=lambda f: f.value)
def test_async_master_loss_is_measured_with_the_lag(tmp_path: Path, fault: ReplicationFault) -> None:
    result = _run(tmp_path, fault, ReplicationMode.ASYNC, cycles=3)
    _common(result, fault, 3)
    row = result.summary()
    assert result.ok, row["violations"]  # loss allowed; nothing absent below the slave's end
    assert row["acked_master_only"] == 0  # an ASYNC_MASTER answers SEND_OK without waiting for a slave
    assert row["lag_bytes"] >= 0 and row["unreplicated_bytes"] >= 0
    assert 0.0 <= row["lost_share"] < 1.0


@pytest.mark.slow
def test_rocketmq_sync_master_loses_no_send_ok(tmp_path: Path, rocketmq_home: Path) -> None:
    result = _run(tmp_path, ReplicationFault.MASTER_DISK_DESTROYED, ReplicationMode.SYNC, impl="rocketmq")
    _common(result, ReplicationFault.MASTER_DISK_DESTROYED, 2)
    row = result.summary()
    assert result.ok, row["violations"]
    assert row["lost_promised"] == 0 and row["absent_promised"] == 0


@pytest.mark.slow
def test_cli_replication_json_and_gate(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "chaos", "replication", "--replication", "sync", "--faults", "master_kill9",
         "--cycles", "1", "--gap", "0.5,1", "--in-flight", "16", "--seed", "5", "--json", "--gate",
         "--runs-dir", str(tmp_path / "runs"), "--work-dir", str(tmp_path / "work")],
        cwd=root, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    (row,) = json.loads(done.stdout)
    assert (row["fault"], row["replication"], row["verdict"], row["lost_promised"]) == (
        "master_kill9", "sync", "ok", 0)
    assert "gate passed" in done.stderr
