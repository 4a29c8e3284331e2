"""The replication experiment's partition faults end to end (chaos/replication.py with
chaos/replication_partition.py): a master and its slave on the lab network under load, cut (master <-> slave, or
clients <-> master) and healed; the topic read back from the master holds every acknowledged key, the slave has
caught up, and the fault lines carry the cut and heal times, the lag and the answers heard while cut. Without
root the cell is skipped with the reason, never passed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chaos import netns
from chaos import replication as replication_mod
from chaos.leftovers import Ledger
from chaos.load import LoadSpec
from chaos.replication import ReplicationFault, ReplicationResult, ReplicationSpec, run_replication
from chaos.replication_matrix import format_table, summary_rows
from chaos.replication_partition import SEND_TIMEOUT_S, partition_load
from chaos.replication_verdict import ReplicationMode
from harness.records import validate_run

PARTITIONS = [f for f in ReplicationFault if f.is_partition]


def test_only_a_master_slave_cut_waits_longer_than_slave_timeout() -> None:
    default = LoadSpec()
    assert default.send_timeout_s < SEND_TIMEOUT_S
    assert partition_load(default, "partition_master_slave").send_timeout_s == SEND_TIMEOUT_S
    assert partition_load(default, "partition_clients_master") is default
    assert partition_load(default, "master_kill9") is default


def _spec(tmp_path: Path, fault: ReplicationFault, mode: ReplicationMode, impl: str = "reference",
          home: Path | None = None) -> ReplicationSpec:
    return ReplicationSpec(fault=fault, mode=mode, cycles=1, runs_dir=tmp_path / "runs", work_dir=tmp_path / "work",
                           seed=7, gap_s=(0.3, 0.5), load=LoadSpec(in_flight=16), broker_impl=impl,  # type: ignore[arg-type]
                           rocketmq_home=home)


def test_without_the_lab_a_partition_cell_is_skipped_with_the_reason(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns, "unavailable", lambda: "the lab network needs root")
    result = run_replication(_spec(tmp_path, ReplicationFault.PARTITION_MASTER_SLAVE, ReplicationMode.SYNC),
                             ledger=Ledger(tmp_path / "state.json"))
    assert result.skipped == "the lab network needs root" and result.run_dir is None
    row = summary_rows([result])[0]
    assert row["verdict"] == "skipped"
    assert "skipped: the lab network needs root" in format_table([row])
    assert replication_mod.ReplicationFault.MASTER_KILL9.is_partition is False


def _run(tmp_path: Path, fault: ReplicationFault, mode: ReplicationMode, impl: str = "reference",
         home: Path | None = None) -> ReplicationResult:
    if (reason := netns.unavailable()) is not None:
        pytest.skip(f"lab network: {reason}")
    ledger = Ledger(tmp_path / "chaos-state.json")
    result = run_replication(_spec(tmp_path, fault, mode, impl, home), ledger=ledger)
    assert result.skipped is None
    assert ledger.entries() == [], "the experiment left processes, namespaces or links behind"
    assert result.run_dir is not None and validate_run(result.run_dir) == []
    return result


def _check_cell(result: ReplicationResult, fault: ReplicationFault) -> tuple[dict[str, Any], dict[str, int]]:
    """The checks every partition cell passes; the cut's fault params and the answers heard while cut."""
    assert result.run_dir is not None
    row = result.summary()
    assert result.ok, row["violations"]
    assert result.drain is not None and result.drain.complete and result.drain.messages > 0
    assert row["acknowledged"] and row["absent"] == 0 and row["unreplicated_bytes"] == 0
    assert row["stored_twice"] is not None and row["duplicated"] is not None
    faults = [json.loads(line) for line in (result.run_dir / "faults.jsonl").read_text().splitlines()]
    cut, heal = faults
    assert (cut["kind"], heal["kind"]) == (fault.value, "heal")
    p = cut["params"]
    assert p["cut_ns"] == cut["ts_ns"] < p["healed_ns"] == heal["ts_ns"]
    assert p["cut_s"] >= 4.5 and p["lag_bytes"] >= 0 and p["slave_caught_up_s"] is not None
    recorded = json.loads((result.run_dir / "chaos.json").read_text())
    assert recorded["partition"]["master_end"] > 0 and len(recorded["partition"]["windows"]) == 1
    assert recorded["slave"]["store_check"]["outcome"] == "clean"
    meta = json.loads((result.run_dir / "meta.json").read_text())
    assert meta["broker"]["brokerIP1"].startswith("198.1")  # the group ran on the lab network
    answers = p["answers"]
    assert isinstance(answers, dict)
    return p, answers


@pytest.mark.e2e
@pytest.mark.root
def test_sync_master_cut_from_its_slave_answers_flush_slave_timeout(tmp_path: Path) -> None:
    fault = ReplicationFault.PARTITION_MASTER_SLAVE
    params, answers = _check_cell(_run(tmp_path, fault, ReplicationMode.SYNC), fault)
    assert answers.get("FLUSH_SLAVE_TIMEOUT", 0) + answers.get("SLAVE_NOT_AVAILABLE", 0) > 0
    assert params["lag_bytes_at_heal"] > 0  # the master went on storing while its slave was cut off


@pytest.mark.e2e
@pytest.mark.root
def test_clients_cut_from_the_master_lose_no_acknowledged_message(tmp_path: Path) -> None:
    fault = ReplicationFault.PARTITION_CLIENTS_MASTER
    _, answers = _check_cell(_run(tmp_path, fault, ReplicationMode.ASYNC), fault)
    # Nothing reaches the master while cut: its answers stop (at most those already on their way), the
    # producer's sends time out instead.
    assert sum(n for k, n in answers.items() if not k.startswith("error")) <= 16
    assert sum(n for k, n in answers.items() if k.startswith("error")) > 0


@pytest.mark.e2e
@pytest.mark.root
@pytest.mark.slow
@pytest.mark.parametrize("fault", PARTITIONS, ids=lambda f: f.value)
def test_partition_cells_on_rocketmq(tmp_path: Path, fault: ReplicationFault, rocketmq_home: Path) -> None:
    result = _run(tmp_path, fault, ReplicationMode.SYNC, "rocketmq", rocketmq_home)
    _check_cell(result, fault)
