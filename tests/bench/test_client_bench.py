"""``bench producer`` / ``bench consumer`` against a real topology: they run, report, and count right."""

from __future__ import annotations

import json
import subprocess
import sys
from array import array

import pytest

from harness.launcher import Topology
from reference_broker.bench.client_bench import merge_consumer_summaries, merge_producer_summaries
from reference_broker.bench.producer_stats import percentile


def test_percentile_is_nearest_rank():
    s = array("I", range(1, 1001))  # 1..1000 us
    assert percentile(s, 50) == 0.5
    assert percentile(s, 99) == 0.99
    assert percentile(s, 99.9) == 0.999
    assert percentile(array("I"), 50) == 0.0


def test_merge_sums_counts_and_merges_samples_exactly():
    a = {"sent_ok_requests": 2, "messages": 2, "send_failed": 1, "response_failed": 0, "elapsed_s": 2.0,
         "rt_total_us": 3000, "rt_max_us": 2000, "client_cpu_s": 0.001, "samples_us": array("I", [1000, 2000])}
    b = {**a, "send_failed": 0, "response_failed": 2, "elapsed_s": 1.0, "rt_max_us": 5000,
         "samples_us": array("I", [3000, 5000]).tobytes()}
    m = merge_producer_summaries([a, b], 1)
    assert (m["messages"], m["send_failed"], m["response_failed"]) == (4, 1, 2)
    assert m["send_tps"] == 2.0  # 4 messages over the longest elapsed time
    assert m["max_rt_ms"] == 5.0 and m["p50_ms"] == 2.0 and m["p99_ms"] == 5.0
    assert m["client_cpu_us_per_msg"] == pytest.approx(500.0)


def test_consumer_merge_sums_counts_over_the_longest_run_and_merges_samples():
    a = {"n": 3, "b2c_total": 30, "s2c_total": 15, "b2c_max": 20, "s2c_max": 9, "elapsed_s": 2.0, "cpu_s": 0.003,
         "active_s": 0.5, "e2e_samples_us": array("I", [1000, 2000, 3000])}
    b = {"n": 1, "b2c_total": 10, "s2c_total": 5, "b2c_max": 10, "s2c_max": 12, "elapsed_s": 1.0, "cpu_s": 0.001,
         "active_s": 0.8, "e2e_samples_us": array("I", [9000]).tobytes()}  # as a child process sends it
    m = merge_consumer_summaries([a, b])
    assert (m["consumed"], m["processes"], m["tps"]) == (4, 2, 2.0)
    # The last delivery came 0.8 s in: a drained backlog's rate is 4 / 0.8, not 4 over the whole run.
    assert (m["active_s"], m["active_tps"]) == (0.8, 5.0)
    assert (m["avg_b2c_ms"], m["avg_s2c_ms"], m["max_b2c_ms"], m["max_s2c_ms"]) == (10.0, 5.0, 20, 12)
    assert (m["e2e_p50_ms"], m["e2e_p99_ms"]) == (2.0, 9.0)
    assert m["client_cpu_us_per_msg"] == pytest.approx(1000.0)


@pytest.mark.e2e
def test_producer_then_consumer(tmp_path):
    with Topology(tmp_path / "t") as topo:
        p = subprocess.run([sys.executable, "-m", "reference_broker", "bench", "producer", "-n", topo.namesrv_addr,
                            "-t", "BenchT", "-w", "2", "-s", "100", "-q", "200", "-d", "30", "-i", "0.5", "-k",
                            "--json"], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        s = json.loads(p.stdout)
        assert s["messages"] >= 200 and s["send_failed"] == 0 and s["response_failed"] == 0
        assert s["p50_ms"] > 0 and s["client_cpu_us_per_msg"] > 0
        assert "Send TPS:" in p.stderr and "Response Failed:" in p.stderr
        p = subprocess.run([sys.executable, "-m", "reference_broker", "bench", "producer", "-n", topo.namesrv_addr,
                            "-t", "BenchT", "-b", "8", "-q", "80", "-d", "30", "-p", "2", "--json"],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        s = json.loads(p.stdout)
        assert s["processes"] == 2 and s["messages"] >= 160 and s["batch_size"] == 8
        c = subprocess.run([sys.executable, "-m", "reference_broker", "bench", "consumer", "-n", topo.namesrv_addr,
                            "-t", "BenchT", "--from-first", "-d", "6", "-i", "1", "--json"],
                           capture_output=True, text=True, timeout=120)
        assert c.returncode == 0, c.stderr
        cs = json.loads(c.stdout)
        assert cs["consumed"] >= 360, cs
        assert "AVG(B2C) RT(ms)" in c.stderr
        # Two consumer processes of a new group share the queues and, together, consume the whole backlog.
        c = subprocess.run([sys.executable, "-m", "reference_broker", "bench", "consumer", "-n", topo.namesrv_addr,
                            "-t", "BenchT", "-g", "bench_two", "--from-first", "-p", "2", "-d", "8", "-i", "1",
                            "--json"], capture_output=True, text=True, timeout=120)
        assert c.returncode == 0, c.stderr
        cs = json.loads(c.stdout)
        assert cs["processes"] == 2 and cs["consumed"] >= 360, cs
