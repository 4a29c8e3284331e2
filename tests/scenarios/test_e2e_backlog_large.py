"""End to end, slow: the backlog scenario with the broker in a real memory cgroup smaller than the backlog
(``--memory-max``; tox -e backlog-large at a small scale), head and tail readers at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.memory_cgroup import Skip, detect
from harness.records import load_check, load_meta, load_metrics
from tests.scenarios.test_e2e import assert_good_run, run_locust

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.root]

BACKLOG = 384 << 20
LIMIT = 128 << 20


def test_a_backlog_three_times_the_brokers_memory_cgroup_drains_from_disk_with_nothing_lost(tmp_path: Path) -> None:
    plan = detect(LIMIT)
    if isinstance(plan, Skip):
        pytest.skip(plan.reason)
    proc, run = run_locust("backlog", tmp_path, "-t", "300s", "--stop-after-drain", "--backlog-bytes", "384MiB",
                           "--memory-max", "128MiB", "--message-size", "16384", "--rate", "600", "--drain-rate",
                           "100", "--warmup", "2", timeout=600)
    assert_good_run(proc, run, "backlog")
    check, results = load_check(run), load_meta(run)["results"]
    b = results["backlog"]
    assert b["memory_max"] == LIMIT and b["backlog_bytes"] >= BACKLOG > LIMIT, b
    assert b.get("note") is None and b["drain_s"] > 0, b

    # The broker's page cache stayed under the limit in every stage while it held 3x the limit of backlog.
    cg = b["memory_cgroup"]
    assert cg["limit_bytes"] == LIMIT and cg["oom_kills"] == 0 and cg["sample_errors"] == 0, cg
    assert set(cg["stages"]) >= {"warmup", "build", "drain"}
    for stage, d in cg["stages"].items():
        assert 0 < d["cache_max_bytes"] <= LIMIT and d["usage_max_bytes"] <= LIMIT, (stage, d)
    assert cg["peak_bytes"] <= LIMIT
    assert b["read_from"].startswith("disk"), b["read_from"]  # the drain could not have come from the cache
    assert cg["stages"]["drain"]["broker_major_faults"] is not None
    assert not Path(cg["path"]).exists()  # the group is gone

    # The tail group (the run's own, paused for the build) consumed every acknowledged message exactly once.
    assert check["lost"] == 0 and check["duplicated"] == 0 and check["unexpected"] == 0, check
    assert results["load"]["received"] == results["load"]["ok"] == check["acknowledged"]
    assert results["final_read"]["wanted"] == 0, results["final_read"]  # nothing left for the read-back
    assert b["tail"]["group"] != "" and b["tail"]["msgs_per_s"] > 0

    # The head readers' latency was recorded, per stage and per second.
    head = b["head"]
    assert head["drain"]["n"] > 0 and head["drain"]["p99_ms"] is not None, head
    assert head["build"]["n"] > 0
    assert set(b["head_backlog_msgs"]) >= {"build", "drain"}
    metrics = load_metrics(run)
    names = set(metrics["metric"].to_pylist())
    assert {"head_latency_ms", "head_msgs", "cgroup_cache_bytes", "cgroup_usage_bytes",
            "broker_major_faults"} <= names, names
    cache = [v for m, v in zip(metrics["metric"].to_pylist(), metrics["value"].to_pylist(), strict=True)
             if m == "cgroup_cache_bytes"]
    assert cache and max(cache) <= LIMIT
