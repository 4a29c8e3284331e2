"""RocketMQ 4.9.8's own Java client (the distribution's lib/, driven by tests/java/JavaClientDriver.java) against
the reference broker: sync, batch, orderly and delayed sends, then a push consumer that gets every message, with
its key, body, user property and queue offset as the sends reported them, and a retry through the broker.

The other direction (the project's client against RocketMQ's broker) is tests/harness/test_launcher_rocketmq.py
and the scenarios' --broker-impl rocketmq run. Skipped, with the reason, without the distribution or java.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.launcher import Topology
from reference_broker.tools import admin

pytestmark = pytest.mark.e2e

DRIVER = Path(__file__).resolve().parents[1] / "java" / "JavaClientDriver.java"
TOPIC = "JavaClientTopic"
# Short delay levels: a delayed send and a retry (level 3 + reconsume times) arrive within seconds.
LEVELS = " ".join(["1s"] * 18)


@dataclass(frozen=True)
class Driver:
    home: Path
    classes: Path  # JavaClientDriver compiled once (a single-file launch compiles it on every run)

    def __call__(self, *args: str, timeout: float = 120) -> list[dict[str, Any]]:
        env = {**os.environ, "ROCKETMQ_HOME": str(self.home)}
        # rebalance.waitInterval: the consumer's rebalance runs every second instead of every 20 s
        done = subprocess.run(["java", "-Xmx256m", "-XX:TieredStopAtLevel=1",
                               "-Drocketmq.client.rebalance.waitInterval=1000", "-cp",
                               f"{self.classes}:{self.home}/lib/*", "JavaClientDriver", *args],
                              capture_output=True, text=True, timeout=timeout, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def java(tmp_path_factory: pytest.TempPathFactory, rocketmq_home: Path) -> Driver:
    if shutil.which("javac") is None:
        pytest.skip("no javac on PATH (Debian: openjdk-17-jdk-headless)")
    home = rocketmq_home
    classes = tmp_path_factory.mktemp("java-driver")
    subprocess.run(["javac", "-d", str(classes), "-cp", f"{home}/lib/*", str(DRIVER)], check=True, timeout=120)
    return Driver(home, classes)


def test_the_java_client_sends_and_consumes_through_the_reference_broker(tmp_path: Path, java: Driver) -> None:
    with Topology(tmp_path / "t", broker_conf={"messageDelayLevel": LEVELS}) as topo:
        admin.update_topic(topo.namesrv_addr, TOPIC, 4, 4, broker_addr=topo.brokers[0].addr)
        ns = topo.namesrv_addr
        out = java("produce", ns, TOPIC, "send:8", "batch:5", "orderly:8", "delay:2:1")
        sent, (batch,), ordered, delayed = out[:8], out[8:9], out[9:17], out[17:]
        assert [s["status"] for s in sent] == ["SEND_OK"] * 8
        assert {s["broker"] for s in sent} == {"broker-a"} and {s["queueId"] for s in sent} == {0, 1, 2, 3}
        # offsetMsgId: the broker's store host (127.0.0.1 and its port) and the commit-log offset, as the broker
        # answered; msgId is the client's own UNIQ_KEY (its length follows the client's address family)
        store_host = "7F000001" + f"{topo.brokers[0].port:08X}"
        assert all(s["offsetMsgId"][:16] == store_host and len(s["offsetMsgId"]) == 32 for s in sent)
        assert len({int(s["offsetMsgId"][16:], 16) for s in sent}) == 8 and all(int(s["msgId"], 16) for s in sent)
        assert batch["status"] == "SEND_OK" and len(batch["msgId"].split(",")) == 5
        assert [o["queueId"] for o in ordered] == [i % 4 for i in range(8)]
        assert [d["key"] for d in delayed] == ["d0", "d1"] and [d["status"] for d in delayed] == ["SEND_OK"] * 2
        keys = [s["key"] for s in sent + ordered + delayed] + [f"b{i}" for i in range(5)]
        got = java("consume", ns, TOPIC, "JAVA_CG", str(len(keys)), "60")
        *received, summary = got
        assert summary == {"done": True, "received": len(keys)}
        assert sorted(r["key"] for r in received) == sorted(keys)
        assert all(r["body"] == f"body-{r['key']}" and r["driver"] == "java" for r in received)
        # the offsets the consumer sees are the ones the sends were answered with
        by_key = {r["key"]: (r["queueId"], r["queueOffset"]) for r in received}
        assert all(by_key[s["key"]] == (s["queueId"], s["queueOffset"]) for s in sent + ordered)


@pytest.mark.slow
def test_a_java_consumers_retry_goes_through_the_reference_broker(tmp_path: Path, java: Driver) -> None:
    with Topology(tmp_path / "t", broker_conf={"messageDelayLevel": LEVELS}) as topo:
        admin.update_topic(topo.namesrv_addr, TOPIC, 1, 1, broker_addr=topo.brokers[0].addr)
        java("produce", topo.namesrv_addr, TOPIC, "send:2")
        *received, summary = java("consume", topo.namesrv_addr, TOPIC, "JAVA_RETRY_CG", "2", "60", "retry")
        assert summary == {"done": True, "received": 2}
        # RECONSUME_LATER sent each back (CONSUMER_SEND_MSG_BACK); the broker redelivered it through
        # %RETRY%JAVA_RETRY_CG with its reconsume count raised
        assert sorted((r["key"], r["reconsumeTimes"]) for r in received) == [("k0", 1), ("k1", 1)]


@pytest.mark.slow
def test_the_java_transaction_producer_commits_rolls_back_and_answers_checks_through_the_reference_broker(
        tmp_path: Path, java: Driver) -> None:
    """4.9.8's TransactionMQProducer: its half messages, its oneway END_TRANSACTION, and its answers to our
    CHECK_TRANSACTION_STATE (whose body it decodes with MessageDecoder.decode)."""
    conf = {"transactionCheckInterval": 500, "transactionTimeOut": 1000}
    with Topology(tmp_path / "t", broker_conf=conf) as topo:
        admin.update_topic(topo.namesrv_addr, TOPIC, 2, 2, broker_addr=topo.brokers[0].addr)
        out = java("transaction", topo.namesrv_addr, TOPIC, "3", "60")
        sent = [o for o in out if "status" in o]
        checks = [o for o in out if "checked" in o]
        assert [s["key"] for s in sent] == [f"{p}{i}" for i in range(3) for p in ("tc", "tr", "tu")]
        assert {s["status"] for s in sent} == {"SEND_OK"} and out[-1] == {"allChecked": True}
        # only the UNKNOW ones are asked about, once each, as messages of the real topic
        assert sorted(c["checked"] for c in checks) == ["tu0", "tu1", "tu2"]
        assert all(c["checkTimes"] == "1" and c["topic"] == TOPIC for c in checks)
        *received, summary = java("consume", topo.namesrv_addr, TOPIC, "JAVA_TX_CG", "7", "8")
        assert summary == {"done": False, "received": 6}, "nothing beyond the six committed in 8 s"
        assert sorted(r["key"] for r in received) == ["tc0", "tc1", "tc2", "tu0", "tu1", "tu2"]
        assert all(r["body"] == f"body-{r['key']}" and r["driver"] == "java" for r in received)
