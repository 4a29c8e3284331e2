"""harness/vs_rocketmq.py: one row per figure with each implementation's runs, its broker CPU per message and
the ratio of the means; and the command end to end against RocketMQ 4.9.8 (skipped without it)."""

from __future__ import annotations

import pytest

from harness import vs_rocketmq
from harness.broker_bench import Plan


def _m(value: float, cpu: float) -> dict[str, float]:
    return {"send_tps": value, "tps": value, "p50_ms": value, "p99_ms": value, "broker_cpu_us_per_msg": cpu}


def test_the_table_has_each_impls_runs_cpu_and_the_ratio_of_means() -> None:
    rounds = [{impl: {key: _m(base * k, 10.0 * k) for key, *_ in vs_rocketmq.FIGURES}
               for impl, base in (("reference", 100.0), ("rocketmq", 200.0))} for k in (1, 3)]
    rows = vs_rocketmq.table(rounds)
    assert [r["figure"] for r in rows] == [label for _, label, _, _ in vs_rocketmq.FIGURES]
    for row in rows:
        assert row["reference"] == [100.0, 300.0] and row["rocketmq"] == [200.0, 600.0]
        assert row["ratio"] == pytest.approx(2.0)
        assert row["reference_cpu_us"] == pytest.approx(20.0)
    text = vs_rocketmq.format_table({"table": rows})
    assert "| single sends, 64 in flight (ASYNC) (msg/s) | 100, 300 | 20.0 µs | 200, 600 | 20.0 µs | 2.00 |" in text


def test_reference_conf_keys_go_to_the_reference_broker_only() -> None:
    lab = {"dispatchInSeparateProcess": "true"}
    assert vs_rocketmq.broker_conf("reference", "SYNC_FLUSH", lab) == {"flushDiskType": "SYNC_FLUSH", **lab}
    assert vs_rocketmq.broker_conf("rocketmq", "SYNC_FLUSH", lab) == {"flushDiskType": "SYNC_FLUSH"}
    assert vs_rocketmq.broker_conf("reference", "ASYNC_FLUSH", None) == {"flushDiskType": "ASYNC_FLUSH"}


def test_a_missing_measurement_gives_no_ratio() -> None:
    rounds = [{impl: {key: {**_m(1.0, 1.0), "p50_ms": None} for key, *_ in vs_rocketmq.FIGURES}
               for impl in ("reference", "rocketmq")}]
    one = next(r for r in vs_rocketmq.table(rounds) if r["unit"] == "ms" and "p50" in r["figure"])
    assert one["ratio"] is None


@pytest.mark.e2e
@pytest.mark.slow
def test_both_brokers_measured_in_one_round(tmp_path, rocketmq_home) -> None:
    result = vs_rocketmq.run(Plan(duration_s=1.0), rounds=1, progress=lambda _line: None, root=tmp_path,
                             warm_up_s=1.0, rocketmq_home=rocketmq_home)
    for row in result["table"]:
        assert all(v is not None and v > 0 for v in row["reference"] + row["rocketmq"]), row
        assert row["ratio"] is not None
