"""harness.load_split (a workload divided among load processes, their counts added up) and harness.load_cost
(CPU per message, and which side bounded a run), on known figures; /proc read for this process."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from harness.driver_load import LoadShape
from harness.load_cost import SATURATED, CpuMarks, CpuMeter, bound_of, cpu_seconds, load_cost
from harness.load_split import key_prefix, merge_counts, parts_for, split_shape


@pytest.mark.parametrize(("in_flight", "processes", "windows"), [
    (128, 2, [64, 64]), (5, 2, [3, 2]), (7, 3, [3, 2, 2]), (128, 1, [128]),
    (1, 2, [1]),  # one send in flight stays one send in flight: one process
    (2, 4, [1, 1]),
])
def test_split_keeps_the_window(in_flight: int, processes: int, windows: list[int]) -> None:
    parts = split_shape(LoadShape(name="max", in_flight=in_flight, rate=0.0, seconds=3.0), processes)
    assert [p.in_flight for p in parts] == windows
    assert sum(p.in_flight for p in parts) == in_flight
    assert all(p.rate == 0.0 and p.seconds == 3.0 for p in parts)
    assert len({p.name for p in parts}) == len(parts)
    assert parts_for(LoadShape(in_flight=in_flight), processes) == len(windows)


def test_split_divides_the_rate() -> None:
    parts = split_shape(LoadShape(rate=2000.0, in_flight=128), 3)
    assert sum(p.rate for p in parts) == pytest.approx(2000.0)
    assert len({p.rate for p in parts}) == 1


def test_split_rejects_no_processes() -> None:
    with pytest.raises(ValueError):
        split_shape(LoadShape(), 0)


def test_keys_are_unique_across_parts() -> None:
    keys = [f"{key_prefix('run-x', part)}{seq}" for part in range(12) for seq in range(120)]
    assert len(set(keys)) == len(keys)  # part 1 seq 23 is not part 12 seq 3


def test_merge_sums_counts_and_keeps_the_longest_window() -> None:
    merged = merge_counts([{"sent_ok": 10, "sent_fail": 1, "sent_unknown": 0, "received": 9, "seconds": 2.0},
                           {"sent_ok": 5, "sent_fail": 0, "sent_unknown": 2, "received": 7, "seconds": 2.5}])
    assert merged == {"sent_ok": 15, "sent_fail": 1, "sent_unknown": 2, "received": 16, "seconds": 2.5}


@pytest.mark.parametrize(("clients", "broker", "bound"), [
    ([0.97, 0.95], 0.40, "generator"),    # both load processes at their ceiling, the broker idling
    ([0.99], 0.60, "generator"),          # the one-process load of the first figures
    ([0.50, 0.45], 0.98, "broker"),
    ([0.80, 0.80], 0.60, "machine"),      # 2.2 cores wanted of 2: nobody at a ceiling, both starved
    ([0.90, 0.92], 0.90, "machine"),      # both at ceilings
    ([0.20, 0.20], 0.30, "neither"),      # a fixed rate, or an fsync
    ([0.95, 0.30], 0.30, "neither"),      # one process at its ceiling is not the generator's bound
])
def test_bound(clients: list[float], broker: float, bound: str) -> None:
    assert bound_of(clients, broker, 2) == bound


def test_other_work_makes_it_the_machine() -> None:
    # Both sides at a fifth of a core, but the cores 95 % busy: something else had them (a loaded machine).
    assert bound_of([0.2, 0.2], 0.3, 2, machine_busy=0.95) == "machine"
    assert bound_of([0.2, 0.2], 0.3, 2, machine_busy=0.40) == "neither"
    assert bound_of([0.95, 0.95], 0.3, 2, machine_busy=1.0) == "generator"  # the load alone at its ceiling


def test_bound_without_a_broker_figure() -> None:
    assert bound_of([SATURATED, 0.99], None, 2) == "generator"


def test_load_cost_figures() -> None:
    clients = [CpuMarks(1.0, 2.9, 3.5), CpuMarks(10.0, 11.8, 12.0)]
    cost = load_cost(clients, CpuMarks(5.0, 5.8, 6.0), 2.0, 10_000, 2, coordinator=CpuMarks(0.0, 0.1, 0.5))
    assert cost.client_util == pytest.approx([0.95, 0.9])
    assert cost.broker_util == pytest.approx(0.4)
    assert cost.client_cpu_us_per_msg == pytest.approx((2.5 + 2.0 + 0.5) / 10_000 * 1e6)
    assert cost.broker_cpu_us_per_msg == pytest.approx(100.0)
    assert cost.bound == "generator"
    assert cost.to_json()["bound"] == "generator" and cost.to_json()["processes"] == 2
    assert cost.machine_busy is None and cost.others_cores is None


def test_load_cost_counts_other_work() -> None:
    # 2 cores x 2 s = 400 ticks of 100 Hz, 360 busy: 1.8 cores busy, of which the load 0.5 and the broker 0.3.
    cost = load_cost([CpuMarks(0.0, 1.0, 1.2)], CpuMarks(0.0, 0.6, 0.7), 2.0, 1000, 2,
                     machine=((1000, 5000), (1360, 5400)))
    assert cost.machine_busy == pytest.approx(0.9)
    assert cost.others_cores == pytest.approx(1.8 - 0.5 - 0.3)
    assert cost.bound == "machine"


def test_load_cost_with_a_process_gone_and_nothing_acked() -> None:
    cost = load_cost([CpuMarks(1.0, None, None)], None, 2.0, 0, 2)
    assert cost.client_cpu_s == [None] and cost.client_util == [0.0]
    assert cost.client_cpu_us_per_msg is None and cost.broker_cpu_us_per_msg is None


def test_meter_reads_this_process() -> None:
    meter = CpuMeter({"me": os.getpid(), "nobody": None})
    meter.mark("start")
    t = time.process_time()
    while time.process_time() - t < 0.1:
        pass
    meter.mark("window_end")
    meter.mark("end")
    me = meter.marks("me")
    assert me is not None and me.start is not None and me.end is not None
    assert me.end - me.start >= 0.05
    machine = meter.machine()
    assert machine is not None and machine[1][1] > machine[0][1] and machine[1][0] >= machine[0][0]
    assert meter.marks("nobody") is None
    assert cpu_seconds(2**22 + 12345) is None  # no such process (beyond pid_max's default)


def test_a_failing_load_process_reports_its_error(tmp_path: Path) -> None:
    """A child that cannot make its driver sends ("error", …) and exits 1, which the coordinator raises as a
    LoadProcessError instead of waiting out its timeouts (a real spawned process)."""
    import multiprocessing

    from harness.load_procs import PartSpec, run_part
    from harness.records import RunRecord

    record = RunRecord.create(tmp_path, "compare-x", {})
    spec = PartSpec(0, "no-such-driver", "nats://127.0.0.1:1", "i", "g", str(record.run_dir),
                    LoadShape(seconds=1.0, in_flight=2), "T", "g", "k-p0-")
    ctx = multiprocessing.get_context("spawn")
    mine, theirs = ctx.Pipe()
    child = ctx.Process(target=run_part, args=(theirs, spec), daemon=True)
    child.start()
    theirs.close()
    try:
        assert mine.poll(60)
        kind, text = mine.recv()
        assert kind == "error" and "unknown driver 'no-such-driver'" in text
    finally:
        child.join(30)
        if child.is_alive():
            child.kill()
    assert child.exitcode == 1
