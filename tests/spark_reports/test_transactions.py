"""The transactions report over hand-made run records (written by harness.records, judged by the checker): the
outcome counts per run from check.json and the check-back latency from the tx rows."""

from __future__ import annotations

import csv
from pathlib import Path

from pyspark.sql import SparkSession

from harness.checker import check_run
from harness.records import RunRecord
from spark_reports.jobs import transactions
from spark_reports.run_records import check_verdict

MS = 1_000_000


def _tx_run(runs: Path, scenario: str, leak: bool = False) -> str:
    rec = RunRecord.create(runs, scenario, {"flush": "SYNC_FLUSH"}, ["test"])
    rec.update_meta(broker={"flushDiskType": "SYNC_FLUSH"}, broker_impl="reference_broker test")
    w = rec.events_writer("p0")
    t0 = 10**18
    # c: committed at once; r: rolled back; u1/u2: UNKNOW, resolved by check-back after 1000 / 3000 ms
    # (commit, rollback); n: never resolved.
    for i, key in enumerate(("c", "r", "u1", "u2", "n")):
        w.record_send(key, "T", 0, i, t0, t0 + MS, "ok", 0, 64)
    w.record_tx("c", "T", "ok", t0 + 2 * MS, t0 + 2 * MS, session="local")
    w.record_tx("r", "T", "fail", t0 + 2 * MS, t0 + 2 * MS, session="local")
    for key in ("u1", "u2", "n"):
        w.record_tx(key, "T", "unknown", t0 + 2 * MS, t0 + 2 * MS, session="local")
    w.record_tx("u1", "T", "ok", t0 + 1000 * MS, t0 + 1000 * MS, session="check")
    w.record_tx("u2", "T", "unknown", t0 + 1000 * MS, t0 + 1000 * MS, session="check")
    w.record_tx("u2", "T", "fail", t0 + 3000 * MS, t0 + 3000 * MS, session="check")
    for key in ("c", "u1", *(["r"] if leak else [])):
        w.record_receive(key, "T", 0, 0, t0 + 4000 * MS, t0 + 4000 * MS, nbytes=64)
    rec.finish()
    check_run(rec.run_dir)
    return rec.run_id


def test_outcomes_and_check_back_latency_per_run(spark: SparkSession, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    good, leaky = _tx_run(runs, "transactions"), _tx_run(runs, "chaos-tx-kill9-sync", leak=True)
    plain = RunRecord.create(runs, "throughput", {}, ["test"])
    plain.events_writer("p0").record_send("x", "T", 0, 0, 1, 2, "ok", 0, 64)
    plain.finish()
    check_run(plain.run_dir)
    out = transactions.run(spark, runs, tmp_path / "out")
    with open(out.index.parent / "transactions.csv", encoding="utf-8") as f:
        rows = {r["run"]: r for r in csv.DictReader(f)}
    assert set(rows) == {good, leaky}, "a run without transactions is not shown"
    g = rows[good]
    assert (g["committed"], g["rolled back"], g["unresolved"], g["leaked"], g["lost"]) == ("2", "2", "1", "0", "0")
    assert g["resolved by check-back"] == "2" and g["verdict"] == "valid"
    # From the half message's send (t0) to the resolving answer: 1000 and 3000 ms.
    assert g["max (ms)"] == "3,000.0" and g["check-back p50 (ms)"] in ("1,000.0", "3,000.0")
    assert (rows[leaky]["leaked"], rows[leaky]["verdict"]) == ("1", "invalid")
    page = out.index.read_text(encoding="utf-8")
    assert good in page and leaky in page and "Check-back latency" in page


def test_a_verdict_names_the_loss_its_mode_allows() -> None:
    """A run that lost what its durability mode allows is valid, but must not read like one that lost nothing."""
    assert check_verdict({"valid": True, "lost": 0, "allow_loss": True}) == "valid"
    assert check_verdict({"valid": True, "lost": 213, "allow_loss": True}) == "valid (213 lost, allowed)"
    assert check_verdict({"valid": False, "lost": 3, "allow_loss": False}) == "invalid"
    assert check_verdict(None) == "no check"
