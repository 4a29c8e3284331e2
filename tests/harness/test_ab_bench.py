"""harness/ab_bench.py: two revisions checked out into worktrees, each running its own name server and broker at
once, the same lean load to each in turn, paired by round; the worktrees are gone afterwards."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import ab_bench
from harness.ab_bench import AbError, Side, summarize
from reference_broker.common import compiled


def _side(label: str, tps: list[float]) -> Side:
    s = Side(label, label, ab_bench.REPO)
    s.runs = [{"send_tps": t, "p50_ms": 1.0, "broker_cpu_us_per_msg": 1e6 / t} for t in tps]
    return s


def test_the_ratio_is_paired_by_round() -> None:
    # The machine slowed down in round 2 for both: pairing by round keeps new/old at 0.9 in each.
    r = summarize([_side("old", [100.0, 50.0]), _side("new", [90.0, 45.0])], {})
    assert r["tps_ratio_mean"] == pytest.approx(0.9)
    assert r["tps_ratio_sd"] == pytest.approx(0.0, abs=1e-12)
    assert r["old"]["tps_mean"] == 75.0 and r["new"]["tps_mean"] == 67.5
    assert "0.900" in ab_bench.format_result({**r, "plan": {"load": "single_64", "mode": "ASYNC_FLUSH",
                                                            "rounds": 2, "seconds": 1.0}})


def test_an_unknown_revision_is_a_clear_error() -> None:
    with pytest.raises(AbError, match="no-such-revision"):
        ab_bench.compare("no-such-revision", "HEAD", rounds=2)


def test_one_round_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 2 rounds"):
        ab_bench.compare("HEAD", "HEAD", rounds=1)


def test_an_unknown_generator_is_refused() -> None:
    with pytest.raises(ValueError, match="generator"):
        ab_bench.compare("HEAD", "HEAD", rounds=2, generator="theirs")


@pytest.mark.parametrize(("generator", "expected"), [(None, "side"), (ab_bench.REPO, "repo")])
def test_the_producer_runs_from_the_generator_tree(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                   generator: Path | None, expected: str) -> None:
    # The generator shares the cores with the broker: which tree it runs from decides what is compared.
    seen: dict[str, object] = {}

    def fake_run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        seen.update(kw)
        return subprocess.CompletedProcess(cmd, 0, '{"send_tps": 10.0, "messages": 0}', "")

    monkeypatch.setattr(ab_bench.subprocess, "run", fake_run)
    monkeypatch.setattr(ab_bench, "cpu_seconds", lambda _pid: 0.0)
    side = Side("old", "x", tmp_path, namesrv="127.0.0.1:1", pid=1)
    ab_bench._produce(side, [], generator)
    tree = tmp_path if expected == "side" else ab_bench.REPO
    assert seen["cwd"] == tree
    env = seen["env"]
    assert isinstance(env, dict) and env["PYTHONPATH"] == str(tree)


def _worktrees() -> list[str]:
    out = subprocess.run(["git", "-C", str(ab_bench.REPO), "worktree", "list"], capture_output=True, text=True)
    return out.stdout.splitlines()


@pytest.mark.e2e
@pytest.mark.slow
def test_two_revisions_run_side_by_side_and_leave_no_worktree() -> None:
    if subprocess.run(["git", "-C", str(ab_bench.REPO), "rev-parse", "HEAD"], capture_output=True).returncode:
        pytest.skip("not a git checkout: ab-bench compares git revisions")
    before = _worktrees()
    r = ab_bench.compare("HEAD", "HEAD", rounds=2, seconds=1.0, progress=lambda _line: None)
    for label in ("old", "new"):
        runs = r[label]["runs"]
        assert len(runs) == 2 and all(run["send_tps"] > 0 and run["broker_cpu_us_per_msg"] > 0 for run in runs)
    assert r["tps_ratio_mean"] > 0
    assert _worktrees() == before


@pytest.mark.skipif(not compiled.compiled_available("_record_c"), reason="the compiled twins are not built here")
def test_a_checked_out_revision_gets_its_compiled_twins(tmp_path: Path) -> None:
    """Built modules are not in git: without a build, a revision's broker would run the pure path while this
    checkout's runs the compiled one, and the comparison would measure that."""
    with ab_bench.worktree("HEAD", tmp_path / "tree") as tree:
        built = {p.name.split(".")[0] for p in (tree / "reference_broker" / "common").glob("_*_c.*.so")}
        assert built == set(compiled.MODULES)
    assert not (tmp_path / "tree").exists()


