"""The host vm sampler: parsers over captured /proc text, and the sampler thread over real /proc files."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness.records.schema import MetricName
from harness.vm_stats import VM_METRICS, VmSampler, parse_meminfo, parse_vmstat, read_vm_metrics, vm_metrics

# Captured on the lab VM (Linux 6.1), trimmed.
MEMINFO = """\
MemTotal:        8131452 kB
MemFree:          312860 kB
Cached:          5633516 kB
Dirty:             90640 kB
Writeback:          1024 kB
WritebackTmp:          0 kB
HugePages_Total:       0
Hugepagesize:       2048 kB
"""

VMSTAT = """\
nr_free_pages 78215
nr_dirty 22623
nr_writeback 256
nr_dirty_threshold 1162156
allocstall_dma 0
allocstall_dma32 0
allocstall_normal 3457
allocstall_movable 64330
allocstall_device 0
pgmajfault 61915991
"""


def test_meminfo_kb_lines_are_bytes_and_unitless_lines_are_counts() -> None:
    m = parse_meminfo(MEMINFO)
    assert m["Dirty"] == 90640 * 1024
    assert m["Writeback"] == 1024 * 1024
    assert m["HugePages_Total"] == 0
    assert m["MemTotal"] == 8131452 * 1024


def test_meminfo_skips_malformed_lines() -> None:
    assert parse_meminfo("garbage\nDirty: x kB\n:\nWriteback:   12 kB\n") == {"Writeback": 12 * 1024}


def test_vmstat_pairs_and_malformed_lines() -> None:
    v = parse_vmstat(VMSTAT + "broken\nnr_foo 1 2\n")
    assert v["pgmajfault"] == 61915991
    assert v["nr_writeback"] == 256
    assert "broken" not in v and "nr_foo" not in v


def test_metrics_sum_the_per_zone_allocstalls() -> None:
    out = vm_metrics(parse_meminfo(MEMINFO), parse_vmstat(VMSTAT))
    assert out == {
        MetricName.HOST_DIRTY_BYTES: 90640 * 1024.0,
        MetricName.HOST_WRITEBACK_BYTES: 1024 * 1024.0,
        MetricName.VM_NR_DIRTY: 22623.0,
        MetricName.VM_NR_WRITEBACK: 256.0,
        MetricName.VM_PGMAJFAULT: 61915991.0,
        MetricName.VM_ALLOCSTALL: 3457.0 + 64330.0,
    }


def test_metrics_read_the_single_allocstall_of_older_kernels_and_leave_out_what_is_missing() -> None:
    out = vm_metrics({"Dirty": 4096}, {"allocstall": 7})
    assert out == {MetricName.HOST_DIRTY_BYTES: 4096.0, MetricName.VM_ALLOCSTALL: 7.0}


def test_read_this_host() -> None:
    out = read_vm_metrics()
    assert set(out) == set(VM_METRICS)  # a Linux >= 4.10 host has every field
    assert out[MetricName.HOST_DIRTY_BYTES] >= 0


def test_sampler_records_at_its_interval_and_at_start_and_stop(tmp_path: Path) -> None:
    rows: list[tuple[str, float, str, int]] = []
    s = VmSampler(lambda m, v, label, ts: rows.append((m, v, label, ts)), interval_s=0.05).start()
    time.sleep(0.5)
    s.stop()
    dirty_ts = [ts for m, _v, _l, ts in rows if m == MetricName.HOST_DIRTY_BYTES]
    assert s.errors == 0
    assert len(dirty_ts) == s.rounds >= 5  # start + >= 3 ticks + stop even on a loaded machine
    assert dirty_ts == sorted(dirty_ts)
    assert {label for _m, _v, label, _ts in rows} == {""}


def test_sampler_counts_an_unreadable_file_and_goes_on(tmp_path: Path) -> None:
    rows: list[tuple[str, float, str, int]] = []
    calls = iter([OSError("gone"), {MetricName.VM_NR_DIRTY: 1.0}])

    def read() -> dict[MetricName, float]:
        r = next(calls)
        if isinstance(r, OSError):
            raise r
        return r

    s = VmSampler(lambda m, v, label, ts: rows.append((m, v, label, ts)), read=read, clock=lambda: 5)
    s.sample()
    s.sample()
    assert (s.errors, s.rounds, s.last_error) == (1, 1, "gone")
    assert rows == [(MetricName.VM_NR_DIRTY, 1.0, "", 5)]


def test_interval_must_be_positive() -> None:
    with pytest.raises(ValueError):
        VmSampler(lambda *_: None, interval_s=0)
