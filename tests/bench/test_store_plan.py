"""store_plan: sizes, the plan of a run, the disk space it needs, and the targets its figures are judged by."""

from __future__ import annotations

from reference_broker.bench.store_plan import (
    GiB,
    MiB,
    Plan,
    disk_needed_bytes,
    evaluate_targets,
    median_of,
    parse_size,
    parse_sizes,
    ratio,
    size_label,
)
from reference_broker.store.config import MessageStoreConfig


def test_sizes() -> None:
    assert parse_size("64M") == 64 * MiB
    assert parse_size("1g") == parse_size("1GiB") == parse_size("1GB") == GiB
    assert parse_size("1.5G") == 3 * GiB // 2
    assert parse_sizes("4G, 1G,1024M") == (GiB, 4 * GiB)
    assert [size_label(n) for n in (GiB, 4 * GiB, 64 * MiB, 1536 * MiB, 1_000_001)] == [
        "1G", "4G", "64M", "1536M", "1000001"]


def test_plan_defaults() -> None:
    full, quick = Plan.make(quick=False), Plan.make(quick=True)
    assert full.sizes == (GiB, 4 * GiB) and quick.sizes == (64 * MiB, 128 * MiB)
    assert full.many_queues == quick.many_queues == 10_000
    assert Plan.make(quick=True, scale=0.01).async_messages == 500


def test_targets_use_the_queue_count_and_allow_missing_figures() -> None:
    r = {"append_async_msgs_per_s": 160_000.0, "sync64_vs_async_ratio": 0.4, "queues_10000_vs_1_ratio": None,
         "recovery_abnormal_checkpoint_s": 0.5, "recovery_full_scan_bytes_per_s": 350e6}
    t = evaluate_targets(r)
    assert {k: v["met"] for k, v in t.items()} == {
        "append_async": True, "sync64_vs_async": False, "queues_10000_vs_1": None,
        "recovery_abnormal_checkpoint": True, "recovery_full_scan": True}


def test_disk_needed_is_the_largest_phase_plus_a_margin() -> None:
    plan = Plan.make(quick=True, sizes=(64 * MiB,), fio=False, many_queues=2)
    fs = MessageStoreConfig().mapped_file_size_commit_log
    # the recovery phase reserves whole commit-log files for the log and one more, then the index
    assert disk_needed_bytes(plan) >= 2 * fs + 256 * MiB
    bigger = Plan.make(quick=True, sizes=(64 * MiB, 3 * fs), fio=False, many_queues=2)
    assert disk_needed_bytes(bigger) - disk_needed_bytes(plan) == 2 * fs


def test_median_of_keeps_one_samples_fields_together() -> None:
    samples = [{"msgs_per_s": 3.0, "ok": 30}, {"msgs_per_s": 1.0, "ok": 10}, {"msgs_per_s": 2.0, "ok": 20},
               {"msgs_per_s": 4.0, "ok": 40}]
    assert median_of(samples, "msgs_per_s") == {"msgs_per_s": 2.0, "ok": 20}  # the lower median of four
    assert ratio(1.0, 4.0) == 0.25 and ratio(None, 4.0) is None and ratio(1.0, 0.0) is None
