"""The sandboxed filter worker (reference_broker/filtersrv/sandbox.py, filter_worker.py) on real worker
processes: correct verdicts, and each attack answered as an error without harm outside the worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from reference_broker.filtersrv.filter_worker import FilterWorker, Outcome, SandboxLimits, WorkerError
from reference_broker.filtersrv.sandbox import REFUSED_IMPORTS, SandboxViolation, audit_hook

MSGS = [("T", "A", "k0", b"body-0", {"n": "0"}), ("T", "B", "k1", b"body-1", {"n": "1"}),
        ("T", None, "", b"", {})]
LIMITS = SandboxLimits(cpu_s=10, memory_mib=256, budget_ms=100)
IS_ROOT = os.geteuid() == 0


def _run(source: str, msgs: list[tuple[str, str | None, str, bytes, dict[str, str]]] = MSGS) -> tuple[
        FilterWorker, object]:
    worker = FilterWorker(source, LIMITS)
    try:
        return worker, worker.match(msgs)
    finally:
        worker.kill()


def test_a_good_filter_sees_each_field_and_gets_its_verdicts() -> None:
    source = ("def match(m):\n"
              "    return (m.topic == 'T' and m.tags == 'A' and m.keys == 'k0' and m.body == b'body-0'\n"
              "            and m.properties == {'n': '0'})\n")
    _, verdicts = _run(source)
    assert verdicts.outcome is Outcome.OK  # type: ignore[attr-defined]
    assert verdicts.matched == (True, False, False)  # type: ignore[attr-defined]


def test_the_worker_reports_its_confinement_layers() -> None:
    worker = FilterWorker("def match(m):\n    return True\n", LIMITS)
    worker.start()
    try:
        assert {"audit-hook", "rlimit-cpu", "rlimit-as", "rlimit-fsize", "pdeathsig"} <= set(worker.layers)
        if IS_ROOT:
            assert {"netns", "uid-nobody", "ro-tmp", "rlimit-nproc"} <= set(worker.layers)
            assert worker.proc is not None
            status = Path(f"/proc/{worker.proc.pid}/status").read_text()
            uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
            assert uid_line.split()[1:] == ["65534"] * 4  # nobody, every uid
            assert os.readlink(f"/proc/{worker.proc.pid}/ns/net") != os.readlink("/proc/self/ns/net")
    finally:
        worker.kill()


@pytest.mark.parametrize(("source", "word"), [
    ("def match(m):\n    raise ValueError('attack')\n", "ValueError: attack"),
    ("def match(m):\n    while True:\n        pass\n", "BudgetExceeded"),
    ("def match(m):\n    return len(b'x' * 10**10) > 0\n", "MemoryError"),
    ("import os\ndef match(m):\n    os.kill(os.getppid(), 9)\n", "refuses os.kill"),
    ("import os\ndef match(m):\n    os.system('true')\n", "refuses os.system"),
    ("def match(m):\n    import subprocess\n", "refuses importing subprocess"),
    ("import os\ndef match(m):\n    os.fork()\n", "refuses os.fork"),
    ("def match(m):\n    import socket\n", "refuses importing socket"),
    ("import sys\ndef match(m):\n    sys.modules['_io'].FileIO('/tmp/x', 'w')\n", "for writing"),
    ("import os\ndef match(m):\n    os.open('/tmp/x', os.O_WRONLY | os.O_CREAT)\n", "for writing"),
    ("def match(m):\n    import ctypes\n", "refuses importing ctypes"),
])
def test_each_attack_is_a_filter_error(source: str, word: str) -> None:
    _, verdicts = _run(source)
    assert verdicts.outcome is Outcome.FILTER_ERROR  # type: ignore[attr-defined]
    assert word in verdicts.error  # type: ignore[attr-defined]


def test_a_write_attempt_leaves_no_file() -> None:
    marker = Path("/tmp") / f"sandbox-{uuid.uuid4().hex}"
    _, verdicts = _run(f"def match(m):\n    open({str(marker)!r}, 'w').write('x')\n")
    assert verdicts.outcome is Outcome.FILTER_ERROR  # type: ignore[attr-defined]
    assert not marker.exists()


def test_a_loop_that_swallows_the_budget_alarm_is_killed_at_the_deadline_and_the_worker_restarts() -> None:
    source = ("def match(m):\n    if m.tags == 'ok':\n        return True\n    while True:\n        try:\n"
              "            while True:\n                pass\n        except BaseException:\n            pass\n")
    worker = FilterWorker(source, LIMITS)
    try:
        t0 = time.monotonic()
        verdicts = worker.match(MSGS[:1])
        assert verdicts.outcome is Outcome.KILLED
        assert "deadline" in verdicts.error
        assert time.monotonic() - t0 < 5
        assert worker.proc is None  # killed and reaped
        again = worker.match([("T", "ok", "", b"", {})])  # a new worker with the same source
        assert again.outcome is Outcome.OK and again.matched == (True,)
        assert worker.starts == 2
    finally:
        worker.kill()


def test_a_sleeping_filter_uses_no_cpu_budget_but_meets_the_wall_clock_deadline() -> None:
    worker = FilterWorker("import time\ndef match(m):\n    time.sleep(30)\n", LIMITS)
    try:
        verdicts = worker.match(MSGS[:1])
        assert verdicts.outcome is Outcome.KILLED and "deadline" in verdicts.error
    finally:
        worker.kill()


def test_a_worker_that_exits_is_an_error_then_replaced() -> None:
    worker = FilterWorker("import os\ndef match(m):\n    if m.tags == 'die':\n        os._exit(3)\n"
                          "    return True\n", LIMITS)
    try:
        dead = worker.match([("T", "die", "", b"", {})])
        assert dead.outcome is Outcome.KILLED and "exit code 3" in dead.error
        assert worker.match([("T", "x", "", b"", {})]).matched == (True,)
    finally:
        worker.kill()


def test_garbage_on_the_workers_stdout_is_a_protocol_break() -> None:
    _, verdicts = _run("import os\ndef match(m):\n    os.write(1, b'\\x00\\x00\\x00\\x02R9')\n    return True\n")
    assert verdicts.outcome is Outcome.KILLED  # type: ignore[attr-defined]
    assert "protocol" in verdicts.error  # type: ignore[attr-defined]


@pytest.mark.parametrize(("source", "word"), [
    ("def match(m)\n", "SyntaxError"),
    ("x = 1\n", "does not define match"),
    ("raise SystemExit(0)\n", "SystemExit"),
    ("import socket\n", "refuses importing socket"),
])
def test_a_bad_source_is_refused_at_start(source: str, word: str) -> None:
    worker = FilterWorker(source, LIMITS)
    with pytest.raises(WorkerError, match=word):
        worker.start()
    assert worker.proc is None


def test_a_worker_dies_with_its_filter_server() -> None:
    """PR_SET_PDEATHSIG: a process starting a worker (here a stand-in for the filter server) is killed -9;
    the worker, even in an endless loop, goes with it."""
    code = ("import sys, time\n"
            "from reference_broker.filtersrv.filter_worker import FilterWorker, SandboxLimits\n"
            "w = FilterWorker('def match(m):\\n    return True\\n', SandboxLimits())\n"
            "w.start()\n"
            "print(w.proc.pid, flush=True)\n"
            "time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert parent.stdout is not None
        worker_pid = int(parent.stdout.readline())
        assert Path(f"/proc/{worker_pid}").exists()
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 5
        while Path(f"/proc/{worker_pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not Path(f"/proc/{worker_pid}").exists()  # reaped by init once killed
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()


def test_the_audit_hook_refuses_what_it_names_and_lets_reads_through() -> None:
    with pytest.raises(SandboxViolation):
        audit_hook("os.kill", (1, 9))
    with pytest.raises(SandboxViolation):
        audit_hook("socket.connect", (None, ("127.0.0.1", 1)))
    with pytest.raises(SandboxViolation):
        audit_hook("open", ("/tmp/x", "a", 0))
    with pytest.raises(SandboxViolation):
        audit_hook("open", ("/tmp/x", None, os.O_RDWR))
    for name in REFUSED_IMPORTS:
        with pytest.raises(SandboxViolation):
            audit_hook("import", (name, None, [], [], []))
    audit_hook("open", ("/etc/hostname", "r", os.O_RDONLY))
    audit_hook("import", ("json", None, [], [], []))
    audit_hook("compile", (b"", "<x>"))


def test_the_sandbox_benchmark_measures_both_paths() -> None:
    from reference_broker.bench.filter_bench import run_sandbox

    rows = run_sandbox(batches=2, batch_size=4, body_size=16)
    assert [what.split(" (")[0].split(",")[0] for what, _ in rows] == [
        "match() in a sandboxed worker", "the same match() in this process", "a worker's start"]
    assert all(us > 0 for _, us in rows)


@pytest.mark.skipif(not IS_ROOT, reason="mount namespaces need root")
def test_a_hidden_directory_reads_as_empty_in_the_worker(tmp_path_factory: pytest.TempPathFactory) -> None:
    # Outside /tmp, /var/tmp and /dev/shm, which every worker sees as empty tmpfs anyway (the working tree may
    # itself lie under /tmp, as in a CI clone): /run, root's and world-readable here.
    secret_dir = Path("/run") / f"rmq-sandbox-secret-{uuid.uuid4().hex}"
    secret_dir.mkdir()
    try:
        (secret_dir / "commitlog").write_text("other groups' messages")
        os.chmod(secret_dir, 0o755)
        os.chmod(secret_dir / "commitlog", 0o644)
        source = f"import os\ndef match(m):\n    return bool(os.listdir({str(secret_dir)!r}))\n"
        plain = FilterWorker(source, LIMITS)
        hidden = FilterWorker(source, SandboxLimits(10, 256, 100, hidden_paths=(str(secret_dir),)))
        try:
            seen = plain.match(MSGS[:1])
            if seen.outcome is Outcome.OK:  # the directory is reachable by nobody here
                assert seen.matched == (True,)
            assert hidden.match(MSGS[:1]).matched == (False,)
            assert "hidden-paths" in hidden.layers
        finally:
            plain.kill()
            hidden.kill()
    finally:
        (secret_dir / "commitlog").unlink()
        secret_dir.rmdir()
