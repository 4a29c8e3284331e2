"""Fixtures of the interop suite: a topology per module and broker implementation, and the C++ client's driver.

``broker`` is parametrized over the reference broker and Apache RocketMQ 4.9.8 (``ROCKETMQ_HOME``, the
``rocketmq_home`` fixture; that variant is marked slow), so that each test states one behaviour and holds it
against both: the suite is the differential. ``cpp`` runs tests/interop/cpp_client.py in a subprocess with a
timeout and a private HOME (the C++ client writes its logs to ``$HOME/logs/rocketmq-cpp`` and a broadcast
consumer's offsets to ``$HOME/.rocketmq_offsets``; they stay in the test's tmp_path).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from harness.launcher import Topology

DRIVER = Path(__file__).with_name("cpp_client.py")
# Every delay level 1 s: a delayed send, each retry (level 3 + reconsume times) and the road to the DLQ
# take seconds instead of 4.9.8's 10 s, 30 s, 1 min, ...
DELAY_LEVELS = " ".join(["1s"] * 18)


@cache
def cpp_unavailable() -> str | None:
    """Why the C++ client cannot run here (None: it can): PyPI's ``rocketmq`` must import, which loads its
    ``librocketmq.so`` (it needs libstdc++6)."""
    done = subprocess.run([sys.executable, "-c", "import rocketmq.client"], capture_output=True, text=True,
                          timeout=60)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        return f"RocketMQ's C++ client (PyPI rocketmq 0.4.x, pip install -e '.[interop]') does not load: {last}"
    return None


@dataclass
class Running:
    """A driver process started in the background, writing its lines to files (no pipe to fill or drain)."""

    proc: subprocess.Popen[bytes]
    what: str
    out: Path
    err: Path

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.out.read_text().splitlines() if line.startswith("{")]

    def wait_started(self, timeout: float = 30) -> None:
        """Until the driver says its consumer started (``{"started": true}``)."""
        deadline = time.monotonic() + timeout
        while not any(line.get("started") for line in self.lines()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the C++ client ({self.what}) did not start:\n{self.err.read_text()[-3000:]}")
            time.sleep(0.05)

    def result(self, timeout: float) -> list[dict[str, Any]]:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"the C++ client ({self.what}) did not finish within {timeout} s; it printed:\n"
                        f"{self.out.read_text()[-3000:]}\n{self.err.read_text()[-3000:]}")
        assert self.proc.returncode == 0, f"{self.what} exited with {self.proc.returncode}:\n" \
                                          f"{self.err.read_text()[-3000:]}"
        return [line for line in self.lines() if not line.get("started")]


@dataclass
class Cpp:
    home: Path
    runs: int = 0

    def start(self, action: str, spec: dict[str, Any]) -> Running:
        env = {k: v for k, v in os.environ.items() if k != "ROCKETMQ_HOME"}  # the client reads it too
        env["HOME"] = str(self.home)
        self.runs += 1
        out, err = self.home / f"{self.runs}-{action}.jsonl", self.home / f"{self.runs}-{action}.err"
        with open(out, "wb") as o, open(err, "wb") as e:
            proc = subprocess.Popen([sys.executable, str(DRIVER), action, json.dumps(spec)], stdout=o, stderr=e,
                                    env=env, stdin=subprocess.DEVNULL)
        return Running(proc, action, out, err)

    def __call__(self, action: str, spec: dict[str, Any], timeout: float = 60) -> list[dict[str, Any]]:
        return self.start(action, spec).result(timeout)


@pytest.fixture
def cpp(tmp_path: Path) -> Cpp:
    reason = cpp_unavailable()
    if reason is not None:
        pytest.skip(reason)
    home = tmp_path / "cpp-home"
    home.mkdir()
    return Cpp(home)


@dataclass
class Broker:
    impl: str
    topo: Topology

    @property
    def ns(self) -> str:
        return self.topo.namesrv_addr

    @property
    def addr(self) -> str:
        return self.topo.brokers[0].addr


@pytest.fixture(scope="module", params=["reference", pytest.param("rocketmq", marks=pytest.mark.slow)])
def broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """One name server and broker-a for the module's tests (each uses its own topics and groups)."""
    reason = cpp_unavailable()
    if reason is not None:
        pytest.skip(reason)
    impl = request.param
    home = request.getfixturevalue("rocketmq_home") if impl == "rocketmq" else None
    topo = Topology(tmp_path_factory.mktemp(f"interop-{impl}"), broker_conf={"messageDelayLevel": DELAY_LEVELS},
                    impl=impl, rocketmq_home=home)
    with topo:
        yield Broker(impl, topo)
        if impl == "rocketmq":
            topo.kill()  # its store is thrown away: no need for 4.9.8's ~10 s graceful stop
