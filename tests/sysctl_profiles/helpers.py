"""Shared helpers: test profiles built from the values in force, and running the CLI as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sysctl_profiles.procsys import read_values

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "sysctl_profiles"]
GiB = 1 << 30

def pid_running(pid: int) -> bool:
    """Alive and not a zombie waiting to be reaped (``os.kill(pid, 0)`` still finds a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


needs_root = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="writing /proc/sys needs root"),
]

# Keys the test profiles change: harmless for a few hundred ms on a shared machine (no swap here;
# writeback interval; the dirty limit as bytes, which also exercises the dirty_bytes/dirty_ratio pair).
TEST_KEYS = ("vm.swappiness", "vm.dirty_writeback_centisecs", "vm.dirty_bytes")
COUPLED = "vm.dirty_ratio"


def changed_targets() -> dict[str, str]:
    """A value different from the one in force for each TEST_KEY."""
    now = read_values(TEST_KEYS)
    swappiness = int(now["vm.swappiness"])
    dirty_bytes = int(now["vm.dirty_bytes"])
    return {
        "vm.swappiness": str(swappiness + 1 if swappiness < 200 else swappiness - 1),
        "vm.dirty_writeback_centisecs": str(int(now["vm.dirty_writeback_centisecs"]) + 7),
        "vm.dirty_bytes": str(3 * GiB if dirty_bytes != 3 * GiB else 2 * GiB),
    }


def write_profile(path: Path, targets: dict[str, str], extra_lines: str = "") -> Path:
    lines = ["# a test profile", ""]
    for key, value in targets.items():
        lines += [f"# test: {key}", f"{key} = {value}"]
    path.write_text("\n".join(lines) + "\n" + extra_lines)
    return path


def run_cli(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], cwd=REPO, capture_output=True, text=True, timeout=60, check=False, **kwargs)


def start_cli(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*CLI, *args], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(path: Path, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not appear within {timeout} s")
        time.sleep(0.02)
    return path.read_text()


def child_script(workdir: Path) -> list[str]:
    """A command that reports the values it ran under, then waits; on TERM/INT it notes the signal, exits 7."""
    keys = " ".join(f"/proc/sys/vm/{k.split('.', 1)[1]}" for k in (*TEST_KEYS, COUPLED))
    script = (
        f"trap 'echo TERM > {workdir}/signal; exit 7' TERM; "
        f"trap 'echo INT > {workdir}/signal; exit 7' INT; "
        f"cat {keys} > {workdir}/seen.tmp && mv {workdir}/seen.tmp {workdir}/seen; "
        "while :; do sleep 0.05; done"
    )
    return ["sh", "-c", script]


def seen_values(workdir: Path) -> dict[str, str]:
    fields = wait_for(workdir / "seen").split()
    return dict(zip((*TEST_KEYS, COUPLED), fields, strict=True))
