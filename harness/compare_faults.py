"""This module owns ``python -m harness compare --faults``: after the workloads, the same faults on every broker
of the session, each a chaos cell (``python -m chaos matrix``) whose run record lands in the session directory,
so ``python -m spark_reports compare`` shows the loss under each fault beside the throughput and latency
(spark_reports.fault_loss).

The cells run as ``python -m chaos`` child processes, one per broker label: the chaos layer drives the harness,
not the other way round (DESIGN.md's layers), and a cell that cannot run here (no root for a loop image, a
peer not installed) is a skipped row in its own JSON, not this session's end. Every cell's sysctl profile is
``none``: the comparison is of the brokers, and the profiles are the chaos matrix's own axis.

Label → cell: ``reference-async`` → ``--driver rocketmq --broker-impl reference --flush async``; likewise
``-sync`` and ``rocketmq-*`` (Apache RocketMQ 4.9.8); ``nats``, ``rabbitmq-classic``, ``rabbitmq-quorum`` →
``--driver <label>`` (their faults: kill9, pause, power_loss, disk_fill; chaos/peer_faults.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

FAULTS: Final = ("kill9", "pause", "power_loss", "power_loss_torn", "disk_fill")
PEER_FAULTS: Final = ("kill9", "pause", "power_loss", "disk_fill")  # chaos/peer_faults.py PEER_FAULTS
CELL_TIMEOUT_S: Final = 1800.0


def matrix_args(label: str, faults: Sequence[str], cycles: int, runs_dir: Path,
                seed: int | None) -> list[str] | None:
    """The ``python -m chaos matrix`` arguments for one compare label; None when none of ``faults`` is built for
    it (a peer has no power_loss_torn)."""
    impl, _, flush = label.partition("-")
    if impl in ("reference", "rocketmq") and flush in ("async", "sync"):
        who = ["--driver", "rocketmq", "--broker-impl", impl, "--flush", flush]
    else:
        who = ["--driver", label]
        faults = [f for f in faults if f in PEER_FAULTS]
    if not faults:
        return None
    args = ["matrix", *who, "--faults", ",".join(faults), "--cycles", str(cycles), "--profiles", "none",
            "--runs-dir", str(runs_dir), "--json"]
    return args + (["--seed", str(seed)] if seed is not None else [])


def parse_rows(stdout: str) -> list[dict[str, Any]]:
    """The rows of every JSON array ``chaos matrix --json`` printed (one per kind of cell it ran)."""
    rows: list[dict[str, Any]] = []
    decoder, text, i = json.JSONDecoder(), stdout, 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return rows
        value, i = decoder.raw_decode(text, i)
        rows.extend(r for r in (value if isinstance(value, list) else [value]) if isinstance(r, dict))


def row_words(label: str, row: dict[str, Any]) -> str:
    """One progress line for a cell's row."""
    if row.get("skipped"):
        return f"{label} {row.get('fault')}: skipped ({row['skipped']})"
    if row.get("error"):
        return f"{label} {row.get('fault')}: ERROR ({row['error']})"
    ok = row.get("ok", row.get("verdict") == "ok")
    return (f"{label} {row.get('fault')}: {row.get('acknowledged')} acknowledged, {row.get('lost')} lost, "
            + ("promise kept" if ok else "promise NOT kept: " + "; ".join(map(str, row.get("violations") or []))[:300]))


def run_fault_cells(labels: Sequence[str], faults: Sequence[str], cycles: int, session: Path,
                    seed: int | None = None, log: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Every label's cells into ``session``; the rows, each with its ``label`` (a label whose cells failed to
    run at all is one row with its ``error``)."""
    say = log or (lambda _line: None)
    out: list[dict[str, Any]] = []
    for label in labels:
        args = matrix_args(label, faults, cycles, session, seed)
        if args is None:
            out.append({"label": label, "skipped": f"none of {', '.join(faults)} is built for {label}"})
            continue
        say(f"{label}: faults {', '.join(faults)} x {cycles} cycles (python -m chaos {' '.join(args[:6])} ...)")
        try:
            done = subprocess.run([sys.executable, "-m", "chaos", *args], capture_output=True, text=True,
                                  timeout=CELL_TIMEOUT_S, check=False)
            rows = parse_rows(done.stdout) if done.returncode == 0 else []
            if done.returncode != 0 or not rows:
                tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
                rows = [{"error": f"chaos matrix exited {done.returncode}: {tail[0][:300]}"}]
        except (subprocess.TimeoutExpired, json.JSONDecodeError) as exc:
            rows = [{"error": f"{type(exc).__name__}: {str(exc)[:300]}"}]
        for row in rows:
            row["label"] = label
            say("  " + row_words(label, row))
        out.extend(rows)
    return out
