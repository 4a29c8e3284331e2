"""The client under gevent's monkey-patching (as locust runs it), in a subprocess so the patching stays there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def test_producer_and_push_consumer_work_under_gevent(topo) -> None:
    pytest.importorskip("gevent")
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    script = Path(__file__).with_name("gevent_roundtrip.py")
    done = subprocess.run([sys.executable, str(script), topo.namesrv_addr, "E2EGevent", "101"], env=env,
                          capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1] == "OK 101"
