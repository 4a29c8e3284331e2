"""Host facts for meta.json: cores, RAM, kernel, Python, the run directory's disk, the git revision."""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any


def host_facts(path: Path) -> dict[str, Any]:
    """The ``host`` object of meta.json; ``disk`` describes the filesystem holding ``path``."""
    return {
        "cores": os.cpu_count() or 0,
        "ram_bytes": _ram_bytes(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "hostname": socket.gethostname(),
        "disk": disk_facts(path),
    }


def _ram_bytes() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


def disk_facts(path: Path) -> dict[str, Any]:
    """Mount point, device and filesystem type (from /proc/self/mounts) and the size of the filesystem."""
    real = path.resolve()
    usage = shutil.disk_usage(real)
    facts: dict[str, Any] = {"path": str(real), "total_bytes": usage.total, "free_bytes": usage.free}
    best = ""
    try:
        with open("/proc/self/mounts", encoding="utf-8") as f:
            for line in f:
                device, mount, fs_type = line.split()[:3]
                mount = mount.replace("\\040", " ")
                inside = real == Path(mount) or Path(mount) in real.parents
                if inside and len(mount) >= len(best):
                    best = mount
                    facts.update(mount=mount, device=device, fs_type=fs_type)
    except OSError:
        pass
    return facts


def git_state(cwd: Path | None = None) -> tuple[str | None, bool | None]:
    """(HEAD, whether tracked files differ from it) of the checkout holding this package (or ``cwd``)."""
    where = cwd if cwd is not None else Path(__file__).resolve().parent
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        # No index refresh (GIT_OPTIONAL_LOCKS=0): a run killed while `git status` held index.lock would leave
        # the lock behind and block every later git command in the checkout.
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=where,
                               capture_output=True, text=True, timeout=10, check=True,
                               env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"}).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None, None
    return (rev or None), bool(dirty)
