"""The reference broker beside Apache RocketMQ 4.9.8 (``python -m harness vs-rocketmq``): the same figures from
the same lean load generator against both, their runs alternating in one sitting, with each broker's CPU per
message and the ratio RocketMQ / reference per figure.

Each round starts a fresh topology of each implementation in turn (reference first), under ASYNC_FLUSH then
SYNC_FLUSH, and measures in it: single sends with 64 in flight, batches of 32, one in flight, the p99 at half of
that broker's own single-send maximum, and consumption with offset commits. Alternating cancels most of the
machine's drift; two rounds or more show the noise.

Both brokers get the same warm-up before anything is measured: a lean run of single sends and one of batches
(``WARM_UP_S`` each). A JVM runs interpreted until its JIT has compiled the hot paths; measured cold, RocketMQ
did 15-22k single sends/s in 3 s runs where it does twice that warm. RocketMQ runs with a 2 GiB heap
(``HEAP``, RocketMQ's own scripts take 8 GiB) unless ``$ROCKETMQ_HEAP`` says otherwise.
"""

from __future__ import annotations

import os
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from harness.broker_bench import Plan, lean_args, run_consumer, run_producer
from harness.launcher import Topology
from harness.rocketmq import HEAP_ENV, IMPLS, BrokerImpl

Progress = Callable[[str], None]
WARM_UP_S: Final = 5.0
HEAP: Final = "2g"

# (key, what it is, the measurement's field, unit) — in the order the table prints them.
FIGURES: Final = (
    ("single_64", "single sends, 64 in flight (ASYNC)", "send_tps", "msg/s"),
    ("batch_32", "batches of 32 (ASYNC)", "send_tps", "msg/s"),
    ("sync_single_64", "single sends, 64 in flight (SYNC_FLUSH)", "send_tps", "msg/s"),
    ("one_in_flight", "one in flight, p50 (ASYNC)", "p50_ms", "ms"),
    ("half_rate", "p99 at half its own max rate (ASYNC)", "p99_ms", "ms"),
    ("consume", "consumption with offset commits", "tps", "msg/s"),
)


def broker_conf(impl: BrokerImpl, flush: str, reference_conf: dict[str, str] | None) -> dict[str, str]:
    """The broker.conf keys of one topology: the flush mode, and ``reference_conf`` for the reference broker only
    (its lab keys, e.g. ``dispatchInSeparateProcess``, which RocketMQ does not have)."""
    return {"flushDiskType": flush, **((reference_conf or {}) if impl == "reference" else {})}


