"""This module owns the replication matrix: broker x flush mode x replication mode x fault, each cell a fresh group (a
master and a slave) with its own run record (chaos.replication), and the summary table and gate over them. For a
partition fault the "absent" columns count acknowledged keys missing from the master (read back after the heal),
and the notes give the answers heard while the group was cut.

The gate fails on a reference-broker cell whose verdict failed (a SYNC_MASTER that lost a SEND_OK, a slave
that does not serve what it holds) and on any cell that could not run as planned; a RocketMQ cell's violations
are reported, as the chaos matrix does, not gated.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.experiment import FlushMode
from chaos.load import LoadSpec
from chaos.matrix import aligned_table, cell_gate_failures
from chaos.replication import ReplicationFault, ReplicationResult, ReplicationSpec, run_replication
from chaos.replication_verdict import ReplicationMode
from harness.rocketmq import BrokerImpl


@dataclass(frozen=True)
class ReplicationMatrixSpec:
    modes: Sequence[ReplicationMode] = (ReplicationMode.SYNC, ReplicationMode.ASYNC)
    faults: Sequence[ReplicationFault] = tuple(ReplicationFault)
    flushes: Sequence[FlushMode] = (FlushMode.ASYNC,)
    cycles: int = 3
    runs_dir: Path = Path("runs")
    work_dir: Path | None = None
    seed: int | None = None
    gap_s: tuple[float, float] = (0.5, 2.0)
    load: LoadSpec = field(default_factory=LoadSpec)
    command: tuple[str, ...] | None = None
    impls: Sequence[BrokerImpl] = ("reference",)
    rocketmq_home: Path | None = None

    def cells(self) -> list[ReplicationSpec]:
        """Broker by broker, the same cells in the same order with the same seeds."""
        out = []
        for impl in self.impls:
            n = 0
            for flush in self.flushes:
                for fault in self.faults:
                    for mode in self.modes:
                        seed = None if self.seed is None else self.seed + n
                        n += 1
                        out.append(ReplicationSpec(fault=fault, mode=mode, flush=flush, cycles=self.cycles,
                                                   runs_dir=self.runs_dir, work_dir=self.work_dir, seed=seed,
                                                   gap_s=self.gap_s, load=self.load, command=self.command,
                                                   broker_impl=impl, rocketmq_home=self.rocketmq_home))
        return out


def run_cells(spec: ReplicationMatrixSpec, log: Callable[[str], None] | None = None) -> list[ReplicationResult]:
    say = log or (lambda _line: None)
    results = []
    cells = spec.cells()
    for i, cell in enumerate(cells):
        say(f"[{i + 1}/{len(cells)}] {cell.broker_impl} {cell.fault.value} {cell.mode.value} {cell.flush.value}")
        t0 = time.monotonic()
        r = run_replication(cell, log=log)
        status = (f"SKIPPED ({r.skipped})" if r.skipped is not None
                  else "ok" if r.ok else "FAILED: " + "; ".join(r.summary()["violations"]))
        say(f"[{i + 1}/{len(cells)}] {status} in {time.monotonic() - t0:.1f} s")
        results.append(r)
    return results


COLUMNS: tuple[tuple[str, str], ...] = (
    ("broker_impl", "broker"), ("fault", "fault"), ("replication", "replication"), ("flush", "flush"),
    ("cycles", "cycles"), ("acknowledged", "acked"), ("acked_master_only", "master-only"),
    ("lost", "lost"), ("lost_promised", "lost promised"), ("absent", "absent on slave"),
    ("absent_promised", "absent promised"), ("lost_share", "lost share"), ("lag_bytes", "lag B (final)"),
    ("lag_bytes_max", "lag B (max)"), ("unreplicated_bytes", "unreplicated B"),
    ("promised_final_window", "SEND_OK (final window)"), ("diverged_cycles", "diverged"), ("duplicated", "dup"),
    ("stored_twice", "stored twice"), ("verdict", "verdict"),
)


def summary_rows(results: Iterable[ReplicationResult]) -> list[dict[str, Any]]:
    rows = []
    for r in results:
        row = r.summary()
        row["verdict"] = "skipped" if r.skipped is not None else ("ok" if r.ok else "FAIL")
        rows.append(row)
    return rows


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    lines = aligned_table(COLUMNS, rows)
    notes = []
    for row in rows:
        name = f"{row['broker_impl']}/{row['fault']}/{row['replication']}/{row['flush']}"
        if row.get("skipped"):
            notes.append(f"  {name}: skipped: {row['skipped']}")
        if row.get("answers_cut") is not None:  # a partition: absent = not on the master, which stayed alive
            answers = ", ".join(f"{k} {v:,}" for k, v in row["answers_cut"].items()) or "none"
            notes.append(f"  {name}: answers while cut: {answers}")
        if row.get("cleaned"):
            notes.append(f"  {name}: {row['cleaned']:,} acknowledged keys lay below the master's commit-log min "
                         "offset: deleted by the store's disk-space cleaning, not counted as lost")
        notes += [f"  {name}: {v}" for v in row.get("violations") or []]
        notes += [f"  {name}: finding: {f}" for f in row.get("findings") or []]
        if row.get("run_dir"):
            notes.append(f"  {name}: {row['run_dir']}")
    return "\n".join(lines + (["", "notes and run records:", *notes] if notes else []))


def gate_failures(results: Iterable[ReplicationResult], require_all: bool = False) -> list[str]:
    return cell_gate_failures(((f"{r.spec.broker_impl}/{r.spec.fault.value}/{r.spec.mode.short}/{r.spec.flush.short}",
                                r.spec.broker_impl, r) for r in results), require_all)
