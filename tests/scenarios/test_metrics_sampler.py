"""The broker metrics sampler: its parsers, host probes, and a real broker sampled through the admin protocol."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from harness.metrics_sampler import (
    BrokerTarget,
    MetricsSampler,
    commitlog_range_residency,
    file_set,
    io_read_bytes,
    page_cache_by_set,
    parse_fincore,
    parse_vmrss,
    resident_bytes,
    rss_bytes,
    runtime_metrics,
    samples_of,
)
from harness.records import MetricName

needs_fincore = pytest.mark.skipif(shutil.which("fincore") is None, reason="fincore (util-linux) not installed")


def test_parse_vmrss():
    assert parse_vmrss("Name:\tpython\nVmRSS:\t  1234 kB\nThreads: 3\n") == 1234 * 1024
    assert parse_vmrss("Name: kthread\n") is None


def test_parse_fincore():
    out = "4096 /s/commitlog/00000000000000000000\n0 /s/index/2025\nfincore: junk\n"
    assert parse_fincore(out) == {"/s/commitlog/00000000000000000000": 4096, "/s/index/2025": 0}


def test_runtime_metrics_uses_rocketmq_keys_and_skips_unknowns():
    table = {"commitLogMaxOffset": "100", "commitLogFlushedOffset": "60", "dispatchBehindBytes": "5",
             "commitLogDiskRatio": "-1", "other": "x"}
    assert runtime_metrics(table) == {MetricName.COMMITLOG_MAX_OFFSET: 100.0,
                                      MetricName.COMMITLOG_FLUSHED_OFFSET: 60.0, MetricName.DISPATCH_LAG_BYTES: 5.0}


def test_file_set():
    root = Path("/s")
    assert file_set(root, root / "consumequeue" / "T" / "0" / "00000000000000000000") == "consumequeue"
    assert file_set(root, root / "config" / "topics.json") is None
    assert file_set(root, Path("/elsewhere/x")) is None


def test_host_probes_of_this_process():
    rss = rss_bytes(os.getpid())
    assert rss is not None and rss > 0
    assert isinstance(io_read_bytes(os.getpid()), int)
    assert rss_bytes(2**22 + 12345) is None


@needs_fincore
def test_page_cache_and_range_residency(tmp_path):
    cl = tmp_path / "commitlog"
    cl.mkdir()
    (tmp_path / "consumequeue" / "T" / "0").mkdir(parents=True)
    (cl / f"{0:020d}").write_bytes(os.urandom(1 << 20))  # just written: in the page cache
    (cl / f"{1 << 20:020d}").write_bytes(os.urandom(1 << 20))
    sets = page_cache_by_set(tmp_path)
    assert sets["commitlog"] == 2 << 20 and sets["consumequeue"] == 0 and sets["index"] == 0
    # The range [512 KiB + 100, 1.5 MiB + 100) spans both files.
    resident, size = commitlog_range_residency(tmp_path, (512 << 10) + 100, (1536 << 10) + 100)
    assert size == 1 << 20 and resident == size
    assert commitlog_range_residency(tmp_path, 4 << 20, 5 << 20) == (0, 0)


def test_range_residency_counts_no_page_outside_the_range(tmp_path):
    # A writer faulting at the end of the range reads around itself: resident pages past the end (and before
    # the start) are not the range's, though fincore counts them for the file.
    cl = tmp_path / "commitlog"
    cl.mkdir()
    path = cl / f"{0:020d}"
    path.write_bytes(os.urandom(8 << 20))
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # clean pages leave the cache
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # the reads below read no more than asked
        os.pread(fd, 1 << 20, 0)  # before the range
        os.pread(fd, 2 << 20, 6 << 20)  # straddles its end
    finally:
        os.close(fd)
    assert resident_bytes(path, 0, 8 << 20) == 3 << 20
    assert commitlog_range_residency(tmp_path, 2 << 20, (7 << 20) + 100) == ((1 << 20) + 100, (5 << 20) + 100)
    assert resident_bytes(path, (1 << 20) - 10, (2 << 20) - 10) == 10
    assert resident_bytes(path, 9 << 20, 10 << 20) == 0


def test_sampler_against_a_broker(topo, driver):
    driver.create_topic("SamplerT", 2)
    for i in range(5):
        driver.send("SamplerT", f"s-{i}", b"x" * 100)
    # The consume queue is built a moment after the send is acknowledged (the dispatch thread): wait for it,
    # so that the samples below see every message as backlog.
    deadline = time.monotonic() + 10
    while driver.backlog("g1", ["SamplerT"]).total < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    rows: list[tuple[str, float, str, int]] = []
    broker = topo.brokers[0]
    counts = iter([(0, 0), (10, 4)])
    s = MetricsSampler(lambda m, v, lab, ts: rows.append((m, v, lab, ts)),
                       [BrokerTarget(broker.name, broker.addr, broker.pid, broker.store_root)],
                       runtime_info=driver.runtime_info,
                       backlog=lambda: {"g1": driver.backlog("g1", ["SamplerT"]).total},
                       counts=lambda: next(counts), interval_s=0.05)
    s.sample()
    s.sample()
    got = samples_of(rows)
    assert s.stats.errors == 0, s.stats.last_error
    info = driver.runtime_info(broker.addr)
    assert got[("commitlog_max_offset", "")][-1] >= float(info["commitLogMaxOffset"]) > 0
    for metric in ("commitlog_flushed_offset", "dispatch_lag_bytes", "disk_used_ratio", "broker_rss_bytes"):
        assert (metric, "") in got, metric
    assert 0 < got[("disk_used_ratio", "")][0] < 1
    assert got[("backlog_msgs", "g1")] == [5.0, 5.0]  # a group that never consumed: everything is backlog
    assert ("send_tps", "") in got and got[("send_tps", "")][0] > 0 and got[("consume_tps", "")][0] > 0
    if shutil.which("fincore"):
        assert got[("page_cache_bytes", "commitlog")][0] > 0
        assert ("page_cache_bytes", "consumequeue") in got and ("page_cache_bytes", "index") in got


def test_sampler_thread_survives_a_failing_source(topo):
    rows: list[tuple[str, float, str, int]] = []
    broker = topo.brokers[0]

    def broken(addr: str) -> dict[str, str]:
        raise OSError("broker gone")

    s = MetricsSampler(lambda m, v, lab, ts: rows.append((m, v, lab, ts)),
                       [BrokerTarget(broker.name, broker.addr, broker.pid, broker.store_root)],
                       runtime_info=broken, interval_s=0.02, page_cache=False).start()
    import time

    time.sleep(0.3)
    s.stop()
    assert s.stats.rounds >= 3 and s.stats.errors >= 3 and "broker gone" in (s.stats.last_error or "")
    assert {m for m, *_ in rows} >= {"broker_rss_bytes", "disk_used_ratio"}  # the other sources still sampled
