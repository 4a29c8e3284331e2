"""The scaling experiment: its plan's checks and row shapes (pure), its records' reader, and a short real run
through the command line (real name server, broker, bare broker and load-generator processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.records.scaling import ROW_KEYS, SCALING_FILE, read
from harness.scaling import Plan, Session, fio_row, format_rows, producer_row


def test_a_plan_refuses_what_it_cannot_measure() -> None:
    with pytest.raises(ValueError, match="unknown curve"):
        Plan(curves=("size", "colour"))
    with pytest.raises(ValueError, match="sizes"):
        Plan(sizes=(0, 128))
    with pytest.raises(ValueError, match="4 MiB"):
        Plan(sizes=(8 << 20,))
    with pytest.raises(ValueError, match="flush"):
        Plan(flush="SOMETIMES")
    assert Plan.quick(curves=("depth",)).curves == ("depth",)
    assert Plan.quick().seconds < Plan().seconds


def test_rows_carry_the_load_and_the_walls() -> None:
    row = producer_row("size", 4096, "broker", {"send_tps": 10_000.0, "p50_ms": 0.5, "p99_ms": 2.0,
                                                "broker_cpu_us_per_msg": 30.0}, size=4096, in_flight=64, processes=2)
    assert row["mb_per_s"] == pytest.approx(40.96)
    assert (row["p99_ms"], row["in_flight"], row["processes"]) == (2.0, 64, 2)
    wall = fio_row("size", 4096, 1e9, 4096)
    assert wall["msgs_per_s"] == pytest.approx(1e9 / 4096) and wall["target"] == "fio"


def test_the_session_writes_every_key_and_the_reader_skips_bad_lines(tmp_path: Path) -> None:
    session = Session(tmp_path, Plan.quick(), "reference", name="s1")
    written = session.write(producer_row("depth", 1, "broker", {"send_tps": 5.0}, size=1024, in_flight=1,
                                         processes=1))
    assert set(written) == set(ROW_KEYS) and written["session"] == "s1" and written["flush"] == "ASYNC_FLUSH"
    with (tmp_path / SCALING_FILE).open("a") as f:
        f.write("not json\n")
        f.write(json.dumps({"curve": "colour", "x": 1, "target": "broker", "msgs_per_s": 1}) + "\n")
        f.write(json.dumps({"curve": "depth", "x": "one", "target": "broker", "msgs_per_s": 1}) + "\n")
    assert [r["x"] for r in read(tmp_path)] == [1]
    assert "depth" in format_rows(read(tmp_path))


@pytest.mark.slow
def test_a_short_run_measures_each_curve_and_the_report_draws_it(tmp_path: Path) -> None:
    """Three curves through the real command: the depth curve beside the bare broker, 2,000 queues (two topics:
    a broker takes at most 1,024 per topic) beside one queue, two broker groups beside one; then the scaling
    report over the rows."""
    out = tmp_path / "scaling"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-m", "harness", "scaling", "--quick", "--curves", "depth,queues,groups",
                           "--groups", "1,2", "--depths", "1,16", "--queues", "1,2000", "--seconds", "1",
                           "--out", str(out),
                           "--report", str(tmp_path / "reports")], capture_output=True, text=True, timeout=600,
                          env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = read(out)
    got = {(r["curve"], r["x"], r["target"]) for r in rows}
    assert got == {("depth", 1, "broker"), ("depth", 16, "broker"), ("depth", 1, "bare"), ("depth", 16, "bare"),
                   ("queues", 1, "broker"), ("queues", 2000, "broker"), ("groups", 1, "broker"),
                   ("groups", 2, "broker")}
    assert all(r["msgs_per_s"] > 0 and r["p99_ms"] is not None for r in rows)
    assert all(r["broker_cpu_us_per_msg"] and r["broker_cpu_us_per_msg"] > 0 for r in rows)
    page = (tmp_path / "reports" / "scaling" / "index.html").read_text()
    assert "2,000 queues run at" in page and "2 groups give" in page
    assert (tmp_path / "reports" / "scaling" / "rate.png").stat().st_size > 0


@pytest.mark.slow
@pytest.mark.machine  # a memory cgroup, and the page cache it evicts
def test_the_cold_backlog_curve_reads_from_the_device_with_the_broker_in_a_memory_cgroup(tmp_path: Path) -> None:
    """backlog_cold through the real command: 300,000 messages of 1 KiB stored by a broker whose memory cgroup
    (256 MiB: its own memory and its page cache) cannot hold them, then a drain from the first offset that must
    make the broker read from storage (/proc/PID/io read_bytes); the group is gone afterwards."""
    from harness.memory_cgroup import Skip, detect

    found = detect(256 << 20, name="rmq-lab-probe")
    if isinstance(found, Skip):
        pytest.skip(f"backlog_cold: {found.reason}")
    out = tmp_path / "scaling"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-m", "harness", "scaling", "--quick", "--curves", "backlog_cold",
                           "--out", str(out)], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = [r for r in read(out) if r["curve"] == "backlog_cold" and r["target"] == "broker"]
    assert row["x"] == 300_000 and row["memory_max"] == 256 << 20
    assert row["msgs_per_s"] > 0
    assert row["read_bytes"] is not None and row["read_bytes"] > 1 << 20, row  # the drain read from the device
    assert not list(found.path.parent.glob("rmq-lab-scaling-*")), "the memory cgroup was left behind"
