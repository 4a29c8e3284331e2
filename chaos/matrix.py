"""This module owns the chaos matrix: every combination of flush mode x fault x sysctl profile, each a fresh
experiment with its own run record, and the summary table (text or JSON) the gate and the reports read.

A cell that cannot run here (no root, no loop devices) is listed as skipped with the reason; the gate fails on
a failed cell, and on a skipped one only with ``require_all``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

from chaos.container_faults import Partition, Restart
from chaos.disk_fill import DiskFill
from chaos.experiment import (
    PROCESS_FAULTS,
    ExperimentResult,
    ExperimentSpec,
    Fault,
    FaultName,
    FlushMode,
    TopologyKind,
    run_experiment,
)
from chaos.kill9 import Kill9
from chaos.load import LoadSpec
from chaos.pause import Pause
from chaos.power_loss import PowerLoss
from harness.containers import DEFAULT_IMAGE
from harness.records.findings import Finding, FindingKind
from harness.rocketmq import BrokerImpl


def make_fault(name: FaultName, *, quick: bool = False, cycles: int = 20) -> Fault:
    """A fault with its default parameters. ``quick``: disk fill skips the cleaning phase, which has to wait
    until the broker has been up 60 s. ``cycles``: a power-loss cell's image is sized for them."""
    if name is FaultName.KILL9:
        return Kill9()
    if name in (FaultName.POWER_LOSS, FaultName.POWER_LOSS_TORN):
        return PowerLoss(torn=name is FaultName.POWER_LOSS_TORN, image_bytes=power_loss_image_bytes(cycles))
    if name is FaultName.DISK_FILL:
        return DiskFill(clean=not quick)
    if name is FaultName.PARTITION:
        return Partition()
    if name is FaultName.RESTART:
        return Restart()
    return Pause()


# What one power-loss cycle may write to its image (the load between two crashes: ~12 MB of commit log in the
# soak, with consume queues and index beside it), and the image's floor. A broker restarted every few seconds
# never runs its clean service (every 10 s, cleanResourceInterval), so the image holds every cycle's data: the
# soak's power-loss cell filled a 768 MiB image at crash 244; at 16 MiB a cycle the image passed
# diskSpaceCleanForciblyRatio (85 %) in the final drain and the broker deleted the oldest files under it
# (BENCHMARKS.md "Soak"). Twice the writes keeps the image under 75 %. The image is sparse and copied sparse, so
# its size costs nothing until written.
POWER_LOSS_BYTES_PER_CYCLE: Final = 32 << 20
POWER_LOSS_MIN_IMAGE_BYTES: Final = 768 << 20


def power_loss_image_bytes(cycles: int) -> int:
    return max(POWER_LOSS_MIN_IMAGE_BYTES, cycles * POWER_LOSS_BYTES_PER_CYCLE)


@dataclass(frozen=True)
class MatrixSpec:
    flushes: Sequence[FlushMode] = (FlushMode.SYNC, FlushMode.ASYNC)
    faults: Sequence[FaultName] = PROCESS_FAULTS
    profiles: Sequence[str | None] = ("default",)
    cycles: int = 20
    runs_dir: Path = Path("runs")
    work_dir: Path | None = None
    seed: int | None = None
    gap_s: tuple[float, float] = (0.5, 2.0)
    load: LoadSpec = field(default_factory=LoadSpec)
    quick: bool = False
    command: tuple[str, ...] | None = None
    check_each_recovery: bool = False
    impls: Sequence[BrokerImpl] = ("reference",)
    rocketmq_home: Path | None = None
    topology: TopologyKind = TopologyKind.PROCESS
    image: str | None = None  # the container topology's image; None: harness.containers.DEFAULT_IMAGE
    broker_conf: Mapping[str, str] = field(default_factory=dict)  # extra broker.conf keys for every cell

    def cells(self) -> list[ExperimentSpec]:
        """Broker by broker, the same cells in the same order with the same seeds: a fault lands at the same
        moments on each."""
        out = []
        for impl in self.impls:
            n = 0
            for profile in self.profiles:
                for fault in self.faults:
                    for flush in self.flushes:
                        seed = None if self.seed is None else self.seed + n
                        n += 1
                        out.append(ExperimentSpec(fault=fault, flush=flush, cycles=self.cycles, profile=profile,
                                                  runs_dir=self.runs_dir, work_dir=self.work_dir, seed=seed,
                                                  gap_s=self.gap_s, load=self.load, command=self.command,
                                                  check_each_recovery=self.check_each_recovery,
                                                  broker_impl=impl, rocketmq_home=self.rocketmq_home,
                                                  topology=self.topology, image=self.image or DEFAULT_IMAGE,
                                                  broker_conf=self.broker_conf))
        return out


