"""This module owns the main job (``python -m harness pipeline``): on the embedded default — local broker
processes, local Spark — a short backlog workload, a short sync-vs-async crash comparison (when root with
loop devices; kill -9 otherwise), and the Spark reports over the run records, ending with the path of
``reports/index.html``.

Each stage is a real command (locust, ``python -m chaos``, ``python -m spark_reports``) run as a subprocess,
so what the pipeline does is exactly what a user can run by hand; its progress goes to stderr.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Stage:
    name: str
    argv: list[str]
    required: bool = True  # a failed optional stage is reported and the pipeline goes on


class PipelineError(RuntimeError):
    pass


def can_power_loss() -> str | None:
    """Why the power-loss experiment cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "not root"
    if not Path("/dev/loop-control").exists():
        return "no /dev/loop-control"
    return None


def stages(runs: Path, reports: Path, backlog_s: int, cycles: int) -> list[Stage]:
    py = sys.executable
    root = Path(__file__).resolve().parents[1]
    faults = "kill9,power_loss" if can_power_loss() is None else "kill9"
    return [
        Stage("backlog workload (locust, embedded broker)",
              [py, "-m", "locust", "-f", str(root / "scenarios" / "backlog.py"), "--headless", "-t",
               f"{backlog_s}s", "--run-dir", str(runs), "--only-summary"]),
        Stage(f"crash comparison, SYNC vs ASYNC flush ({faults}, {cycles} cycles)",
              [py, "-m", "chaos", "matrix", "--flush", "sync,async", "--faults", faults, "--profiles", "default",
               "--cycles", str(cycles), "--runs-dir", str(runs)], required=False),
        Stage("Spark reports", [py, "-m", "spark_reports", "all", "--runs", str(runs), "--out", str(reports)]),
    ]


def run(runs: Path, reports: Path, backlog_s: int = 30, cycles: int = 3, progress: Progress = print) -> Path:
    runs.mkdir(parents=True, exist_ok=True)
    reports.mkdir(parents=True, exist_ok=True)
    why = can_power_loss()
    if why is not None:
        progress(f"power loss is skipped ({why}); the crash comparison uses kill -9 only")
    todo = stages(runs, reports, backlog_s, cycles)
    t0 = time.monotonic()
    for i, stage in enumerate(todo, 1):
        progress(f"[{i}/{len(todo)}] {stage.name}: {' '.join(stage.argv[1:])}")
        started = time.monotonic()
        done = subprocess.run(stage.argv, cwd=Path(__file__).resolve().parents[1])
        took = time.monotonic() - started
        if done.returncode != 0:
            msg = f"[{i}/{len(todo)}] {stage.name} exited with {done.returncode} after {took:.0f} s"
            if stage.required:
                raise PipelineError(msg)
            progress(msg + " (reported in its run records; going on)")
        else:
            progress(f"[{i}/{len(todo)}] {stage.name}: done in {took:.0f} s")
    index = reports / "index.html"
    progress(f"pipeline finished in {time.monotonic() - t0:.0f} s")
    return index
