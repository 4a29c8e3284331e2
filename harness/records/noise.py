"""The machine-noise samples of a runs directory (``machine_noise.jsonl``): the load average and a quick fio
baseline, taken before and after the main job's experiments (harness.machine_noise), read by the claims page.
One JSON object per line: ``{"label", "ts_ns", "loadavg": [1, 5, 15 min], "cpus", "fio": {...}}``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from harness.records import jsonl

NOISE_FILE: Final = "machine_noise.jsonl"


def append(runs_dir: Path, entry: dict[str, Any]) -> Path:
    return jsonl.append(runs_dir / NOISE_FILE, entry)


def read(runs_dir: Path) -> list[dict[str, Any]]:
    """The samples in ``runs_dir``, oldest first; a malformed line is left out (the page says what it has)."""
    return [item for item in jsonl.read_objects(runs_dir / NOISE_FILE) if isinstance(item.get("loadavg"), list)]
