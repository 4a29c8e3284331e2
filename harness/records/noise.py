"""The machine-noise samples of a runs directory (``machine_noise.jsonl``): the load average and a quick fio
baseline, taken before and after the main job's experiments (harness.machine_noise), read by the claims page.
One JSON object per line: ``{"label", "ts_ns", "loadavg": [1, 5, 15 min], "cpus", "fio": {...}}``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

NOISE_FILE: Final = "machine_noise.jsonl"


def append(runs_dir: Path, entry: dict[str, Any]) -> Path:
    runs_dir.mkdir(parents=True, exist_ok=True)
    path = runs_dir / NOISE_FILE
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")
    return path


def read(runs_dir: Path) -> list[dict[str, Any]]:
    """The samples in ``runs_dir``, oldest first; a malformed line is left out (the page says what it has)."""
    path = runs_dir / NOISE_FILE
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict) and isinstance(item.get("loadavg"), list):
            out.append(item)
    return out
