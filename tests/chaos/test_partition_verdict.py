"""The partition faults' verdict (chaos/partition_verdict.py), pure: no acknowledged key may be missing from the
master after the heal, the slave must have caught up, a SYNC_MASTER cut from its slave must not answer SEND_OK
for what it wrote during the cut; the answers heard during a cut are counted by kind."""

from __future__ import annotations

from dataclasses import dataclass

from chaos.partition_verdict import CutWindow, answers_during, judge_partition, promised_while_cut
from chaos.replication_verdict import ReplicationMode
from reference_broker.client import SendStatus
from tests.chaos.test_replication_verdict import Check as C


@dataclass(frozen=True)
class A:
    commit_log_offset: int
    end_ns: int
    status: SendStatus = SendStatus.SEND_OK



W = CutWindow(cut_ns=1_000, healed_ns=6_000, master_end=500, lag_bytes=40)


def test_answers_during_a_cut_are_counted_by_kind() -> None:
    acks = [A(0, 999), A(100, 1_000, SendStatus.FLUSH_SLAVE_TIMEOUT), A(200, 4_000, SendStatus.FLUSH_SLAVE_TIMEOUT),
            A(300, 6_000, SendStatus.SLAVE_NOT_AVAILABLE), A(400, 6_001)]
    errors = [(2_000, 10, "timeout"), (7_000, 1, "later")]
    assert answers_during(acks, errors, W) == {"FLUSH_SLAVE_TIMEOUT": 2, "SLAVE_NOT_AVAILABLE": 1, "error 10": 1}


def test_send_ok_for_a_record_written_during_the_cut_is_caught() -> None:
    acks = {"before": A(499, 2_000), "during": A(500, 5_999), "after_heal": A(600, 6_000),
            "timeout": A(700, 5_000, SendStatus.FLUSH_SLAVE_TIMEOUT)}
    assert promised_while_cut(acks, [W]) == ["during"]
    assert promised_while_cut(acks, [CutWindow(1_000, 6_000)]) == []  # master's end unknown: nothing judged


def _judge(**kw: object) -> list[str]:
    args: dict[str, object] = {"mode": ReplicationMode.SYNC, "check": C(), "acks": {"k1": A(0, 1), "k2": A(100, 2)},
                               "drained": {"k1", "k2"}, "master_end": 900, "slave_end": 900, "lag_bytes": 40}
    args.update(kw)
    return judge_partition(**args).violations  # type: ignore[arg-type]


def test_a_clean_partition_passes_with_its_lag() -> None:
    v = judge_partition(ReplicationMode.ASYNC, C(), {"k1": A(0, 1)}, {"k1"}, 900, 900, 40)
    assert v.ok and v.violations == [] and v.lag_bytes == 40 and v.unreplicated_bytes == 0 and v.absent == 0


def test_what_fails_a_partition() -> None:
    assert any("not in the master's log" in x for x in _judge(drained={"k1"}))
    master_only = judge_partition(ReplicationMode.SYNC, C(), {"k": A(0, 1, SendStatus.FLUSH_SLAVE_TIMEOUT)},
                                  set(), 900, 900, 0)
    assert not master_only.ok and master_only.absent_master_only == 1  # the master stores it in every case
    assert any("did not catch up" in x for x in _judge(slave_end=800))
    assert any("unknown" in x for x in _judge(master_end=-1))
    assert any("answered SEND_OK" in x for x in _judge(promised_cut=["k2"]))
    assert _judge(mode=ReplicationMode.ASYNC, promised_cut=["k2"]) == []  # an ASYNC_MASTER promises no slave
    assert any("never sent" in x for x in _judge(check=C(unexpected=1)))
    assert any("no check" in x for x in _judge(check=None))
    assert any("drain" in x for x in _judge(drain_complete=False, drain_problems=["stuck"]))
    assert any("corrupted" in x for x in _judge(corrupted=1))
    assert any("cycle 0" in x for x in _judge(cycle_errors=["cycle 0: no send acknowledged"]))


def test_keys_the_stores_cleaning_deleted_are_counted_apart() -> None:
    acks = {"old": A(100, 1), "new": A(5_000, 2), "gone": A(6_000, 3)}
    v = judge_partition(ReplicationMode.ASYNC, C(), acks, {"new"}, 9_000, 9_000, 0, min_offset=1_000)
    assert v.cleaned == 1 and v.examples["cleaned"] == ["old"]
    assert v.absent == 1 and not v.ok  # "gone" lay above the log's start: lost

