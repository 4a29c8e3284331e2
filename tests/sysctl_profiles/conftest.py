"""Guards for every sysctl_profiles test: no changed sysctl value and no state file may outlive a test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sysctl_profiles.session import restore_values
from sysctl_profiles.state_file import DEFAULT_STATE_FILE

# Keys outside vm.* that tests touch (read-only ones, to be sure they stay as they are).
EXTRA_KEYS = ("kernel.cap_last_cap",)


def snapshot() -> dict[str, str]:
    """Every readable, settable-looking value under /proc/sys/vm plus EXTRA_KEYS, whitespace-normalised."""
    out: dict[str, str] = {}
    paths = sorted(Path("/proc/sys/vm").iterdir()) + [Path("/proc/sys", *k.split(".")) for k in EXTRA_KEYS]
    for path in paths:
        key = ".".join(path.relative_to("/proc/sys").parts)
        try:
            out[key] = " ".join(path.read_text().split())
        except OSError:
            continue  # write-only actions (drop_caches, compact_memory) and root-only files
    return out


@pytest.fixture(autouse=True)
def sysctl_guard() -> Iterator[None]:
    before = snapshot()
    state_file_before = DEFAULT_STATE_FILE.exists()
    yield
    after = snapshot()
    changed = {k: (before[k], after.get(k)) for k in before if after.get(k) != before[k]}
    # vm.stat_refresh / counters are not settings, but nothing in /proc/sys/vm moves on its own here.
    if changed and os.geteuid() == 0:
        restore_values({k: before[k] for k in changed})  # never leave a changed value behind
    assert not changed, f"sysctl values left changed by the test (now restored): {changed}"
    if not state_file_before:
        assert not DEFAULT_STATE_FILE.exists(), "test left the default state file behind"
