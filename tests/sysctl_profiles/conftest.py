"""Guards for every sysctl_profiles test: no changed sysctl value and no state file may outlive a test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sysctl_profiles.session import restore_values
from sysctl_profiles.state_file import DEFAULT_STATE_FILE, StateFileError, load_state
from tests.sysctl_profiles.helpers import pid_running

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


def foreign_profile() -> str | None:
    """Another live process's profile in force (its state file), or None. While one is, this machine's values
    are that process's to restore: a snapshot taken now is not the baseline, and writing one back later would
    undo that process's own restore."""
    try:
        state = load_state(DEFAULT_STATE_FILE)
    except StateFileError:
        return None  # no state file (or one the tests themselves judge)
    if state.pid == os.getpid():
        return None
    if not pid_running(state.pid):
        return None  # a dead (or killed, unreaped) applier's leftover: restore_state_file's business
    return f"profile {state.profile} applied by live pid {state.pid}"


@pytest.fixture(autouse=True)
def sysctl_guard() -> Iterator[None]:
    if (other := foreign_profile()) is not None:
        pytest.skip(f"another process has a sysctl profile in force ({other}): this test could not tell its "
                    "own changes from that one's")
    before = snapshot()
    state_file_before = DEFAULT_STATE_FILE.exists()
    yield
    after = snapshot()
    changed = {k: (before[k], after.get(k)) for k in before if after.get(k) != before[k]}
    if changed and (other := foreign_profile()) is not None:
        # Applied by another process while this test ran: its values, its restore. Writing this test's
        # snapshot back would undo that process's restore later (seen with two suites on one machine).
        pytest.fail(f"another process applied a sysctl profile during this test ({other}); values not restored "
                    f"by the guard: {changed}")
    # vm.stat_refresh / counters are not settings, but nothing in /proc/sys/vm moves on its own here.
    if changed and os.geteuid() == 0:
        restore_values({k: before[k] for k in changed})  # never leave a changed value behind
    assert not changed, f"sysctl values left changed by the test (now restored): {changed}"
    if not state_file_before:
        assert not DEFAULT_STATE_FILE.exists(), "test left the default state file behind"
