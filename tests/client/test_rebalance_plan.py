"""The pure part of a rebalance: which queues to drop and to add."""

from __future__ import annotations

from reference_broker.client.message import MessageQueue
from reference_broker.client.rebalance import plan


def q(topic: str, i: int) -> MessageQueue:
    return MessageQueue(topic, "b", i)


def test_drop_unassigned_add_new_and_leave_other_topics_alone() -> None:
    held = [q("T", 0), q("T", 1), q("U", 0)]
    p = plan("T", [q("T", 1), q("T", 2)], held)
    assert p.drop == [q("T", 0)]
    assert p.add == [q("T", 2)]


def test_idle_queue_still_assigned_is_dropped_and_started_afresh() -> None:
    p = plan("T", [q("T", 0), q("T", 1)], [q("T", 0), q("T", 1)], expired=[q("T", 1)])
    assert p.drop == [q("T", 1)] and p.add == [q("T", 1)]


def test_nothing_to_do_when_assignment_is_unchanged() -> None:
    p = plan("T", [q("T", 0)], [q("T", 0)])
    assert p.drop == [] and p.add == []
