"""`python -m sysctl_profiles apply` as a real process: child failure, signals, SIGKILL + restore, records."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sysctl_profiles import read_values
from sysctl_profiles.catalog import PROFILES_DIR
from sysctl_profiles.state_file import load_state
from tests.sysctl_profiles.helpers import (
    COUPLED,
    REPO,
    TEST_KEYS,
    changed_targets,
    child_script,
    needs_root,
    run_cli,
    seen_values,
    start_cli,
    wait_for,
    write_profile,
)

pytestmark = needs_root

WATCHED = (*TEST_KEYS, COUPLED)


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, dict[str, str], dict[str, str]]:
    """(profile path, its targets, the values in force before)."""
    before = read_values(WATCHED)
    targets = changed_targets()
    return write_profile(tmp_path / "t.conf", targets), targets, before


def test_child_failure_passes_its_code_through_and_restores(
    tmp_path: Path, setup: tuple[Path, dict[str, str], dict[str, str]]
) -> None:
    profile, targets, before = setup
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "meta.json").write_text(json.dumps({"run_id": "r1"}))
    command = ["sh", "-c", f"cat /proc/sys/vm/swappiness > {tmp_path}/during; exit 3"]
    result = run_cli(
        "apply", str(profile), "--record", str(tmp_path / "rec.json"), "--run-dir", str(run_dir),
        "--state-file", str(tmp_path / "s.json"), "--", *command,
    )  # fmt: skip
    assert result.returncode == 3, result.stderr
    assert (tmp_path / "during").read_text().strip() == targets["vm.swappiness"]
    assert read_values(WATCHED) == before
    record = json.loads((tmp_path / "rec.json").read_text())
    assert record["applied"] is True and record["reason"] is None and record["profile"] == "t"
    assert {k: record["values"][k] for k in WATCHED} == {**targets, COUPLED: "0"}
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta == {"run_id": "r1", "sysctl": record}
    assert not (tmp_path / "s.json").exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_is_forwarded_then_values_restored(
    tmp_path: Path, setup: tuple[Path, dict[str, str], dict[str, str]], sig: signal.Signals
) -> None:
    profile, targets, before = setup
    with start_cli(
        "apply", str(profile), "--state-file", str(tmp_path / "s.json"), "--", *child_script(tmp_path)
    ) as proc:
        try:
            assert seen_values(tmp_path) == {**targets, COUPLED: "0"}
            busy = run_cli("restore", str(tmp_path / "s.json"))  # the running apply holds the lock
            assert busy.returncode == 2 and "another sysctl_profiles apply/restore is running" in busy.stderr
            assert read_values(TEST_KEYS) == targets
            proc.send_signal(sig)
            _, stderr = proc.communicate(timeout=20)
        finally:
            proc.kill()
    assert (tmp_path / "signal").read_text().strip() == sig.name.removeprefix("SIG")
    assert proc.returncode == 7, stderr  # the child's own exit code after handling the forwarded signal
    assert read_values(WATCHED) == before
    assert not (tmp_path / "s.json").exists()


def test_sigkill_leaves_state_file_and_restore_undoes_it(
    tmp_path: Path, setup: tuple[Path, dict[str, str], dict[str, str]]
) -> None:
    profile, targets, before = setup
    state_file = tmp_path / "s.json"
    try:
        with start_cli("apply", str(profile), "--state-file", str(state_file), "--", *child_script(tmp_path)) as proc:
            try:
                seen_values(tmp_path)
            finally:
                proc.send_signal(signal.SIGKILL)
        # The command does not outlive its wrapper (PR_SET_PDEATHSIG -> SIGTERM).
        assert wait_for(tmp_path / "signal").strip() == "TERM"
        assert read_values(TEST_KEYS) == targets  # still changed: nothing could restore
        assert load_state(state_file).saved == {k: before[k] for k in WATCHED}

        refused = run_cli("apply", str(profile), "--state-file", str(state_file), "--", "true")
        assert refused.returncode == 2
        assert "restore" in refused.stderr
        assert read_values(TEST_KEYS) == targets

        restored = run_cli("restore", str(state_file))
        assert restored.returncode == 0, restored.stderr
        assert read_values(WATCHED) == before
        assert not state_file.exists()
        again = run_cli("restore", str(state_file))
        assert again.returncode == 0 and "nothing to restore" in again.stderr
    finally:
        if state_file.exists():  # the guard fixture would catch it too; never leave values changed
            run_cli("restore", str(state_file))


def test_read_only_key_without_and_with_allow_unapplied(
    tmp_path: Path, setup: tuple[Path, dict[str, str], dict[str, str]]
) -> None:
    profile, _, before = setup
    cap = int(read_values(["kernel.cap_last_cap"])["kernel.cap_last_cap"])
    profile.write_text(profile.read_text() + f"# read-only (0444)\nkernel.cap_last_cap = {cap + 1}\n")
    command = ["sh", "-c", f"cat /proc/sys/vm/swappiness > {tmp_path}/ran; exit 5"]
    common = ("--record", str(tmp_path / "rec.json"), "--state-file", str(tmp_path / "s.json"))

    stopped = run_cli("apply", str(profile), *common, "--", *command)
    assert stopped.returncode == 3
    assert not (tmp_path / "ran").exists(), "command must not run when the profile is not applied"
    record = json.loads((tmp_path / "rec.json").read_text())
    assert record["applied"] is False and "kernel.cap_last_cap" in record["reason"]
    assert {k: record["values"][k] for k in WATCHED} == before

    allowed = run_cli("apply", str(profile), *common, "--allow-unapplied", "--", *command)
    assert allowed.returncode == 5
    assert (tmp_path / "ran").read_text().strip() == before["vm.swappiness"]
    assert read_values(WATCHED) == before


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("vm.no_such_knob = 1", "unknown key vm.no_such_knob"),
        ("vm.dirty_writeback_centisecs = 5 5", "malformed value"),
        ("vm.drop_caches = 3", "is an action"),
    ],
)
def test_bad_profile_is_an_error_before_anything_changes(
    tmp_path: Path, setup: tuple[Path, dict[str, str], dict[str, str]], line: str, message: str
) -> None:
    profile, targets, before = setup
    targets.pop("vm.dirty_writeback_centisecs")
    write_profile(profile, targets, extra_lines=line + "\n")
    result = run_cli("apply", str(profile), "--state-file", str(tmp_path / "s.json"), "--", "touch", f"{tmp_path}/ran")
    assert result.returncode == 2
    assert message in result.stderr
    assert not (tmp_path / "ran").exists()
    assert read_values(WATCHED) == before


def test_command_not_found_restores(tmp_path: Path, setup: tuple[Path, dict[str, str], dict[str, str]]) -> None:
    profile, _, before = setup
    result = run_cli("apply", str(profile), "--state-file", str(tmp_path / "s.json"), "--", "/nonexistent/cmd")
    assert result.returncode == 127
    assert read_values(WATCHED) == before


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A directory an unprivileged user can write (pytest's tmp_path is private to root)."""
    with tempfile.TemporaryDirectory(prefix="sysctl_profiles_") as d:
        os.chmod(d, 0o777)
        yield Path(d)


