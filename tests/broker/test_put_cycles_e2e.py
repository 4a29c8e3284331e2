"""A real broker frees what each put makes by reference counting: under SYNC_FLUSH, whose puts wait for the
group commit on another thread, the cyclic garbage collector finds (almost) nothing however many messages are
sent. A reference cycle per message — the group commit's request keeping its callbacks, which hold the put
that holds the request — showed up as thousands of collected objects per thousand sends and 12 % of the event
loop's CPU (BENCHMARKS.md, "Reference cycles under SYNC_FLUSH")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.launcher import Topology
from reference_broker.tools import admin

pytestmark = pytest.mark.e2e

SENDS = 3000


def _gc(addr: str) -> tuple[int, int]:
    info = admin.broker_status(addr)
    return int(info["gcCollections"]), int(info["gcCollected"])


@pytest.mark.parametrize("flush", ["SYNC_FLUSH", "ASYNC_FLUSH"])
def test_sends_leave_nothing_for_the_cyclic_collector(tmp_path: Path, flush: str) -> None:
    with Topology(tmp_path / "topo", broker_conf={"flushDiskType": flush}) as topo:
        addr = topo.brokers[0].addr
        collections_before, collected_before = _gc(addr)
        out = subprocess.run(
            [sys.executable, "-m", "reference_broker", "bench", "producer", "-n", topo.namesrv_addr, "--lean",
             "-y", "--in-flight", "32", "-q", str(SENDS), "-s", "256", "-t", "GcCycles", "--json"],
            capture_output=True, text=True, timeout=180)
        assert out.returncode == 0, out.stderr[-2000:]
        collections_after, collected_after = _gc(addr)
    # The counters are live: starting the broker (a net growth of objects) made the collector run. During the
    # sends it runs only if objects pile up: its young generation counts allocations net of those freed, so a
    # put path that frees everything by reference counting may not start it at all, while a cycle per message
    # (~17 objects each) would start it every few dozen sends and have it find them.
    assert collections_before > 0
    assert collected_after - collected_before < SENDS // 10, (collected_before, collected_after,
                                                              collections_before, collections_after)
