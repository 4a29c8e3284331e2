"""The profiles experiment: its pure parts here; the real experiment in test_compare_e2e.py."""

from __future__ import annotations

from pathlib import Path

from sysctl_profiles.catalog import load_profile
from sysctl_profiles.compare import (
    PROFILES,
    CompareSpec,
    Workload,
    experiment_tag,
    half_rate,
    new_run_dirs,
    summary_lines,
    watched_keys,
    workload_argv,
)


def test_every_shipped_profile_is_compared_and_every_key_it_sets_is_watched() -> None:
    assert set(PROFILES) == {"default", "rocketmq-os", "seed-qa", "low-latency-async"}
    watched = set(watched_keys())
    for name in PROFILES:
        assert set(load_profile(name).keys) <= watched, name
    # coupled pairs: the kernel zeroes one member when the other is set, so both must come back
    assert {"vm.dirty_bytes", "vm.dirty_ratio", "vm.dirty_background_bytes", "vm.dirty_background_ratio"} <= watched


def test_argv_per_workload(tmp_path: Path) -> None:
    spec = CompareSpec(runs_dir=tmp_path / "runs", seconds=7, cycles=2, work_dir=tmp_path / "w", python="py")
    tput = workload_argv(spec, Workload.THROUGHPUT, "seed-qa", None)
    assert tput[:3] == ["py", "-m", "locust"] and tput[4].endswith("scenarios/throughput.py")
    assert tput[tput.index("--rate") + 1] == "0" and tput[tput.index("-t") + 1] == "7s"
    assert tput[tput.index("--sysctl-profile") + 1] == "seed-qa"
    assert tput[tput.index("--run-dir") + 1] == str(tmp_path / "runs")
    lat = workload_argv(spec, Workload.LATENCY, "seed-qa", 1234.0)
    assert lat[4].endswith("scenarios/latency.py") and lat[lat.index("--rate") + 1] == "1234"
    pl = workload_argv(spec, Workload.POWER_LOSS, "rocketmq-os", None)
    assert pl[:4] == ["py", "-m", "chaos", "power-loss"]
    assert pl[pl.index("--flush") + 1] == "async" and pl[pl.index("--profile") + 1] == "rocketmq-os"
    assert pl[pl.index("--cycles") + 1] == "2" and pl[pl.index("--work-dir") + 1] == str(tmp_path / "w")


def test_latency_needs_a_rate(tmp_path: Path) -> None:
    import pytest

    with pytest.raises(ValueError):
        workload_argv(CompareSpec(), Workload.LATENCY, "default", None)


def test_half_rate_from_a_throughput_summary() -> None:
    assert half_rate({"counts": {"send_rate": 5282.6}}) == 2641.0
    assert half_rate({"counts": {"send_rate": 1.2}}) == 1.0  # never 0: 0 would mean "unbounded"
    assert half_rate({"counts": {"send_rate": 0}}) is None
    assert half_rate({"counts": {}}) is None
    assert half_rate({}) is None


def test_new_run_dirs() -> None:
    assert new_run_dirs(["a", "b"], ["b", "c", "a", "0"]) == ["0", "c"]
    assert new_run_dirs([], []) == []


def test_tag_and_summary() -> None:
    assert experiment_tag("x1", "seed-qa", Workload.LATENCY, 10.0) == {
        "id": "x1", "profile": "seed-qa", "workload": "latency", "latency_rate": 10.0}
    manifest = {"experiment_id": "x1", "restore": {"restored": False, "problems_at_end": ["vm.swappiness: wanted"]},
                "steps": [{"profile": "default", "workload": "throughput", "exit_code": 0, "seconds": 3.0,
                           "run_dir": "/r/1"}]}
    lines = summary_lines(manifest)
    assert "default" in lines[1] and "/r/1" in lines[1]
    assert lines[-1].startswith("SYSCTL VALUES NOT RESTORED") and "vm.swappiness" in lines[-1]
    manifest["restore"] = {"restored": True}
    assert summary_lines(manifest)[-1] == "sysctl values restored to the baseline"