# The interpreter lives under /root here, which nobody cannot read: so import everything as root, then
# drop to nobody inside the process before the CLI runs — the euid check then sees a real non-root user.
RUN_AS_NOBODY = """
import os, sys
import sysctl_profiles.cli as cli
os.setgroups([]); os.setgid(65534); os.setuid(65534)
sys.argv[0] = "sysctl_profiles"
cli.main()
"""


def run_as_nobody(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", RUN_AS_NOBODY, *args], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )


NOBODY_CAN_READ = """
import os, sys
os.setgroups([]); os.setgid(65534); os.setuid(65534)
open(sys.argv[1], "rb").close()
"""


def test_not_root_is_recorded_as_not_applied(shared_tmp: Path) -> None:
    # The CLI reads the checkout's profiles as nobody. A checkout in a directory only root may enter (mode 0700,
    # as mktemp -d makes) is closed to it: that is the checkout's permissions, not the euid check under test.
    probe = subprocess.run([sys.executable, "-c", NOBODY_CAN_READ, str(PROFILES_DIR / "default.conf")],
                           capture_output=True, text=True, timeout=60, check=False)
    if probe.returncode != 0:
        pytest.skip(f"user nobody cannot read this checkout's profiles ({PROFILES_DIR}): it lies in a directory "
                    "only root may enter")
    before = read_values(WATCHED)
    command = ["sh", "-c", f"id -u > {shared_tmp}/ran; cat /proc/sys/vm/swappiness >> {shared_tmp}/ran"]
    stopped = run_as_nobody("apply", "seed-qa", "--record", f"{shared_tmp}/rec.json", "--", *command)
    assert stopped.returncode == 3, stopped.stderr
    assert not (shared_tmp / "ran").exists()
    record = json.loads((shared_tmp / "rec.json").read_text())
    assert record["applied"] is False and record["reason"].startswith("not root")
    assert record["values"]["vm.swappiness"] == before["vm.swappiness"]

    allowed = run_as_nobody("apply", "seed-qa", "--allow-unapplied", "--", *command)
    assert allowed.returncode == 0, allowed.stderr
    assert (shared_tmp / "ran").read_text().split() == ["65534", before["vm.swappiness"]]
    assert read_values(WATCHED) == before


def test_unwritable_record_stops_before_the_command_and_restores(
    tmp_path: Path, setup: tuple[Path, dict[str, str], dict[str, str]]
) -> None:
    profile, _, before = setup
    (tmp_path / "a-file").write_text("")
    result = run_cli(
        "apply", str(profile), "--record", str(tmp_path / "a-file" / "rec.json"),
        "--state-file", str(tmp_path / "s.json"), "--", "touch", str(tmp_path / "ran"),
    )  # fmt: skip
    assert result.returncode == 2
    assert "cannot write the record" in result.stderr
    assert not (tmp_path / "ran").exists()
    assert read_values(WATCHED) == before
