"""spark_reports/fault_loss.py: a session's chaos cells as the compare report's "loss under each fault" rows,
from run records laid out as chaos/experiment.py and chaos/peer_faults.py write them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spark_reports.fault_loss import fault_rows, standing
from spark_reports.run_records import RunInfo


def _run(root: Path, run_id: str, meta: dict[str, Any], chaos: dict[str, Any] | None = None,
         check: dict[str, Any] | None = None) -> RunInfo:
    d = root / run_id
    d.mkdir(parents=True)
    (d / "meta.json").write_text(json.dumps(meta))
    if chaos is not None:
        (d / "chaos.json").write_text(json.dumps(chaos))
    if check is not None:
        (d / "check.json").write_text(json.dumps(check))
    return RunInfo(run_id, d, meta)


def _ours(root: Path, run_id: str, impl: str, fault: str, flush: str, lost: int, ok: bool,
          violations: list[str] | None = None) -> RunInfo:
    summary = {"broker_impl": impl, "fault": fault, "flush": flush, "cycles": 3, "acknowledged": 1000, "lost": lost,
               "ok": ok, "violations": violations or [], "recovery_s_max": 1.5}
    return _run(root, run_id, {"scenario": f"chaos-{fault}-{flush}-none"}, {"summary": summary})


def _peer(root: Path, run_id: str, driver: str, fault: str, promise: str, lost: int,
          split: dict[str, int] | None = None) -> RunInfo:
    meta: dict[str, Any] = {"scenario": f"chaos-{fault}", "driver": driver, "ack_promise": promise,
                            "params": {"fault": fault, "cycles": 2}, "fault_recovery_s": [0.2, 0.7],
                            "results": {"missing_queues": []}}
    if split is not None:
        meta["peer_loss"] = split
    return _run(root, run_id, meta, check={"acknowledged": 900, "lost": lost, "valid": True})


def test_rows_per_broker_judged_against_each_promise(tmp_path: Path) -> None:
    runs = [
        _ours(tmp_path, "r1", "reference", "power_loss", "async", 12, True),
        _ours(tmp_path, "r2", "rocketmq", "kill9", "sync", 3, False, ["3 acknowledged lost under SYNC_FLUSH", "x"]),
        _peer(tmp_path, "r3", "nats", "power_loss", "page_cache", 9, {"allowed": 5, "beyond_promise": 4}),
        _peer(tmp_path, "r4", "rabbitmq-quorum", "kill9", "fsync", 2),
        _peer(tmp_path, "r5", "rabbitmq-classic", "pause", "fsync", 0),
    ]
    rows = {r.run_id: r for r in fault_rows(runs)}
    assert [r.run_id for r in fault_rows(runs)] == ["r4", "r2", "r5", "r3", "r1"]  # by fault, durability, broker
    ref = rows["r1"]
    assert (ref.broker, ref.durability, ref.lost, ref.allowed, ref.beyond, ref.kept_promise) == (
        "reference-async", "ASYNC_FLUSH", 12, 12, 0, True)
    assert ref.verdict == "kept its promise" and ref.cycles == 3 and ref.recovery_s_max == 1.5
    rmq = rows["r2"]
    assert (rmq.broker, rmq.durability, rmq.allowed, rmq.beyond, rmq.kept_promise) == (
        "rocketmq-sync", "SYNC_FLUSH", None, None, False)
    assert rmq.verdict == "did not: 3 acknowledged lost under SYNC_FLUSH"
    nats = rows["r3"]
    assert (nats.durability, nats.lost, nats.allowed, nats.beyond, nats.kept_promise) == (
        "ASYNC_FLUSH", 9, 5, 4, False)
    assert "4 acknowledged lost beyond its page_cache promise" in nats.why and nats.recovery_s_max == 0.7
    rabbit = rows["r4"]  # a kill -9 keeps the page cache: no promise lets a message go
    assert (rabbit.allowed, rabbit.beyond, rabbit.kept_promise) == (0, 2, False)
    assert rows["r5"].kept_promise and rows["r5"].lost == 0


def test_other_runs_are_not_rows(tmp_path: Path) -> None:
    replication = _run(tmp_path, "a", {"scenario": "chaos-master.kill9-async.master"},
                       {"summary": {"fault": "kill9", "flush": "async"}, "slave": {}})
    workload = _run(tmp_path, "b", {"scenario": "compare-nats-max", "driver": "nats", "ack_promise": "page_cache",
                                    "params": {}})
    unfinished = _peer(tmp_path, "c", "nats", "kill9", "page_cache", 0)
    (unfinished.path / "check.json").unlink()
    rows = fault_rows([replication, workload, unfinished])
    assert [r.run_id for r in rows] == ["c"]
    assert not rows[0].kept_promise and rows[0].why == "no check.json: the cell did not finish"


def test_standing_names_the_faults_both_ran(tmp_path: Path) -> None:
    rows = fault_rows([_ours(tmp_path, "r1", "reference", "kill9", "async", 0, True),
                       _ours(tmp_path, "r2", "reference", "pause", "async", 0, True),
                       _peer(tmp_path, "r3", "nats", "kill9", "page_cache", 1)])
    assert standing(rows, "reference-async", "nats") == (
        "Under faults (one sitting): kill9: reference-async 0 lost, promise kept, nats 1 lost, promise NOT kept.")
    assert standing(rows, "reference-sync", "rabbitmq-quorum") == ""