def _one(impl: BrokerImpl, plan: Plan, root: Path, rocketmq_home: Path | None, progress: Progress,
         warm_up_s: float, reference_conf: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    d, size = str(plan.duration_s), str(plan.size)
    r: dict[str, dict[str, Any]] = {}
    heap = os.environ.get(HEAP_ENV, HEAP)
    warm = Plan(duration_s=warm_up_s, size=plan.size, processes=plan.processes, in_flight=plan.in_flight)
    with Topology(root / "async", broker_conf=broker_conf(impl, "ASYNC_FLUSH", reference_conf), impl=impl,
                  rocketmq_home=rocketmq_home, rocketmq_heap=heap) as topo:
        run_producer(topo, ["-t", "Warm", "-q", "200", "-w", "4", "-s", size], progress)
        run_producer(topo, lean_args(warm, "Lean", "--in-flight", str(plan.in_flight)), progress)
        run_producer(topo, lean_args(warm, "LeanBatch", "-b", "32", "--in-flight", "4"), progress)
        r["single_64"] = run_producer(topo, lean_args(plan, "Lean", "--in-flight", str(plan.in_flight)), progress)
        r["batch_32"] = run_producer(topo, lean_args(plan, "LeanBatch", "-b", "32", "--in-flight", "4"), progress)
        r["one_in_flight"] = run_producer(
            topo, ["-t", "OneLean", "--lean", "--in-flight", "1", "-p", "1", "-s", size, "-d", d], progress)
        half = r["single_64"]["send_tps"] / 2
        r["half_rate"] = run_producer(
            topo, lean_args(plan, "HalfLean", "-r", f"{half / plan.processes:.0f}", "--in-flight", "1024"), progress)
        r["consume"] = run_consumer(
            topo, ["-t", "LeanBatch", "-g", "vs_drain", "--from-first", "-p", str(plan.processes), "-d", d], progress)
        topo.kill()  # the store is thrown away: no graceful stop (about 10 s for RocketMQ, Topology.kill)
    with Topology(root / "sync", broker_conf=broker_conf(impl, "SYNC_FLUSH", reference_conf), impl=impl,
                  rocketmq_home=rocketmq_home, rocketmq_heap=heap) as topo:
        run_producer(topo, ["-t", "Warm", "-q", "200", "-w", "4", "-s", size], progress)
        run_producer(topo, lean_args(warm, "Lean", "--in-flight", str(plan.in_flight)), progress)
        r["sync_single_64"] = run_producer(topo, lean_args(plan, "Lean", "--in-flight", str(plan.in_flight)), progress)
        topo.kill()
    return r


def run(plan: Plan, rounds: int = 2, progress: Progress = print, rocketmq_home: Path | None = None,
        root: Path | None = None, warm_up_s: float = WARM_UP_S,
        reference_conf: dict[str, str] | None = None) -> dict[str, Any]:
    """``{"plan", "reference_conf", "rounds": [{impl: {figure: measurement}}], "table": [...]}``."""
    out: dict[str, Any] = {"plan": plan.__dict__, "reference_conf": dict(reference_conf or {}), "rounds": []}
    with tempfile.TemporaryDirectory(prefix="rmq-lab-vs-rocketmq-", dir=root) as tmp:
        for n in range(rounds):
            this: dict[str, Any] = {}
            for impl in IMPLS:
                progress(f"round {n + 1}/{rounds}: {impl}")
                this[impl] = _one(impl, plan, Path(tmp) / f"{n}-{impl}", rocketmq_home, progress, warm_up_s,
                                  reference_conf)
            out["rounds"].append(this)
    out["table"] = table(out["rounds"])
    return out


def table(rounds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per figure: each implementation's values (one per round), its mean broker CPU per message, and
    the ratio of the means, RocketMQ / reference."""
    rows = []
    for key, label, field, unit in FIGURES:
        row: dict[str, Any] = {"figure": label, "unit": unit}
        for impl in IMPLS:
            runs = [r[impl][key] for r in rounds]
            row[impl] = [m.get(field) for m in runs]
            cpu = [m["broker_cpu_us_per_msg"] for m in runs if m.get("broker_cpu_us_per_msg") is not None]
            row[f"{impl}_cpu_us"] = statistics.fmean(cpu) if cpu else None
        ref, rmq = row["reference"], row["rocketmq"]
        row["ratio"] = (statistics.fmean(rmq) / statistics.fmean(ref)
                        if all(v is not None for v in ref + rmq) and statistics.fmean(ref) else None)
        rows.append(row)
    return rows


def format_table(result: dict[str, Any]) -> str:
    def vals(v: list[float | None], unit: str) -> str:
        return ", ".join("n/a" if x is None else (f"{x:,.0f}" if unit == "msg/s" else f"{x:.3f}") for x in v)

    def cpu(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.1f} µs"

    lines = ["| figure | reference broker | broker CPU/msg | RocketMQ 4.9.8 | broker CPU/msg | RocketMQ / reference |",
             "|---|---|---|---|---|---|"]
    for row in result["table"]:
        ratio = "n/a" if row["ratio"] is None else f"{row['ratio']:.2f}"
        lines.append(f"| {row['figure']} ({row['unit']}) | {vals(row['reference'], row['unit'])} | "
                     f"{cpu(row['reference_cpu_us'])} | {vals(row['rocketmq'], row['unit'])} | "
                     f"{cpu(row['rocketmq_cpu_us'])} | {ratio} |")
    return "\n".join(lines)
