"""applied_profile / ProfileSession against the real /proc/sys (root), restore on every way out."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sysctl_profiles import (
    ApplyStatus,
    LeftoverStateError,
    LockedError,
    ProfileError,
    ProfileNotApplied,
    ProfileSession,
    applied_profile,
    load_profile,
    profile_names,
    read_values,
    resolve,
)
from sysctl_profiles.procsys import mem_total_bytes
from sysctl_profiles.state_file import ApplyLock, load_state
from tests.sysctl_profiles.helpers import COUPLED, REPO, TEST_KEYS, changed_targets, needs_root, wait_for, write_profile

pytestmark = needs_root

WATCHED = (*TEST_KEYS, COUPLED)


def test_round_trip_changes_records_and_restores(tmp_path: Path) -> None:
    before = read_values(WATCHED)
    targets = changed_targets()
    state_file = tmp_path / "state.json"
    with applied_profile(write_profile(tmp_path / "t.conf", targets), state_file=state_file) as state:
        assert state.applied and state.status is ApplyStatus.APPLIED and state.reason is None
        assert read_values(TEST_KEYS) == targets
        # The kernel keeps one of the pair: setting dirty_bytes zeroed dirty_ratio, and the record says so.
        assert read_values([COUPLED]) == {COUPLED: "0"}
        assert {k: state.values[k] for k in WATCHED} == {**targets, COUPLED: "0"}
        assert "vm.dirty_expire_centisecs" in state.values  # watch keys of the default profile are recorded too
        saved = load_state(state_file).saved  # written before the change, with the coupled partner
        assert saved == {k: before[k] for k in (*TEST_KEYS, COUPLED)}
        assert state.record()["applied"] is True
    assert read_values(WATCHED) == before
    assert not state_file.exists()


def test_restored_after_an_exception(tmp_path: Path) -> None:
    before = read_values(WATCHED)
    path = write_profile(tmp_path / "t.conf", changed_targets())
    with pytest.raises(RuntimeError, match="workload failed"), applied_profile(path, state_file=tmp_path / "s.json"):
        raise RuntimeError("workload failed")
    assert read_values(WATCHED) == before


def test_restored_after_keyboard_interrupt(tmp_path: Path) -> None:
    before = read_values(WATCHED)
    path = write_profile(tmp_path / "t.conf", changed_targets())
    with pytest.raises(KeyboardInterrupt), applied_profile(path, state_file=tmp_path / "s.json"):
        raise KeyboardInterrupt
    assert read_values(WATCHED) == before


def test_kernel_rejection_rolls_back_earlier_writes(tmp_path: Path) -> None:
    before = read_values(WATCHED)
    targets = changed_targets()
    targets["vm.dirty_bytes"] = "1"  # passes our checks; the kernel wants at least two pages (EINVAL)
    session = ProfileSession(load_profile(write_profile(tmp_path / "t.conf", targets)), state_file=tmp_path / "s.json")
    with pytest.raises(ProfileError, match=r"rejected vm.dirty_bytes = '1'.*rolled back"):
        session.apply()
    assert read_values(WATCHED) == before
    assert not (tmp_path / "s.json").exists()
    lock = ApplyLock()
    lock.acquire()  # released by the failed apply
    lock.release()


@pytest.mark.parametrize(
    ("line", "message"),
    [("vm.no_such_knob = 1", "unknown key vm.no_such_knob"), ("vm.max_map_count = lots", "malformed value")],
)
def test_bad_profile_changes_nothing(tmp_path: Path, line: str, message: str) -> None:
    before = read_values(WATCHED)
    path = write_profile(tmp_path / "t.conf", changed_targets(), extra_lines=line + "\n")
    with pytest.raises(ProfileError, match=message), applied_profile(path, state_file=tmp_path / "s.json"):
        pytest.fail("block must not run")
    assert read_values(WATCHED) == before
    assert not (tmp_path / "s.json").exists()


def read_only_line() -> str:
    # kernel.cap_last_cap is mode 0444: not writable even by root.
    value = int(read_values(["kernel.cap_last_cap"])["kernel.cap_last_cap"])
    return f"# read-only here\nkernel.cap_last_cap = {value + 1}\n"


def test_read_only_key_not_applied_raises_and_changes_nothing(tmp_path: Path) -> None:
    before = read_values(WATCHED)
    path = write_profile(tmp_path / "t.conf", changed_targets(), extra_lines=read_only_line())
    with (
        pytest.raises(ProfileNotApplied, match=r"kernel\.cap_last_cap") as err,
        applied_profile(path, state_file=tmp_path / "s.json"),
    ):
        pytest.fail("block must not run without allow_unapplied")
    assert err.value.state.status is ApplyStatus.READ_ONLY
    assert read_values(WATCHED) == before


def test_read_only_key_allow_unapplied_runs_unchanged(tmp_path: Path) -> None:
    before = read_values(WATCHED)
    path = write_profile(tmp_path / "t.conf", changed_targets(), extra_lines=read_only_line())
    with applied_profile(path, allow_unapplied=True, state_file=tmp_path / "s.json") as state:
        assert not state.applied
        assert state.reason is not None and "kernel.cap_last_cap" in state.reason
        assert read_values(WATCHED) == before
        assert {k: state.values[k] for k in WATCHED} == before
        assert state.record() == {"profile": "t", "applied": False, "reason": state.reason, "values": state.values}
    assert not (tmp_path / "s.json").exists()


def test_lock_held_refuses_before_changing(tmp_path: Path) -> None:
    before = read_values(WATCHED)
    lock = ApplyLock()
    lock.acquire()
    try:
        path = write_profile(tmp_path / "t.conf", changed_targets())
        with pytest.raises(LockedError), applied_profile(path, state_file=tmp_path / "s"):
            pytest.fail("block must not run")
    finally:
        lock.release()
    assert read_values(WATCHED) == before


def test_leftover_state_file_refuses(tmp_path: Path) -> None:
    state_file = tmp_path / "s.json"
    state_file.write_text(json.dumps({"format": "sysctl_profiles.state/1", "profile": "x", "pid": 1}))
    path = write_profile(tmp_path / "t.conf", changed_targets())
    with pytest.raises(LeftoverStateError, match="restore"), applied_profile(path, state_file=state_file):
        pytest.fail("block must not run")


@pytest.mark.parametrize("name", profile_names())
def test_every_shipped_profile_applies_and_restores_here(tmp_path: Path, name: str) -> None:
    profile = load_profile(name)
    keys = [*profile.keys, COUPLED, "vm.dirty_background_ratio"]
    before = read_values(keys)
    with applied_profile(name, state_file=tmp_path / "s.json") as state:
        assert state.applied
        wanted = {k: v for k, v in resolve(profile, mem_total_bytes()).items() if v is not None}
        assert read_values(wanted) == wanted
    assert read_values(keys) == before


def test_sigterm_to_a_library_user_restores(tmp_path: Path) -> None:
    before = read_values(WATCHED)
    profile = write_profile(tmp_path / "t.conf", changed_targets())
    script = textwrap.dedent(f"""
        import pathlib, time
        from sysctl_profiles import applied_profile
        with applied_profile({str(profile)!r}, state_file=pathlib.Path({str(tmp_path / "s.json")!r})):
            pathlib.Path({str(tmp_path / "ready")!r}).write_text("x")
            time.sleep(30)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO)
    try:
        wait_for(tmp_path / "ready")
        assert read_values(WATCHED) != before
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 128 + signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()
    assert read_values(WATCHED) == before
    assert not (tmp_path / "s.json").exists()
