"""plan_offset_sync: the master's offsets over the slave's (4.9.8's putAll), except offsets clients committed to
the slave that the master holds less of (#1094); and the offset manager remembering a slave's commits."""

from __future__ import annotations

from reference_broker.broker.consumer_offset_manager import ConsumerOffsetManager
from reference_broker.broker.slave_synchronize import plan_offset_sync

K = "T@G"


def test_without_slave_commits_the_master_wins_per_topic_group_as_putall():
    local = {K: {0: 9, 1: 4}, "Other@G": {0: 3}}
    master = {K: {0: 5}}
    plan = plan_offset_sync(local, master, {})
    # putAll replaces the whole per-topic@group map; keys only the slave has stay.
    assert plan.table == {K: {0: 5}, "Other@G": {0: 3}}
    assert plan.push == {} and plan.settled == ()


def test_a_slave_commit_ahead_of_the_master_is_kept_and_sent():
    plan = plan_offset_sync({K: {0: 12}}, {K: {0: 5, 1: 7}}, {(K, 0): 12})
    assert plan.table == {K: {0: 12, 1: 7}}
    assert plan.push == {(K, 0): 12}


def test_a_slave_commit_for_a_group_the_master_never_saw_is_sent():
    plan = plan_offset_sync({K: {2: 3}}, {}, {(K, 2): 3})
    assert plan.table == {K: {2: 3}} and plan.push == {(K, 2): 3}


def test_a_slave_commit_the_master_holds_or_passed_is_settled_and_the_master_wins():
    plan = plan_offset_sync({K: {0: 12}}, {K: {0: 15}}, {(K, 0): 12})
    assert plan.table == {K: {0: 15}}
    assert plan.push == {} and plan.settled == ((K, 0),)


def test_a_reset_on_the_master_reaches_the_slave_when_no_client_committed_there():
    plan = plan_offset_sync({K: {0: 40}}, {K: {0: 0}}, {})
    assert plan.table == {K: {0: 0}}


def test_the_offset_manager_remembers_commits_only_when_tracking(tmp_path):
    m = ConsumerOffsetManager(tmp_path)
    m.commit_offset("c", "G", "T", 0, 3)
    assert m.slave_commits == {}
    m.track_slave_commits = True
    m.commit_offset("c", "G", "T", 0, 4)
    m.commit_offset("c", "G", "T", 1, 2)
    assert m.slave_commits == {(K, 0): 4, (K, 1): 2}
