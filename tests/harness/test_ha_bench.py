"""harness/ha_bench.py: the arithmetic on made-up samples (lags, the paired ratio and its verdict, the catch-up
rate, the catch-up file's size), and one tiny run of ``python -m harness ha-bench`` whose JSON is checked for
consistency with its own runs (never for how fast anything was)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness import ha_bench
from harness.__main__ import main
from harness.ha_bench import MIB, Plan, catchup_rate, figures, lag_stats, percentile, ratio_stats


def test_percentile_is_nearest_rank() -> None:
    values = list(range(1, 101))
    assert percentile(values, 50) == 50 and percentile(values, 99) == 99 and percentile(values, 100) == 100
    assert percentile([], 99) == 0.0 and percentile([7], 99) == 7


def test_lags_are_the_masters_end_minus_the_ack_and_minus_the_slaves_store() -> None:
    samples = [{"master_max": 500, "master_acked": 500, "slave_max": 500},  # before the load: no previous one
               {"master_max": 1000, "master_acked": 900, "slave_max": 950},
               {"master_max": 2000, "master_acked": 1500, "slave_max": 1600},
               # the slave was read after the master: it may be ahead of the master's earlier end
               {"master_max": 3000, "master_acked": 3000, "slave_max": 3100},
               # the end did not move (the generator starting, or the other group's turn): not under load
               {"master_max": 3000, "master_acked": 2000, "slave_max": 2000}]
    lag = lag_stats(samples)
    assert lag["samples"] == 5 and lag["loaded_samples"] == 3
    assert lag["acked_max_bytes"] == 500 and lag["acked_p99_bytes"] == 500 and lag["acked_p50_bytes"] == 100
    assert lag["stored_max_bytes"] == 400 and lag["stored_p99_bytes"] == 400
    assert lag_stats([])["acked_max_bytes"] == 0


def test_without_acknowledged_offsets_only_the_stored_lag_is_given() -> None:
    """RocketMQ 4.9.8's runtime info has no push2SlaveMaxOffset: its samples carry none, and its acked lag is
    unknown rather than zero."""
    samples = [{"master_max": 500, "slave_max": 500}, {"master_max": 1000, "slave_max": 700},
               {"master_max": 2000, "slave_max": 1900}]
    lag = lag_stats(samples)
    assert lag["acked_max_bytes"] is None and lag["acked_p50_bytes"] is None
    assert lag["stored_max_bytes"] == 300 and lag["stored_p50_bytes"] == 100 and lag["loaded_samples"] == 2
    rows = dict((name, measured) for name, measured, _t, _h in figures({"plan": {}, "impls": {"rocketmq": {
        "modes": {"ASYNC_FLUSH": {
            "SYNC_MASTER": [_run(100.0)], "ASYNC_MASTER": [_run(200.0)],
            "ratio": ratio_stats([100.0], [200.0]), "lag": lag}}}}}))
    assert rows["rocketmq: ASYNC_MASTER ASYNC_FLUSH: lag acknowledged (p50 / p99 / max)"].startswith("n/a / n/a / n/a")
    assert rows["rocketmq: SYNC/ASYNC ASYNC_FLUSH, paired by round"].startswith("0.50")


def _run(tps: float) -> dict[str, float]:
    return {"send_tps": tps, "p50_ms": 1.0, "p99_ms": 2.0, "master_cpu_us_per_msg": 3.0, "slave_cpu_us_per_msg": 4.0}


def test_the_ratio_is_paired_by_round_and_judged_on_its_median() -> None:
    # Round 2 ran on a slower machine for both: pairing keeps its ratio at 0.6.
    r = ratio_stats([60.0, 30.0, 40.0], [100.0, 50.0, 100.0])
    assert r["per_round"] == pytest.approx([0.6, 0.6, 0.4])
    assert r["median"] == pytest.approx(0.6) and r["min"] == pytest.approx(0.4) and r["max"] == pytest.approx(0.6)
    assert r["held"] is True
    assert ratio_stats([40.0, 45.0], [100.0, 100.0])["held"] is False


def test_catchup_rate_and_file_size() -> None:
    assert catchup_rate(0, 200_000_000, 2.0) == pytest.approx(100.0)
    assert catchup_rate(100, 100, 0.0) == 0.0
    plan = Plan(catchup_bytes=1024 * MIB)
    assert plan.catchup_file_size == 1536 * MIB
    assert Plan(catchup_bytes=8 * MIB).catchup_file_size == 136 * MIB
    assert Plan.quick().catchup_bytes == 128 * MIB


def test_one_round_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 2 rounds"):
        ha_bench.run(Plan(rounds=1))


@pytest.mark.e2e
def test_cli_tiny_run_reports_consistent_figures(tmp_path: Path) -> None:
    out = tmp_path / "ha.json"
    res = CliRunner().invoke(main, ["ha-bench", "--rounds", "2", "--seconds", "0.5", "--catchup-mib", "8",
                                    "--no-fio", "--ha-transfer-batch-kib", "64", "--json", str(out)])
    assert res.exit_code == 0, res.output
    r = json.loads(out.read_text())
    assert list(r["impls"]) == ["reference"]  # the default: the reference broker alone
    m = r["impls"]["reference"]["modes"]["ASYNC_FLUSH"]
    sync, asyn = m["SYNC_MASTER"], m["ASYNC_MASTER"]
    assert len(sync) == len(asyn) == 2
    for run in sync + asyn:
        assert run["send_tps"] > 0 and run["messages"] > 0
        assert run["master_cpu_us_per_msg"] > 0 and run["slave_cpu_us_per_msg"] > 0
        # Sends before the slave connected would all fail (SLAVE_NOT_AVAILABLE); a stall of the shared machine may
        # fail a few of either side (broker busy), which is noise, not a broken benchmark.
        assert run["response_failed"] <= run["messages"] // 10
    ratios = [s["send_tps"] / a["send_tps"] for s, a in zip(sync, asyn, strict=True)]
    assert m["ratio"]["per_round"] == pytest.approx(ratios)
    assert m["ratio"]["median"] == pytest.approx(statistics.median(ratios))
    assert m["ratio"]["held"] == (m["ratio"]["median"] >= 0.5)
    assert m["lag"]["samples"] == len(m["lag_samples"]) > 0
    assert m["lag"]["acked_max_bytes"] >= m["lag"]["acked_p99_bytes"] >= 0
    c = r["impls"]["reference"]["catchup"]
    assert c["end_offset"] >= 8 * MIB and c["start_offset"] == 0  # the data stayed in the first file
    assert c["bytes"] == c["end_offset"] - c["start_offset"]
    assert c["mb_s"] == pytest.approx(c["bytes"] / c["seconds"] / 1e6)
    assert "fio_seq_write_bytes_per_s" not in c
    # CPU is read in clock ticks (10 ms): an 8 MiB copy can take less than one of the slave's.
    assert c["master_cpu_cores"] >= 0 and c["slave_cpu_cores"] >= 0
    assert r["machine"]["cpus"] >= 1 and len(r["machine"]["loadavg_end"]) == 3
    assert r["plan"]["ha_transfer_batch"] == 64 * 1024 and "frames <= 64 KiB" in res.output
    # the printed table carries the same ratio and a verdict
    assert f"{m['ratio']['median']:.2f}" in res.output
    assert "SYNC/ASYNC ASYNC_FLUSH, paired by round" in res.output
    assert ("NOT HELD" in res.output) or ("held" in res.output)


@pytest.mark.e2e
@pytest.mark.slow
def test_cli_tiny_run_against_rocketmq_beside_ours(tmp_path: Path, rocketmq_home: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """``--broker-impl both``: the same rounds and catch-up against RocketMQ 4.9.8, its figures beside ours."""
    monkeypatch.setenv("ROCKETMQ_HOME", str(rocketmq_home))
    out = tmp_path / "ha.json"
    res = CliRunner().invoke(main, ["ha-bench", "--broker-impl", "both", "--rounds", "2", "--seconds", "0.5",
                                    "--catchup-mib", "8", "--no-fio", "--json", str(out)])
    assert res.exit_code == 0, res.output
    r = json.loads(out.read_text())
    assert list(r["impls"]) == ["reference", "rocketmq"]
    for impl, res_impl in r["impls"].items():
        m = res_impl["modes"]["ASYNC_FLUSH"]
        for run in m["SYNC_MASTER"] + m["ASYNC_MASTER"]:
            assert run["send_tps"] > 0 and run["master_cpu_us_per_msg"] > 0, impl
            assert run["response_failed"] <= run["messages"] // 10, impl
        c = res_impl["catchup"]
        assert c["end_offset"] >= 8 * MIB and c["start_offset"] == 0, impl
        assert c["mb_s"] == pytest.approx(c["bytes"] / c["seconds"] / 1e6)
    assert r["impls"]["rocketmq"]["modes"]["ASYNC_FLUSH"]["lag"]["acked_max_bytes"] is None  # 4.9.8 has no such key
    assert "rocketmq: SYNC/ASYNC ASYNC_FLUSH, paired by round" in res.output
