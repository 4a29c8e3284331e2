"""The backlog test's thresholds and verdicts, and the queues scenario's phases (pure parts)."""

from harness.scaling import split_queues
from scenarios.backlog_control import drain_threshold, read_source
from scenarios.options import Settings
from scenarios.queues_control import queue_phases


def test_drain_threshold_follows_omb_for_large_backlogs():
    # OMB: max(1000, (1 - ratio) * capacity).
    assert drain_threshold(1_000_000, 1.0) == 1000
    assert drain_threshold(1_000_000, 0.9) == 100_000


def test_drain_threshold_floor_scales_down_for_small_backlogs():
    assert drain_threshold(5000, 1.0) == 50
    assert drain_threshold(10, 1.0) == 1


def test_read_source():
    assert read_source(0, 10 << 20).startswith("page cache")
    assert read_source(9 << 20, 10 << 20).startswith("disk")
    assert read_source(None, 10 << 20).startswith("unknown")


def test_split_queues_even_and_bounded():
    assert split_queues(1, 1000) == [1]
    assert split_queues(10000, 1000) == [1000] * 10
    assert split_queues(2500, 1000) == [834, 833, 833]
    assert sum(split_queues(10001, 1024)) == 10001 and max(split_queues(10001, 1024)) <= 1024


def test_queue_phases():
    phases = queue_phases(Settings(queue_counts=(1, 2500)), "abc123", "queues")
    assert [p.label for p in phases] == ["q=1", "q=2500"]
    assert phases[1].queues == 2500 and len(phases[1].topics) == 3
    assert phases[1].topics[0][0] == "lab_queues_abc123_n2500_t0"
