"""``admin checkStore`` accepts a store the real RocketMQ 4.9.8 broker wrote and stopped cleanly.

RocketMQ pre-allocates the next commit-log file (all zeros) ahead of the writer, sizes consume-queue and index
files up front, and writes no whole-record CRC: none of that is damage. The distribution is found at
``$ROCKETMQ_HOME`` or ``../shared/rocketmq-4.9.8`` beside the repository and started by the launcher
(harness/rocketmq.py); the test skips when it or Java is missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.launcher import BrokerProcess, Topology
from reference_broker.client import ClientConfig, Message, Producer
from reference_broker.tools import admin

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
TOPIC = "CheckStoreTopic"
N = 500


RocketMQ = tuple[str, str, Path, BrokerProcess]  # name server, broker address, store root, broker


@pytest.fixture
def rocketmq_498(tmp_path: Path, rocketmq_home: Path) -> Iterator[RocketMQ]:
    with Topology(tmp_path / "rmq", broker_conf={"mappedFileSizeCommitLog": 67108864}, impl="rocketmq",
                  rocketmq_home=rocketmq_home) as topo:
        broker = topo.brokers[0]
        yield topo.namesrv_addr, broker.addr, broker.store_root, broker


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


def test_store_written_by_rocketmq_498_is_clean(rocketmq_498: RocketMQ) -> None:
    namesrv, addr, store, broker = rocketmq_498
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


def test_rocketmq_store_killed_with_its_preallocated_file_is_accepted(rocketmq_498: RocketMQ) -> None:
    """A SIGKILLed RocketMQ leaves ``abort`` and the next commit-log file it pre-allocated (all zeros):
    a warning and relaxed checks, not problems."""
    namesrv, addr, store, broker = rocketmq_498
    _send(namesrv, addr)
    time.sleep(1.0)  # let its reput thread build the last units (the check relaxes this anyway)
    broker.kill()
    logs = sorted(p.name for p in (store / "commitlog").iterdir())
    assert len(logs) == 2 and (store / "abort").exists(), logs  # the pre-allocated file is there
    code, out = _check(store)
    assert code == 0, json.dumps(out, indent=2)[:4000]
    assert out["clean_stop"] is False
    assert out["counts"]["commitlog_records"] == N  # type: ignore[index]
    assert any("not cleanly stopped" in w for w in out["warnings"])  # type: ignore[union-attr]
