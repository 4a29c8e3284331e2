"""Writing what was in force into a run: a standalone record file or the "sysctl" entry of meta.json.

The entry is `{"profile", "applied", "reason", "values"}` (docs/design.md, Run records: "sysctl profile requested and
the values actually in force"). Values are the kernel's text, whitespace-normalised, so multi-field
values survive as they are. meta.json belongs to the harness's run-record module; this module only
replaces its "sysctl" key (creating a minimal file when absent) and does not import that module.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sysctl_profiles.state_file import write_atomic

META_FILE = "meta.json"
META_KEY = "sysctl"


def sysctl_entry(profile: str, applied: bool, reason: str | None, values: dict[str, str]) -> dict[str, Any]:
    # Sorted, so records of runs under different profiles line up key by key.
    return {"profile": profile, "applied": applied, "reason": reason, "values": dict(sorted(values.items()))}


def write_record(path: Path, entry: dict[str, Any]) -> None:
    write_atomic(path, (json.dumps(entry, indent=2) + "\n").encode())


def update_run_meta(run_dir: Path, entry: dict[str, Any]) -> Path:
    """Set meta.json's "sysctl" entry, keeping every other key; returns the meta.json path."""
    return update_meta_key(run_dir, META_KEY, entry)


def update_meta_key(run_dir: Path, key: str, entry: Any) -> Path:
    """Set one key of meta.json, keeping every other key (creating a minimal file when absent)."""
    meta_path = run_dir / META_FILE
    meta: dict[str, Any] = {}
    if meta_path.exists():
        loaded = json.loads(meta_path.read_text())
        if not isinstance(loaded, dict):
            raise ValueError(f"{meta_path}: expected a JSON object")
        meta = loaded
    meta[key] = entry
    write_atomic(meta_path, (json.dumps(meta, indent=2) + "\n").encode())
    return meta_path
