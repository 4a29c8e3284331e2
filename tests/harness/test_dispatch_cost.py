"""harness/dispatch_cost.py, harness/thread_cpu.py and harness/no_dispatch_broker.py: the dispatch thread's CPU read
per thread from /proc (the store's service threads carry their names in the kernel), the broker with no dispatch
as the control, and the ceiling of moving dispatch out of the broker's interpreter (docs/dispatch.md)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from harness import broker_bench, dispatch_cost, thread_cpu
from harness.broker_bench import run_producer
from harness.launcher import Topology
from harness.no_dispatch_broker import launcher
from reference_broker.store.service_thread import ServiceThread


class _Burner(ServiceThread):
    """Burns ``cpu_s`` of CPU, then idles until stopped (a thread that ended would no longer be in /proc)."""

    def __init__(self, name: str, cpu_s: float) -> None:
        super().__init__(name)
        self.cpu_s = cpu_s
        self.burnt = threading.Event()

    def run(self) -> None:
        start = time.thread_time()
        while time.thread_time() - start < self.cpu_s:
            sum(range(1000))
        self.burnt.set()
        self.sleep(60)


def test_a_service_thread_carries_its_name_in_the_kernel_cut_to_15_bytes() -> None:
    t = _Burner("ReputMessageService", 0.0)
    t.start()
    try:
        assert t.burnt.wait(10)
        assert t._thread is not None and t._thread.native_id is not None
        comm = Path(f"/proc/self/task/{t._thread.native_id}/comm").read_text().strip()
        assert comm == "ReputMessageSer" == thread_cpu.DISPATCH
    finally:
        t.shutdown()


def test_the_cpu_a_thread_burns_is_counted_under_its_name() -> None:
    pid = os.getpid()
    before = thread_cpu.sample(pid)
    t = _Burner("BurnerService", 0.3)
    t.start()
    try:
        assert t.burnt.wait(30)
        used = thread_cpu.delta_by_name(before, thread_cpu.sample(pid))
    finally:
        t.shutdown()
    assert used["BurnerService"] >= 0.25  # clock ticks: 10 ms resolution
    assert thread_cpu.MAIN in used  # the test's own thread, whose id is the process's
    assert all(v >= 0 for v in used.values())


def _row(tps: float, total: float, dispatch: float, main: float) -> dict[str, Any]:
    return dispatch_cost._figures({"send_tps": tps, "broker_cpu_us_per_msg": total, "broker_thread_cpu_us_per_msg": {
        thread_cpu.MAIN: main, thread_cpu.DISPATCH: dispatch, "other": total - main - dispatch}})


def test_the_ceiling_is_paired_by_round_and_the_verdict_uses_the_larger_bound() -> None:
    broker = [_row(20_000, 40.0, 2.0, 36.0), _row(10_000, 50.0, 2.5, 45.0), _row(20_000, 40.0, 2.0, 36.0)]
    control = [_row(21_000, 38.0, 0.0, 36.0), _row(10_500, 47.5, 0.0, 45.0), _row(21_000, 38.0, 0.0, 36.0)]
    s = dispatch_cost.summarize(broker, control)
    assert s["dispatch_share"] == pytest.approx(0.05)
    assert s["dispatch_wall_share"] == pytest.approx(0.04)  # 2 µs × 20,000/s of the broker's wall-clock time
    assert s["control_cpu_gain"] == pytest.approx(0.05)  # the slow round 2 is 5 % too: pairing keeps it so
    assert s["control_tps_gain"] == pytest.approx(0.05)
    assert s["can_pay"] is False
    s = dispatch_cost.summarize(broker, [_row(25_000, 34.0, 0.0, 34.0)] * 3)
    assert s["control_cpu_gain"] >= 0.15 and s["can_pay"] is True  # the lock hand-offs counted too
    text = dispatch_cost.format_result({"plan": {"rounds": 3, "seconds": 1.0, "size": 1024, "processes": 2},
                                        "summary": {"single_64": s, "batch_32": s}})
    assert "verdict: the lever can pay" in text and "dispatch thread (ReputMessageService)" in text


def test_broker_bench_reports_the_dispatch_threads_share() -> None:
    threads = {thread_cpu.MAIN: 30.0, thread_cpu.DISPATCH: 4.0, "other": 6.0}
    rows = broker_bench._dispatch_rows({"single_64_lean": {"broker_thread_cpu_us_per_msg": threads},
                                        "batch_32_lean": {"broker_thread_cpu_us_per_msg": {"java": 6.0}}})
    assert rows == [("dispatch thread CPU per message (lean single sends)", "4.0 us of 40.0 (10%)", "reported", None)]


@pytest.mark.e2e
def test_the_control_broker_answers_sends_and_dispatches_nothing(tmp_path: Path) -> None:
    conf = {"flushDiskType": "ASYNC_FLUSH", **dispatch_cost.NO_THROTTLE}
    with Topology(tmp_path / "control", broker_conf=conf, python=str(launcher(tmp_path))) as topo:
        r = run_producer(topo, ["-t", "NoDispatch", "--lean", "-p", "1", "-s", "256", "-d", "1"], lambda _l: None)
        assert r["messages"] > 0 and r["broker_thread_cpu_us_per_msg"] is not None
        assert thread_cpu.DISPATCH not in r["broker_thread_cpu_us_per_msg"]
        store = topo.brokers[0].store_root
        assert any(p.stat().st_size for p in (store / "commitlog").iterdir())
        assert not (store / "consumequeue" / "NoDispatch").exists()


@pytest.mark.e2e
@pytest.mark.slow
def test_dispatch_cost_runs_both_brokers_in_turns(tmp_path: Path) -> None:
    r = dispatch_cost.run(rounds=2, seconds=1.0, size=256, progress=lambda _l: None, root=tmp_path)
    for load in dispatch_cost.LOADS:
        assert len(r["runs"][f"{load}_broker"]) == len(r["runs"][f"{load}_control"]) == 2
        assert all(x["dispatch_us_per_msg"] > 0 for x in r["runs"][f"{load}_broker"])
        assert all(x["dispatch_us_per_msg"] == 0 for x in r["runs"][f"{load}_control"])
        assert r["summary"][load]["broker_cpu_us_per_msg"] > 0
    assert "verdict:" in dispatch_cost.format_result(r)
    assert not list(tmp_path.iterdir())  # the temporary stores are gone
