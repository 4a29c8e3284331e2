"""``admin checkStore`` accepts a store the real RocketMQ 4.9.8 broker wrote and stopped cleanly.

RocketMQ pre-allocates the next commit-log file (all zeros) ahead of the writer, sizes consume-queue and index
files up front, and writes no whole-record CRC: none of that is damage. The distribution is found at
``$ROCKETMQ_HOME`` or ``../shared/rocketmq-4.9.8`` beside the repository (its README says how to run it);
the test skips when it or Java is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.ports import free_port
from reference_broker.client import ClientConfig, Message, Producer
from reference_broker.tools import admin

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
TOPIC = "CheckStoreTopic"
N = 500
BOOT_TIMEOUT_S = 40.0


def _distribution() -> Path | None:
    env = os.environ.get("ROCKETMQ_HOME")
    home = Path(env) if env else REPO.parent / "shared" / "rocketmq-4.9.8"
    return home if (home / "bin" / "mqbroker").is_file() and (home / "lib").is_dir() else None


def _skip_reason() -> str | None:
    if _distribution() is None:
        return "RocketMQ 4.9.8 distribution not found ($ROCKETMQ_HOME or ../shared/rocketmq-4.9.8)"
    if shutil.which(os.environ.get("JAVA", "java")) is None:
        return "no java on PATH (RocketMQ 4.9.8 needs Java 17)"
    return None


def _broker_ports() -> int:
    """A listenPort whose VIP channel (port - 2) and HA port (port + 1) are free too."""
    for _ in range(50):
        p = free_port()
        if p > 1100 and all(_free(q) for q in (p - 2, p + 1)):
            return p
    raise RuntimeError("no free port triple for the RocketMQ broker")


def _free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class _Java:
    """One RocketMQ process started through the distribution's script (which execs java: its pid is ours)."""

    def __init__(self, script: Path, args: list[str], log: Path, env: dict[str, str]) -> None:
        self.log = log
        self._out = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([str(script), *args], stdout=self._out, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)

    def wait_boot(self) -> None:
        deadline = time.monotonic() + BOOT_TIMEOUT_S
        while time.monotonic() < deadline:
            if b"boot success" in self.log.read_bytes():
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"{self.log.name}: no 'boot success': {self.log.read_text(errors='replace')[-2000:]}")

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM (the JVM's shutdown hooks stop the store cleanly), SIGKILL if it hangs."""
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)
            return self.proc.returncode
        finally:
            self._out.close()


@pytest.fixture
def rocketmq(tmp_path: Path) -> Iterator[tuple[str, str, Path, _Java]]:
    reason = _skip_reason()
    if reason is not None:
        pytest.skip(reason)
    home = _distribution()
    assert home is not None
    store = tmp_path / "rmq-store"
    env = {**os.environ, "ROCKETMQ_HOME": str(home), "JAVA_OPT_EXT": f"-Duser.home={tmp_path / 'rmq-home'}",
           "ROCKETMQ_HEAP": "512m", "ROCKETMQ_DIRECT": "256m"}
    ns_port, port = free_port(), _broker_ports()
    (tmp_path / "ns.conf").write_text(f"listenPort={ns_port}\n")
    (tmp_path / "broker.conf").write_text(
        f"brokerName=broker-a\nbrokerIP1=127.0.0.1\nnamesrvAddr=127.0.0.1:{ns_port}\nlistenPort={port}\n"
        f"storePathRootDir={store}\nstorePathCommitLog={store / 'commitlog'}\nautoCreateTopicEnable=true\n"
        "mappedFileSizeCommitLog=67108864\n")
    procs: list[_Java] = []
    try:
        ns = _Java(home / "bin" / "mqnamesrv", ["-c", str(tmp_path / "ns.conf")], tmp_path / "namesrv.out", env)
        procs.append(ns)
        ns.wait_boot()
        broker = _Java(home / "bin" / "mqbroker", ["-n", f"127.0.0.1:{ns_port}", "-c", str(tmp_path / "broker.conf")],
                       tmp_path / "broker.out", env)
        procs.append(broker)
        broker.wait_boot()
        yield f"127.0.0.1:{ns_port}", f"127.0.0.1:{port}", store, broker
    finally:
        for p in reversed(procs):
            p.stop()


def _check(store: Path) -> tuple[int, dict[str, object]]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-m", "reference_broker", "admin", "checkStore", str(store), "--json"],
                       capture_output=True, text=True, env=env, timeout=120)
    return r.returncode, json.loads(r.stdout)


def _send(namesrv: str, addr: str) -> None:
    # The topic is created on the broker directly; the producer finds its route (RocketMQ's broker registers
    # it with the name server within moments; until then autoCreateTopicEnable's default route serves).
    admin.update_topic(namesrv, TOPIC, 4, 4, broker_addr=addr)
    cfg = ClientConfig(namesrv, "checkstore-rmq", poll_name_server_interval_s=1.0)
    with Producer("CHECKSTORE_PG", namesrv, client_config=cfg) as p:
        for i in range(N):
            keys = f"k{i}" if i % 3 else f"k{i} extra{i}"  # some with two KEYS tokens
            p.send(Message(TOPIC, b"x" * (100 + i % 50), tags=f"T{i % 4}", keys=keys))


def test_store_written_by_rocketmq_498_is_clean(rocketmq: tuple[str, str, Path, _Java]) -> None:
    namesrv, addr, store, broker = rocketmq
    _send(namesrv, addr)
    assert broker.stop() is not None
    assert not (store / "abort").exists(), "RocketMQ did not stop cleanly"
    code, out = _check(store)
    assert code == 0, json.dumps(out, indent=2)[:4000]
    counts = out["counts"]
    assert isinstance(counts, dict)
    assert counts["commitlog_records"] == N
    assert counts["cq_units"] == N
    assert counts["index_entries"] == N + N + -(-N // 3)  # UNIQ_KEY, the first KEYS token, every third a second
    assert out["clean_stop"] is True


def test_rocketmq_store_killed_with_its_preallocated_file_is_accepted(rocketmq: tuple[str, str, Path, _Java]) -> None:
    """A SIGKILLed RocketMQ leaves ``abort`` and the next commit-log file it pre-allocated (all zeros):
    a warning and relaxed checks, not problems."""
    namesrv, addr, store, broker = rocketmq
    _send(namesrv, addr)
    time.sleep(1.0)  # let its reput thread build the last units (the check relaxes this anyway)
    broker.proc.kill()
    broker.stop()
    logs = sorted(p.name for p in (store / "commitlog").iterdir())
    assert len(logs) == 2 and (store / "abort").exists(), logs  # the pre-allocated file is there
    code, out = _check(store)
    assert code == 0, json.dumps(out, indent=2)[:4000]
    assert out["clean_stop"] is False
    assert out["counts"]["commitlog_records"] == N  # type: ignore[index]
    assert any("not cleanly stopped" in w for w in out["warnings"])  # type: ignore[union-attr]
