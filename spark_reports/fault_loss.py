"""This module owns the compare report's "loss under each fault": one row per chaos cell found among a session's
run records, whichever broker it ran — the reference broker or Apache RocketMQ 4.9.8 (``python -m chaos``
cells: chaos.json) or a peer (``--driver nats|rabbitmq-classic|rabbitmq-quorum``: meta.json and check.json) —
labelled as ``python -m harness compare`` labels brokers, so a broker's row of faults stands beside its
throughput and latency.

Each cell is judged against its broker's own promise, as the chaos gate judged it (chaos.verdict for the
RocketMQ brokers, chaos.peer_verdict for the peers): lost = acknowledged and never delivered (the checker's,
Jepsen's); "allowed" = what the promise lets go (a page-cache acknowledgement under a power loss, within its
unflushed window or sync interval); "beyond" = what it does not. A reference or RocketMQ cell reports its
verdict as a whole, not the split, so a failed one shows its first violation instead.

Pure: the rows come from files already read into ``RunInfo`` plus chaos.json / check.json on disk; no Spark.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from spark_reports.run_records import RunInfo, read_check

CHAOS_FILE: Final = "chaos.json"  # chaos/experiment.py: the cell's summary and verdict
# The single-broker faults a compare row stands for (replication and transaction cells are other reports').
FAULTS: Final = ("kill9", "pause", "power_loss", "power_loss_torn", "disk_fill")
PEERS: Final = ("nats", "rabbitmq-classic", "rabbitmq-quorum")
DURABILITY: Final = {"async": "ASYNC_FLUSH", "sync": "SYNC_FLUSH", "page_cache": "ASYNC_FLUSH",
                     "fsync": "SYNC_FLUSH"}


@dataclass(frozen=True)
class FaultRow:
    run_id: str
    broker: str  # the compare label: reference-async, rocketmq-sync, nats, ...
    durability: str  # the flush mode the acknowledgement's promise matches
    fault: str
    cycles: int | None
    acknowledged: int | None
    lost: int | None  # acknowledged, never delivered
    allowed: int | None  # of those, what the promise allows
    beyond: int | None  # of those, what it does not (None: the verdict does not split it)
    recovery_s_max: float | None
    kept_promise: bool
    why: str  # the first violation, or the reason the cell did not run as planned; "" when kept

    @property
    def verdict(self) -> str:
        return "kept its promise" if self.kept_promise else f"did not: {self.why}"


def fault_rows(runs: list[RunInfo]) -> list[FaultRow]:
    """The chaos cells among ``runs``, sorted by fault, durability and broker."""
    rows = [row for run in runs if (row := _row(run)) is not None]
    return sorted(rows, key=lambda r: (FAULTS.index(r.fault), r.durability, r.broker, r.run_id))


def _row(run: RunInfo) -> FaultRow | None:
    if not run.scenario.startswith("chaos-"):
        return None
    chaos_file = run.path / CHAOS_FILE
    if chaos_file.is_file():
        return _rocketmq_row(run, json.loads(chaos_file.read_text(encoding="utf-8")))
    if run.meta.get("driver") in PEERS:
        return _peer_row(run)
    return None


def _rocketmq_row(run: RunInfo, chaos: dict[str, Any]) -> FaultRow | None:
    """A reference or RocketMQ cell (chaos/experiment.py); None for the replication and transaction cells."""
    s = chaos.get("summary")
    if not isinstance(s, dict) or "slave" in chaos or s.get("fault") not in FAULTS or s.get("flush") not in DURABILITY:
        return None
    impl = "rocketmq" if s.get("broker_impl") == "rocketmq" else "reference"
    lost = _int(s.get("lost"))
    ok = bool(s.get("ok"))
    violations = [str(v) for v in s.get("violations") or []]
    why = "" if ok else (violations[0] if violations else str(s.get("error") or s.get("skipped") or "not judged"))
    return FaultRow(run.run_id, f"{impl}-{s['flush']}", DURABILITY[str(s["flush"])], str(s["fault"]),
                    _int(s.get("cycles")), _int(s.get("acknowledged")), lost,
                    lost if ok else None, 0 if ok else None, _float(s.get("recovery_s_max")), ok, why[:300])


def _peer_row(run: RunInfo) -> FaultRow | None:
    """A peer cell (chaos/peer_faults.py): check.json's loss, meta.json's promise and, after a power loss, its
    split by time (``peer_loss``)."""
    params = run.meta.get("params") or {}
    fault = str(params.get("fault", ""))
    promise = str(run.meta.get("ack_promise", ""))
    if fault not in FAULTS or promise not in DURABILITY:
        return None
    check = read_check(run) or {}
    lost = _int(check.get("lost"))
    split = run.meta.get("peer_loss")
    if isinstance(split, dict):
        allowed, beyond = _int(split.get("allowed")), _int(split.get("beyond_promise"))
    else:  # kill -9, pause, disk fill: the page cache survives, so no promise lets a message go
        allowed, beyond = (0, lost)
    results = run.meta.get("results") or {}
    missing = [str(q) for q in results.get("missing_queues") or []]
    recovery = [float(v) for v in run.meta.get("fault_recovery_s") or []]
    why = []
    if not check:
        why.append("no check.json: the cell did not finish")
    elif not check.get("valid", False) and not beyond:
        why.append("the checker found the history invalid")
    if beyond:
        why.append(f"{beyond} acknowledged lost beyond its {promise} promise")
    if missing:
        why.append(f"durable queues gone: {', '.join(missing)}")
    return FaultRow(run.run_id, str(run.meta["driver"]), DURABILITY[promise], fault, _int(params.get("cycles")),
                    _int(check.get("acknowledged")), lost, allowed, beyond,
                    round(max(recovery), 2) if recovery else None, not why, "; ".join(why))


def _int(v: Any) -> int | None:
    return None if v is None else int(v)


def _float(v: Any) -> float | None:
    return None if v is None else float(v)


def standing(rows: list[FaultRow], ours: str, peer: str) -> str:
    """One sentence for a claim's details: where ``ours`` and ``peer`` stand under the faults both ran; "" when
    they share none."""
    mine = {r.fault: r for r in rows if r.broker == ours}
    theirs = {r.fault: r for r in rows if r.broker == peer}
    shared = [f for f in FAULTS if f in mine and f in theirs]
    if not shared:
        return ""

    def words(r: FaultRow) -> str:
        return f"{r.lost if r.lost is not None else '?'} lost, " + (
            "promise kept" if r.kept_promise else "promise NOT kept")

    return "Under faults (one sitting): " + "; ".join(
        f"{f}: {ours} {words(mine[f])}, {peer} {words(theirs[f])}" for f in shared) + "."
