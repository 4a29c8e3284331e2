"""The read-only commands (list, show, diff, values, restore with nothing to do) and usage errors."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from sysctl_profiles.cli import ExitCode, main
from sysctl_profiles.procsys import mem_total_bytes, read_values


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_list_names_the_shipped_profiles() -> None:
    code, out, _ = invoke("list")
    assert code == 0
    assert out.split() == ["default", "low-latency-async", "rocketmq-os", "seed-qa"]


def test_show_prints_notes_and_the_scaled_values_for_this_machine() -> None:
    code, out, _ = invoke("show", "seed-qa")
    assert code == 0
    expected = 7000000 * mem_total_bytes() // (96 << 30)
    assert f"vm.min_free_kbytes = 7000000 * ram / 96GiB    # = {expected} here" in out
    assert "# Q9 (page cache vs swap)" in out


def test_diff_same_and_differs(tmp_path: Path) -> None:
    now = read_values(["vm.swappiness", "vm.max_map_count"])
    same = tmp_path / "same.conf"
    same.write_text(f"vm.swappiness = {now['vm.swappiness']}\nvm.max_map_count = @keep\n")
    code, out, _ = invoke("diff", str(same))
    assert code == ExitCode.OK
    assert "same" in out and "record only" in out
    differs = tmp_path / "differs.conf"
    differs.write_text(f"vm.swappiness = {int(now['vm.swappiness']) + 1}\n")
    code, out, _ = invoke("diff", str(differs))
    assert code == ExitCode.DIFFERS
    assert "differs" in out


def test_diff_bad_profile_is_trouble(tmp_path: Path) -> None:
    bad = tmp_path / "bad.conf"
    bad.write_text("vm.no_such_knob = 1\n")
    code, _, err = invoke("diff", str(bad))
    assert code == ExitCode.ERROR
    assert "unknown key vm.no_such_knob" in err


def test_unknown_profile_name() -> None:
    code, _, err = invoke("show", "no-such-profile")
    assert code == ExitCode.ERROR
    assert "no profile named 'no-such-profile'" in err and "rocketmq-os" in err


def test_values_prints_in_force_and_fails_on_unknown() -> None:
    code, out, _ = invoke("values", "vm.swappiness")
    assert code == 0 and out == f"vm.swappiness = {read_values(['vm.swappiness'])['vm.swappiness']}\n"
    code, _, err = invoke("values", "vm.nope")
    assert code == ExitCode.ERROR and "no such key" in err


def test_apply_needs_a_command() -> None:
    code, _, err = invoke("apply", "default")
    assert code == 2 and "COMMAND" in err


def test_restore_without_state_file_does_nothing(tmp_path: Path) -> None:
    code, _, err = invoke("restore", str(tmp_path / "absent.json"))
    assert code == 0 and "nothing to restore" in err
