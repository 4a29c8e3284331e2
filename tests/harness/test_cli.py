"""``python -m harness check|validate`` as a user runs it: output and exit codes, in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.harness.runs import write_run

ROOT = Path(__file__).resolve().parents[2]


def harness(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def send(key: str, **kw: object) -> dict[str, object]:
    return dict(op="send", key=key, **kw)


def recv(key: str, **kw: object) -> dict[str, object]:
    return dict(op="receive", key=key, worker="c0", **kw)


def test_check_clean_run_exits_0_prints_a_summary_and_writes_check_json(tmp_path: Path) -> None:
    run = write_run(tmp_path, [send("a"), send("b"), recv("a"), recv("b")])
    out = harness("check", str(run))
    assert out.returncode == 0, out.stderr
    assert "verdict: VALID" in out.stdout and "acknowledged" in out.stdout
    check = json.loads((run / "check.json").read_text())
    assert (check["acknowledged"], check["lost"], check["valid"], check["run_id"]) == (2, 0, True, run.name)


def test_check_lost_exits_1_unless_loss_is_allowed(tmp_path: Path) -> None:
    run = write_run(tmp_path, [send("a", bytes=512), send("b"), recv("b")])
    out = harness("check", str(run))
    assert out.returncode == 1
    assert "verdict: INVALID (1 lost)" in out.stdout and "sample lost: a" in out.stdout
    out = harness("check", str(run), "--allow-loss", "--json")
    assert out.returncode == 0
    check = json.loads(out.stdout)
    assert (check["lost"], check["lost_bytes"], check["allow_loss"], check["valid"]) == (1, 512, True, True)
    assert json.loads((run / "check.json").read_text()) == check


def test_check_unexpected_exits_1_even_with_allow_loss(tmp_path: Path) -> None:
    run = write_run(tmp_path, [send("a"), recv("a"), recv("ghost")])
    out = harness("check", str(run), "--allow-loss")
    assert out.returncode == 1 and "1 unexpected" in out.stdout


def test_check_duplicates_and_recovered_do_not_fail(tmp_path: Path) -> None:
    run = write_run(tmp_path, [send("a"), send("u", outcome="unknown"), recv("a"), recv("a"), recv("u")])
    out = harness("check", str(run), "--json")
    assert out.returncode == 0
    check = json.loads(out.stdout)
    assert (check["duplicated"], check["recovered"]) == (1, 1)


def test_order_violations_fail_an_ordered_run_only(tmp_path: Path) -> None:
    rows = [send("a", queue_offset=0), send("b", queue_offset=1, start_ns=10, end_ns=11),
            recv("b", queue_offset=1, end_ns=100), recv("a", queue_offset=0, end_ns=101)]
    unordered = write_run(tmp_path / "u", rows)
    assert harness("check", str(unordered)).returncode == 0
    assert harness("check", str(unordered), "--ordered").returncode == 1
    ordered = write_run(tmp_path / "o", rows, params={"ordered": True})
    out = harness("check", str(ordered))
    assert out.returncode == 1 and "1 order violations" in out.stdout and "T/0: 1" in out.stdout


def test_check_on_something_that_is_not_a_run_exits_2_with_the_reason(tmp_path: Path) -> None:
    out = harness("check", str(tmp_path))
    assert out.returncode == 2
    assert "not a run directory: no meta.json" in out.stderr and out.stdout == ""
    out = harness("check", str(tmp_path / "missing"))
    assert out.returncode == 2 and "no such directory" in out.stderr


def test_check_on_an_invalid_run_exits_2_and_lists_the_problems(tmp_path: Path) -> None:
    run = write_run(tmp_path, [send("a"), recv("a")])
    meta = json.loads((run / "meta.json").read_text())
    meta["schema_version"] = 9
    (run / "meta.json").write_text(json.dumps(meta))
    out = harness("check", str(run))
    assert out.returncode == 2 and "schema_version 9" in out.stderr
    assert not (run / "check.json").exists()


def test_validate_exit_codes(tmp_path: Path) -> None:
    run = write_run(tmp_path, [send("a"), recv("a")], fmt="jsonl")
    out = harness("validate", str(run))
    assert out.returncode == 0 and "valid run record" in out.stdout
    (run / "events.jsonl").unlink()
    out = harness("validate", str(run), "--json")
    assert out.returncode == 2
    assert json.loads(out.stdout) == {"valid": False, "problems": ["no events: neither events/ nor events.jsonl"]}
