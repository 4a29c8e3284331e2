"""chaos/replication.py end to end: a master and a slave as real processes under load, the master killed with -9
(and restarted, in the earlier cycles), then killed for good, killed with its store deleted or its loop image
crashed; the topic drained from the slave alone. A SYNC_MASTER loses no SEND_OK; an ASYNC_MASTER's loss is
measured, with the lag. The slave faults (kill -9 and restart, SIGSTOP and SIGCONT) leave the master alive: the
slave catches up, both stores pass checkStore, and the master keeps every acknowledged send."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.leftovers import Ledger
from chaos.load import LoadSpec
from chaos.replication import SLAVE_FAULTS, ReplicationFault, ReplicationResult, ReplicationSpec, run_replication
from chaos.replication_verdict import ReplicationMode
from harness.records import validate_run

pytestmark = pytest.mark.e2e

# The faults the master survives only through its slave (drained from the slave at the end).
MASTER_LOSS = (ReplicationFault.MASTER_KILL9, ReplicationFault.MASTER_DISK_DESTROYED)


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


def _common(result: ReplicationResult, fault: ReplicationFault, cycles: int,
            store_clean: bool = True) -> dict[str, object]:
    assert result.run_dir is not None
    assert result.error is None, result.error
    assert result.drain is not None and result.drain.complete and result.drain.messages > 0
    assert len(result.cycles) == cycles and all(c.ok for c in result.cycles)
    # The earlier cycles restarted the master and waited for the slave to take new bytes from it, and for a
    # plain SEND_OK (a SYNC_MASTER's slave reporting again).
    assert all(c.recovery_s is not None and "slave_caught_up_s" in c.extra and "send_ok_after_s" in c.extra
               for c in result.cycles[:-1])
    faults = [json.loads(line) for line in (result.run_dir / "faults.jsonl").read_text().splitlines()]
    final = [f for f in faults if f["kind"] == fault.value][-1]
    assert final["params"]["final"] is True and final["params"]["promised_in_window"] > 0
    assert final["params"]["lag_bytes"] >= 0 and final["params"]["slave_offset"] > 0
    meta = json.loads((result.run_dir / "meta.json").read_text())
    assert meta["broker"]["brokerRole"] == result.spec.mode.value
    recorded = json.loads((result.run_dir / "chaos.json").read_text())
    slave_conf = recorded["slave"]["conf"]
    assert (slave_conf["brokerRole"], slave_conf["brokerId"], slave_conf["slaveReadEnable"]) == ("SLAVE", "1", "true")
    if store_clean:
        chk = recorded["slave"]["store_check"]
        assert chk["outcome"] == "clean", (chk.get("problem_totals"), chk.get("problems"), chk.get("warnings"))
    check = json.loads((result.run_dir / "check.json").read_text())
    assert check["lost_promised"] == result.summary()["lost_promised"]
    return recorded


@pytest.mark.parametrize("fault", MASTER_LOSS, ids=lambda f: f.value)
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
@pytest.mark.parametrize("fault", MASTER_LOSS, ids=lambda f: f.value)
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


def test_sync_master_power_loss_keeps_every_send_ok_on_the_slave(tmp_path: Path) -> None:
    # One cycle: the master's loop image crashes under load (its page cache lost) and the slave is read.
    result = _run(tmp_path, ReplicationFault.MASTER_POWER_LOSS, ReplicationMode.SYNC, cycles=1)
    recorded = _common(result, ReplicationFault.MASTER_POWER_LOSS, 1)
    row = result.summary()
    assert result.ok, row["violations"]
    assert row["acknowledged"] > 0 and row["lost_promised"] == 0 and row["absent_promised"] == 0
    assert row["findings"] == [] and row["diverged_cycles"] is None  # no restart: nothing could diverge
    extra = recorded["cycles"][0]["extra"]
    assert extra["image_allocated_bytes"] > 0 and extra["checkpoint"] is not None
    assert extra["slave_offset_after_crash"] > 0
    meta = json.loads((result.run_dir / "meta.json").read_text())  # type: ignore[operator]
    assert meta["broker"]["storePathRootDir"].endswith("master-mnt/store")


@pytest.mark.slow
@pytest.mark.parametrize("impl", ["reference", "rocketmq"])
def test_master_power_loss_restart_records_where_the_slave_stands(tmp_path: Path, impl: str,
                                                                   request: pytest.FixtureRequest) -> None:
    """A master restarted on its crashed image may recover behind its slave. Both brokers then let the logs
    diverge (the master resumes at the slave's offset, 4.9.8 HAConnection): recorded per restart
    (slave_ahead_bytes) and, when it happened, the loss that follows is a finding, not a violation."""
    if impl == "rocketmq":
        request.getfixturevalue("rocketmq_home")
    result = _run(tmp_path, ReplicationFault.MASTER_POWER_LOSS, ReplicationMode.SYNC, cycles=2, impl=impl)
    _common(result, ReplicationFault.MASTER_POWER_LOSS, 2, store_clean=False)
    assert result.run_dir is not None
    faults = [json.loads(line) for line in (result.run_dir / "faults.jsonl").read_text().splitlines()]
    (restart,) = [f for f in faults if f["kind"] == "restart"]
    ahead = restart["params"]["slave_ahead_bytes"]
    row = result.summary()
    assert result.ok, row["violations"]
    assert row["diverged_cycles"] == (1 if ahead > 0 else 0)
    assert bool(row["findings"]) == (ahead > 0)
    if ahead <= 0:
        assert row["lost_promised"] == 0 and row["absent_promised"] == 0
        recorded = json.loads((result.run_dir / "chaos.json").read_text())
        assert recorded["slave"]["store_check"]["outcome"] == "clean"


def _slave_fault_common(result: ReplicationResult, fault: ReplicationFault, cycles: int) -> dict[str, object]:
    assert result.run_dir is not None
    assert result.error is None, result.error
    row = result.summary()
    assert result.ok, row["violations"]
    assert result.drain is not None and result.drain.complete and result.drain.messages > 0
    assert len(result.cycles) == cycles and all(c.ok for c in result.cycles)
    # Every cycle: the slave came back, reached the master's end and the master answered SEND_OK again.
    assert all({"slave_caught_up_s", "send_ok_after_s", "answers_while_down"} <= set(c.extra)
               for c in result.cycles)
    # The master lived on: every acknowledged send is in it, whatever its answer.
    assert row["acknowledged"] > 0 and row["absent"] == 0 and row["lost"] == 0
    recorded = json.loads((result.run_dir / "chaos.json").read_text())
    assert recorded["slave"]["store_check"]["outcome"] == "clean"
    assert recorded["master"]["store_check"]["outcome"] == "clean"
    assert recorded["slave"]["end_offset"] == recorded["master"]["end_offset"] > 0
    faults = [json.loads(line) for line in (result.run_dir / "faults.jsonl").read_text().splitlines()]
    assert [f["kind"] for f in faults] == [fault.value, "restart" if fault is ReplicationFault.SLAVE_KILL9
                                           else "resume"] * cycles
    assert all(f["target"] == "broker-a-s1" for f in faults)
    return recorded


def test_a_killed_slave_restarts_catches_up_and_nothing_acknowledged_is_lost(tmp_path: Path) -> None:
    result = _run(tmp_path, ReplicationFault.SLAVE_KILL9, ReplicationMode.SYNC, cycles=2)
    _slave_fault_common(result, ReplicationFault.SLAVE_KILL9, 2)
    # While the slave is gone a SYNC_MASTER's waiting sends time out (FLUSH_SLAVE_TIMEOUT, after 3 s) and new
    # ones are answered SLAVE_NOT_AVAILABLE; a slave back within 3 s releases the waiting ones with SEND_OK (the
    # closed-loop load sends nothing new meanwhile). Whatever came, it is counted under a SendStatus name.
    statuses = {"SEND_OK", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE"}
    assert all(set(c.extra["answers_while_down"]) <= statuses for c in result.cycles)


def test_a_paused_slave_times_sync_sends_out_then_catches_up(tmp_path: Path) -> None:
    result = _run(tmp_path, ReplicationFault.SLAVE_PAUSED, ReplicationMode.SYNC, cycles=1)
    _slave_fault_common(result, ReplicationFault.SLAVE_PAUSED, 1)
    # Paused longer than slaveTimeout (3 s): the sends waiting for it were answered FLUSH_SLAVE_TIMEOUT.
    assert result.cycles[0].extra["answers_while_down"].get("FLUSH_SLAVE_TIMEOUT", 0) > 0
    assert result.summary()["acked_master_only"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("fault", sorted(SLAVE_FAULTS), ids=lambda f: f.value)
def test_rocketmq_slave_faults_catch_up_and_lose_nothing(tmp_path: Path, rocketmq_home: Path,
                                                          fault: ReplicationFault) -> None:
    result = _run(tmp_path, fault, ReplicationMode.SYNC, cycles=1, impl="rocketmq")
    _slave_fault_common(result, fault, 1)


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
