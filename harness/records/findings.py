"""Findings about a broker the lab did not write (Apache RocketMQ 4.9.8): each behaviour an experiment or a
differential test showed to lose, wedge, stall or differ, with the command that reproduces it and, where one
was made, the run record.

They are JSON lines in ``{runs_dir}/findings.jsonl``: one line per observation, written whole with one
``write`` on a file opened for appending (lines from concurrent writers do not interleave). The same
behaviour seen again is another line with the same ``key``; the reports' findings page
(spark_reports/findings_page.py) shows each key once, with how often and when it was seen. A line that does not
parse is reported by ``read`` and skipped, never fatal: the file is written by many runs over time.
"""

from __future__ import annotations

import enum
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

FINDINGS_FILE: Final = "findings.jsonl"


class FindingKind(enum.StrEnum):
    LOSS = "loss"  # acknowledged messages gone, or no longer reachable
    WEDGE = "wedge"  # a part of the broker stopped for good (dispatch, a queue) until someone intervenes
    STALL = "stall"  # service stopped for longer than the lab's bound, then came back
    DIFFERENCE = "difference"  # answers differently from the reference broker where both claim the same protocol


@dataclass(frozen=True)
class Finding:
    key: str  # what was seen, stable across runs: "chaos/power_loss/sync: acknowledged messages lost"
    kind: FindingKind
    broker: str  # the broker's brokerVersionDesc ("V4_9_8")
    title: str
    detail: str
    reproduce: str  # the command that shows it again
    source: str  # which experiment or test saw it
    run_dir: str | None = None
    seen_at: str = ""  # UTC, ISO 8601; set by ``record`` when empty

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "kind": self.kind.value}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Finding:
        return cls(key=str(obj["key"]), kind=FindingKind(obj["kind"]), broker=str(obj["broker"]),
                   title=str(obj["title"]), detail=str(obj["detail"]), reproduce=str(obj["reproduce"]),
                   source=str(obj["source"]), run_dir=None if obj.get("run_dir") is None else str(obj["run_dir"]),
                   seen_at=str(obj.get("seen_at", "")))


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def record(runs_dir: Path, finding: Finding) -> Path:
    """Append one observation to ``runs_dir/findings.jsonl``; returns the file."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    path = runs_dir / FINDINGS_FILE
    if not finding.seen_at:
        finding = Finding(**{**asdict(finding), "seen_at": _now()})
    line = (json.dumps(finding.to_json(), sort_keys=True) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    return path


def read(path: Path) -> tuple[list[Finding], list[str]]:
    """The findings in ``path`` (a findings.jsonl, or a runs directory holding one), and one problem per line
    that is not a finding. A missing file is no findings."""
    if path.is_dir():
        path = path / FINDINGS_FILE
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return [], []
    found: list[Finding] = []
    problems: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            found.append(Finding.from_json(obj if isinstance(obj, dict) else {}))
        except (ValueError, TypeError, KeyError) as e:
            problems.append(f"{path}:{n}: not a finding ({type(e).__name__}: {e})")
    return found, problems