def run_matrix(spec: MatrixSpec, log: Callable[[str], None] | None = None,
               on_result: Callable[[ExperimentResult], None] | None = None) -> list[ExperimentResult]:
    say = log or (lambda _line: None)
    results = []
    cells = spec.cells()
    for i, cell in enumerate(cells):
        say(f"[{i + 1}/{len(cells)}] {cell.broker_impl} {cell.fault.value} {cell.flush.short} profile={cell.profile}")
        t0 = time.monotonic()
        result = run_experiment(cell, make_fault(cell.fault, quick=spec.quick, cycles=spec.cycles), log=log)
        say(f"[{i + 1}/{len(cells)}] {_status(result)} in {time.monotonic() - t0:.1f} s")
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results


def _status(r: ExperimentResult) -> str:
    if r.skipped is not None:
        return f"SKIPPED ({r.skipped})"
    return "ok" if r.ok else "FAILED: " + "; ".join(r.summary()["violations"])


COLUMNS: tuple[tuple[str, str], ...] = (
    ("broker_impl", "broker"), ("fault", "fault"), ("flush", "flush"), ("profile", "profile"), ("cycles", "cycles"),
    ("acknowledged", "acked"),
    ("lost", "lost"), ("lost_bytes", "lost B"), ("absent", "absent"), ("absent_bytes", "absent B"),
    ("not_seen", "not drained"), ("passed_over", "passed over"),
    ("window_bytes_max", "unflushed B (max)"),
    ("duplicated", "dup"), ("recovered", "recovered"), ("unexpected", "unexpected"),
    ("lookups_sampled", "looked up"), ("lookups_missed", "lookup missed"), ("lookups_excused", "lookup lost"),
    ("recovery_s_median", "recovery s (med)"), ("recovery_s_max", "recovery s (max)"),
    ("crashes_per_hour", "crashes/h"), ("verdict", "verdict"),
)


def summary_rows(results: Iterable[ExperimentResult]) -> list[dict[str, Any]]:
    rows = []
    for r in results:
        row = r.summary()
        row["verdict"] = ("skipped" if r.skipped is not None else "ok" if r.ok
                          else "INCOMPLETE" if not row["complete"] else "FAIL")
        if row["sysctl_applied"] is False and r.skipped is None:
            row["profile"] = f"{row['profile']} (not applied)"
        rows.append(row)
    return rows


def table_cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def aligned_table(columns: Sequence[tuple[str, str]], rows: Sequence[dict[str, Any]]) -> list[str]:
    """(key, header) columns of ``rows`` as aligned text lines: a header, a rule, a line per row; the columns
    after the first four (the cell's name) right-aligned, the last (the verdict) left-aligned."""
    header = [h for _, h in columns]
    body = [[table_cell(row.get(k)) for k, _ in columns] for row in rows]
    widths = [max(len(x) for x in col) for col in zip(header, *body, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.rjust(w) if 4 <= i < len(widths) - 1 else c.ljust(w)
                        for i, (c, w) in enumerate(zip(cells, widths, strict=True))) for cells in body]
    return lines


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """The summary table as aligned text, with the violations and skip reasons listed under it."""
    lines = aligned_table(COLUMNS, rows)
    notes = []
    for row in rows:
        name = f"{row['broker_impl']}/{row['fault']}/{row['flush']}/{row['profile']}"
        if row.get("skipped"):
            notes.append(f"  {name}: skipped: {row['skipped']}")
        for v in row.get("violations") or []:
            notes.append(f"  {name}: {v}")
        if row.get("passed_over") and row.get("ok"):
            notes.append(f"  {name}: {row['passed_over']} acknowledged messages passed over by the live group (kept "
                         "by the store; the group had read past the flushed offset before a cut: "
                         "dispatchFlushedOnly=true prevents it, README)")
        if row.get("run_dir"):
            notes.append(f"  {name}: {row['run_dir']}")
    return "\n".join(lines + (["", "notes and run records:", *notes] if notes else []))


class GatedCell(Protocol):
    """What the gate reads of a cell's result (ExperimentResult, chaos.replication's ReplicationResult)."""

    skipped: str | None
    error: str | None

    @property
    def ok(self) -> bool: ...

    def summary(self) -> dict[str, Any]: ...


