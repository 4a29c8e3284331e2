"""harness/launcher.py: a topology stops every broker it started, those added after its start included, and
kill() ends them all without a graceful stop."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.launcher import Process, Topology

pytestmark = pytest.mark.e2e


def test_a_broker_added_later_is_stopped_with_the_topology(tmp_path):
    with Topology(tmp_path / "topo", brokers=0) as topo:
        broker = topo.add_broker("late")
        assert broker.alive and topo.brokers == [broker]
    assert not broker.alive
    assert topo.namesrv is not None and not topo.namesrv.alive


def test_kill_ends_every_process_without_a_graceful_stop(tmp_path):
    with Topology(tmp_path / "topo") as topo:
        (broker,) = topo.brokers
        topo.kill()
        assert not broker.alive and topo.namesrv is not None and not topo.namesrv.alive
        assert broker.proc is not None and broker.proc.returncode == -9
        assert (broker.store_root / "abort").exists(), "a killed broker leaves its abort file"


def test_pause_returns_once_the_process_is_stopped(tmp_path):
    """SIGSTOP is delivered asynchronously: pause() waits until /proc says the process is stopped, so whatever
    the caller does next (a send a paused slave must not acknowledge) cannot race the process's threads."""
    spin = "while True: pass\n"
    p = Process("spin", [sys.executable, "-c", f"print('ready', flush=True)\n{spin}"], tmp_path / "spin.log", "ready")
    p.start()
    try:
        p.pause()
        state = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        assert state in ("T", "t")
        p.resume()
    finally:
        p.kill()
