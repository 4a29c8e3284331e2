"""harness/launcher.py with ``impl="rocketmq"``: Apache RocketMQ 4.9.8's name server and broker from the
distribution, on the launcher's ports and store directory, served to the project's client, stopped cleanly,
killed with -9 (the JVM, not only its script), paused and resumed.

Skipped with the reason when no distribution ($ROCKETMQ_HOME, ../shared/rocketmq-4.9.8) or no java is found.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.driver import RocketMQDriver
from harness.launcher import LaunchError, Topology
from reference_broker.client import ClientConfig, Message, Producer, PullConsumer
from reference_broker.client.message import PullStatus, SendStatus
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import create_request
from reference_broker.tools import admin

pytestmark = pytest.mark.e2e

SMALL_FILES = {"mappedFileSizeCommitLog": 64 * 1024 * 1024, "mappedFileSizeConsumeQueue": 6000 * 20}
TOPIC = "LauncherTopic"


@pytest.fixture
def rmq(tmp_path: Path, rocketmq_home: Path) -> Iterator[Topology]:
    with Topology(tmp_path / "rmq", broker_conf=SMALL_FILES, impl="rocketmq", rocketmq_home=rocketmq_home) as topo:
        yield topo
        topo.kill()  # the graceful stop (about 10 s) is tested once, below, not after every test


def _send(topo: Topology, n: int) -> list[int]:
    broker = topo.brokers[0]
    admin.update_topic(topo.namesrv_addr, TOPIC, 1, 1, broker_addr=broker.addr)
    cfg = ClientConfig(topo.namesrv_addr, "launcher-rmq", poll_name_server_interval_s=1.0)
    with Producer("LAUNCHER_PG", topo.namesrv_addr, client_config=cfg) as p:
        results = [p.send(Message(TOPIC, f"m{i}".encode(), keys=f"k{i}")) for i in range(n)]
    assert all(r.send_status is SendStatus.SEND_OK for r in results)
    return [r.queue_offset for r in results]


def _pull_all(topo: Topology, deadline_s: float = 20.0) -> list[bytes]:
    cfg = ClientConfig(topo.namesrv_addr, "launcher-rmq-pull")
    with PullConsumer("LAUNCHER_CG", topo.namesrv_addr, client_config=cfg) as c:
        (mq,) = c.fetch_message_queues(TOPIC)
        bodies: list[bytes] = []
        deadline = time.monotonic() + deadline_s
        offset = 0
        while time.monotonic() < deadline:
            r = c.pull(mq, "*", offset, 32)
            if r.pull_status is PullStatus.FOUND:
                bodies += [m.body for m in r.msg_found_list]
                offset = r.next_begin_offset
            elif bodies:
                break
            else:
                time.sleep(0.2)  # 4.9.8 builds the consume queue a moment after the ack
        return bodies


def test_rocketmq_serves_the_projects_client_and_stops_cleanly(rmq: Topology) -> None:
    broker = rmq.brokers[0]
    assert broker.group
    assert Path(f"/proc/{broker.pid}/comm").read_text().strip() == "java"
    assert _send(rmq, 20) == list(range(20))
    assert _pull_all(rmq) == [f"m{i}".encode() for i in range(20)]
    assert (broker.store_root / "commitlog").is_dir(), "the store is where the launcher put it"
    assert broker.stop() is not None
    assert not (broker.store_root / "abort").exists(), "RocketMQ's shutdown hook removes abort"


def test_kill_9_reaches_the_jvm_and_a_restart_recovers(rmq: Topology) -> None:
    broker = rmq.brokers[0]
    _send(rmq, 10)
    jvm = broker.pid
    broker.kill()
    assert not Path(f"/proc/{jvm}").exists() or "Z" in Path(f"/proc/{jvm}/stat").read_text().split()[2]
    assert (broker.store_root / "abort").exists(), "a killed RocketMQ leaves abort"
    broker.start()
    # kill -9 of the process loses nothing the page cache holds
    assert _pull_all(rmq) == [f"m{i}".encode() for i in range(10)]


@pytest.mark.slow
def test_the_drivers_backlog_reads_rocketmqs_offset_table(rmq: Topology) -> None:
    # GET_ALL_CONSUMER_OFFSET's body from 4.9.8 has bare numeric keys ({0:2}): the metrics sampler's backlog
    # series for a RocketMQ run depends on reading it.
    _send(rmq, 5)
    broker = rmq.brokers[0]
    with RemotingClient.from_addr(broker.addr, 5.0) as c:
        r = c.invoke(create_request(RequestCode.UPDATE_CONSUMER_OFFSET, {
            "consumerGroup": "BACKLOG_CG", "topic": TOPIC, "queueId": "0", "commitOffset": "2"}))
    assert r.code == ResponseCode.SUCCESS
    driver = RocketMQDriver(rmq.namesrv_addr, instance=f"backlog-{os.getpid()}")
    try:
        deadline = time.monotonic() + 10
        while (b := driver.backlog("BACKLOG_CG", [TOPIC])).total != 3 and time.monotonic() < deadline:
            time.sleep(0.2)  # the consume queue is built a moment after the ack
    finally:
        driver.stop()
    assert (b.total, b.per_queue) == (3, {f"{TOPIC}/0": 3})


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_pause_stops_the_jvm_until_resumed(rmq: Topology) -> None:
    broker = rmq.brokers[0]
    broker.pause()
    try:
        # SIGSTOP is delivered asynchronously: a thread running on the other core stops moments later.
        deadline = time.monotonic() + 5
        while (state := _state(broker.pid)) != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert state == "T", f"the JVM is {state}, not stopped"
    finally:
        broker.resume()
    assert _send(rmq, 1) == [0]


def test_unknown_implementation_and_missing_distribution_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown broker implementation"):
        Topology(tmp_path, impl="kafka")  # type: ignore[arg-type]
    with pytest.raises(LaunchError, match="not a RocketMQ distribution"):
        Topology(tmp_path, impl="rocketmq", rocketmq_home=tmp_path)