def gate_failures(results: Iterable[ExperimentResult], require_all: bool = False) -> list[str]:
    """What fails the gate: a reference-broker cell whose verdict failed, and any cell (RocketMQ's too) that
    did not run as planned. A RocketMQ cell's violations are findings about RocketMQ (``rocketmq_findings``),
    judged by the same rules as ours: a loss its flush mode allows is no violation at all."""
    return cell_gate_failures(((f"{r.spec.broker_impl}/{r.spec.fault.value}/{r.spec.flush.short}/{r.spec.profile}",
                                r.spec.broker_impl, r) for r in results), require_all)


def cell_gate_failures(cells: Iterable[tuple[str, str, GatedCell]], require_all: bool = False) -> list[str]:
    """``gate_failures`` over (name, broker impl, result) of any kind of cell."""
    out = []
    for name, impl, r in cells:
        if r.skipped is not None:
            if require_all:
                out.append(f"{name}: skipped ({r.skipped})")
            continue
        if r.error is not None:
            out.append(f"{name}: {r.error}")
        elif not r.ok and impl == "reference":
            out += [f"{name}: {v}" for v in r.summary()["violations"]] or [f"{name}: failed"]
    return out



_FAULT_COMMANDS: Final = {FaultName.KILL9: "kill9", FaultName.POWER_LOSS: "power-loss",
                          FaultName.POWER_LOSS_TORN: "power-loss --torn", FaultName.DISK_FILL: "disk-fill",
                          FaultName.PAUSE: "pause"}


def reproduce_command(spec: ExperimentSpec) -> str:
    """The single-experiment command that runs ``spec`` again, same seed (the fault moments)."""
    parts = ["python -m chaos", _FAULT_COMMANDS[spec.fault], "--broker-impl", spec.broker_impl,
             "--flush", spec.flush.short, "--profile", spec.profile or "none", "--cycles", str(spec.cycles),
             "--gap", f"{spec.gap_s[0]:g},{spec.gap_s[1]:g}", "--size", str(spec.load.msg_size),
             "--in-flight", str(spec.load.in_flight)]
    if spec.check_each_recovery:
        parts.append("--check-each-recovery")
    if spec.seed is not None:
        parts += ["--seed", str(spec.seed)]
    if spec.rocketmq_home is not None:
        parts += ["--rocketmq-home", str(spec.rocketmq_home)]
    for key, value in spec.broker_conf.items():
        parts += ["--broker-conf", f"{key}={value}"]
    return " ".join(parts)


def _kind(r: ExperimentResult) -> FindingKind:
    """From the verdict's figures: acknowledged messages gone or unreachable, or corrupted, is a loss; a fault
    cycle that did not recover, a stall; anything else (a store check, a remark), a difference."""
    v, chk = r.verdict, r.check
    if v is not None and not v.complete:
        return FindingKind.STALL if any(not c.ok for c in r.cycles if c.cycle >= 0) else FindingKind.DIFFERENCE
    if (v is not None and (v.absent or v.unreachable or v.corrupted)) or (chk is not None and chk.lost):
        return FindingKind.LOSS
    if any(not c.ok for c in r.cycles if c.cycle >= 0):
        return FindingKind.STALL
    return FindingKind.DIFFERENCE


def rocketmq_findings(results: Iterable[ExperimentResult]) -> list[Finding]:
    """A finding per RocketMQ cell whose verdict failed: what it lost, wedged or stalled beyond what its flush
    mode allows, judged by the rules that hold the reference broker (chaos/verdict.py)."""
    out = []
    for r in results:
        if r.spec.broker_impl != "rocketmq" or r.skipped is not None or r.error is not None or r.ok:
            continue
        row = r.summary()
        cell = f"{r.spec.fault.value}/{r.spec.flush.short}/{r.spec.profile}"
        violations = list(row["violations"])
        kind = _kind(r)
        out.append(Finding(
            key=f"chaos/{cell}: {kind.value}", kind=kind, broker=r.broker_version or "RocketMQ",
            title=f"{r.spec.fault.value} under {r.spec.flush.value}: {violations[0] if violations else 'failed'}",
            detail="; ".join(violations) + f" ({row['acknowledged']} acknowledged, {row['absent']} absent at "
                                           f"the end, {row['cycles']} cycles)",
            reproduce=reproduce_command(r.spec), source="chaos matrix",
            run_dir=str(r.run_dir) if r.run_dir is not None else None))
    return out