def test_each_side_runs_its_topology_on_its_own_interpreter(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``--old-python``/``--new-python``: the same revision on two interpreters is what is compared, so each
    side's name server and broker start from that side's interpreter, and the report names both."""
    started: list[str] = []

    class FakeProc:
        def __init__(self, cmd: list[str], **kw: object) -> None:
            started.append(cmd[0])
            self.stdin = None
            self.stdout = iter_lines('{"namesrv": "127.0.0.1:1", "pid": 1}\n')

        def wait(self, timeout: float | None = None) -> int:
            return 0

    class iter_lines:
        def __init__(self, text: str) -> None:
            self.text = text

        def readline(self) -> str:
            line, self.text = self.text, ""
            return line

        def close(self) -> None:
            pass

    monkeypatch.setattr(ab_bench.subprocess, "Popen", FakeProc)
    with ab_bench.running(Side("old", "x", tmp_path, "/opt/py-a/bin/python"), tmp_path / "a", "ASYNC_FLUSH") as side:
        assert side.namesrv == "127.0.0.1:1"
    with ab_bench.running(Side("new", "x", tmp_path), tmp_path / "b", "ASYNC_FLUSH"):
        pass
    assert started == ["/opt/py-a/bin/python", ab_bench.sys.executable]
    r = summarize([_side("old", [100.0, 50.0]), _side("new", [90.0, 45.0])], {})
    text = ab_bench.format_result({**r, "plan": {"load": "single_64", "mode": "ASYNC_FLUSH", "rounds": 2,
                                                 "seconds": 1.0, "pythons": ["/opt/py-a/bin/python", "/usr/bin/py"]}})
    assert "on /opt/py-a/bin/python" in text and "on /usr/bin/py" in text


def test_each_sides_broker_conf_reaches_its_topology(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``--old-conf``/``--new-conf``: the same revision with a key off and on is what is compared."""
    cmds: list[list[str]] = []

    class FakeProc:
        def __init__(self, cmd: list[str], **kw: object) -> None:
            cmds.append(cmd)
            self.stdin = None
            self.stdout = io.StringIO('{"namesrv": "127.0.0.1:1", "pid": 1}\n')

        def wait(self, timeout: float | None = None) -> int:
            return 0

    monkeypatch.setattr(ab_bench.subprocess, "Popen", FakeProc)
    with ab_bench.running(Side("new", "x", tmp_path, conf={"dispatchInSeparateProcess": "true"}), tmp_path / "b",
                          "ASYNC_FLUSH"):
        pass
    with ab_bench.running(Side("old", "x", tmp_path), tmp_path / "a", "SYNC_FLUSH"):
        pass
    assert [json.loads(c[-1]) for c in cmds] == [{"dispatchInSeparateProcess": "true"}, {}]
    assert [c[-2] for c in cmds] == ["ASYNC_FLUSH", "SYNC_FLUSH"]


def test_the_cpu_of_a_brokers_children_is_read() -> None:
    busy = subprocess.Popen([sys.executable, "-c", "import time\nt = time.process_time()\n"
                             "while time.process_time() - t < 0.3: pass\ntime.sleep(5)"])
    try:
        deadline = time.monotonic() + 10
        while ab_bench.children_cpu_seconds(os.getpid()) < 0.25:
            assert time.monotonic() < deadline, "the child's CPU was not seen"
            time.sleep(0.05)
    finally:
        busy.kill()
        busy.wait()
