"""The small JSON-lines files beside the runs (machine_noise.jsonl, scaling.jsonl): one object per line, read
leniently — a line that is not a JSON object is left out, so the page that shows the file says what it has."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def append(path: Path, entry: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")
    return path


def read_objects(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of ``path``, oldest first; a missing file is none."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict):
            out.append(item)
    return out
