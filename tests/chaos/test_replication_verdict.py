"""chaos/replication_verdict.py: what each replication mode allows the slave to lack after its master is gone."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from chaos.replication_verdict import ReplicationMode, judge
from reference_broker.client import SendStatus


@dataclass(frozen=True)
class Ack:
    commit_log_offset: int
    status: SendStatus = SendStatus.SEND_OK


@dataclass(frozen=True)
class Check:
    lost: int = 0
    lost_promised: int = 0
    acked_master_only: int = 0
    unexpected: int = 0


ACKS = {"a": Ack(0), "b": Ack(100), "c": Ack(200, SendStatus.FLUSH_SLAVE_TIMEOUT),
        "d": Ack(300, SendStatus.SLAVE_NOT_AVAILABLE)}


def test_parse_modes() -> None:
    assert [ReplicationMode.parse(t) for t in ("sync", "ASYNC", "SYNC_MASTER")] == [
        ReplicationMode.SYNC, ReplicationMode.ASYNC, ReplicationMode.SYNC]
    with pytest.raises(ValueError):
        ReplicationMode.parse("slave")


def test_sync_master_may_lack_only_what_it_acknowledged_without_a_slave() -> None:
    v = judge(ReplicationMode.SYNC, Check(), ACKS, {"a", "b"}, slave_end=200, lag_bytes=50, unreplicated_bytes=200)
    assert v.ok, v.violations
    assert (v.absent, v.absent_promised, v.absent_master_only, v.lost_share) == (2, 0, 2, 0.5)


def test_sync_master_lacking_a_send_ok_fails_and_names_it() -> None:
    v = judge(ReplicationMode.SYNC, Check(lost=1, lost_promised=1), ACKS, {"a", "c", "d"}, slave_end=100,
              lag_bytes=0, unreplicated_bytes=0)
    assert not v.ok
    assert v.absent_promised == 1 and v.examples["absent_promised"] == ["b"]
    assert any("never delivered" in x for x in v.violations)
    assert any("not on the slave" in x for x in v.violations)


def test_async_master_may_lose_a_send_ok_beyond_the_slave_end() -> None:
    v = judge(ReplicationMode.ASYNC, Check(lost=1, lost_promised=1), {"a": Ack(0), "b": Ack(100)}, {"a"},
              slave_end=100, lag_bytes=120, unreplicated_bytes=100)
    assert v.ok, v.violations
    assert (v.absent, v.absent_promised, v.lost_share, v.lag_bytes) == (1, 1, 0.5, 120)


def test_a_key_absent_below_the_slave_end_fails_either_mode() -> None:
    for mode in ReplicationMode:
        v = judge(mode, Check(), {"a": Ack(0), "b": Ack(100)}, {"b"}, slave_end=150, lag_bytes=0,
                  unreplicated_bytes=0)
        assert not v.ok and v.absent_below_slave_end == 1 and v.examples["absent_below_slave_end"] == ["a"]


def test_an_incomplete_drain_unexpected_keys_corruption_and_errors_fail() -> None:
    v = judge(ReplicationMode.ASYNC, Check(unexpected=2), {}, set(), slave_end=0, lag_bytes=-1,
              unreplicated_bytes=-1, corrupted=1, drain_complete=False, drain_problems=["stuck"],
              cycle_errors=["cycle 0: no restart"], error="boom")
    assert not v.ok and len(v.violations) == 5
    assert judge(ReplicationMode.SYNC, None, {}, set(), 0, -1, -1).violations == ["no check result"]


def test_with_the_master_alive_every_acknowledged_key_must_be_drained_whatever_its_answer() -> None:
    # slave_kill9 / slave_paused: the drain reads the master, which stored c and d too (FLUSH_SLAVE_TIMEOUT and
    # SLAVE_NOT_AVAILABLE still mean "stored on the master").
    v = judge(ReplicationMode.SYNC, Check(), ACKS, {"a", "b", "c", "d"}, slave_end=400, lag_bytes=0,
              unreplicated_bytes=0, master_alive=True)
    assert v.ok, v.violations
    v = judge(ReplicationMode.ASYNC, Check(), ACKS, {"a", "b", "c"}, slave_end=400, lag_bytes=0,
              unreplicated_bytes=0, master_alive=True)
    assert not v.ok and any("absent from the master" in s and "d" in s for s in v.violations)


def test_loss_after_diverged_logs_is_a_finding_but_structural_failures_stay_violations() -> None:
    # b (SEND_OK) is missing below the slave's end: a violation normally, a finding once a power-lost master
    # recovered behind its slave (the logs diverged there).
    plain = judge(ReplicationMode.SYNC, Check(lost=1, lost_promised=1), ACKS, {"a", "c", "d"}, slave_end=400,
                  lag_bytes=0, unreplicated_bytes=0)
    assert not plain.ok and plain.findings == []
    diverged = judge(ReplicationMode.SYNC, Check(lost=1, lost_promised=1), ACKS, {"a", "c", "d"}, slave_end=400,
                     lag_bytes=0, unreplicated_bytes=0, diverged=1)
    assert diverged.ok and diverged.violations == [] and diverged.diverged == 1
    assert "diverged" in diverged.findings[0] and len(diverged.findings) == len(plain.violations) + 1
    broken = judge(ReplicationMode.SYNC, Check(), ACKS, {"a", "b", "c", "d"}, slave_end=400, lag_bytes=0,
                   unreplicated_bytes=0, corrupted=2, diverged=1)
    assert not broken.ok and any("corrupted" in s for s in broken.violations)
