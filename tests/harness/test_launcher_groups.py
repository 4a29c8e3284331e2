"""harness/launcher.py broker groups: a master and a slave as two processes of either implementation, the same
brokerName, their own stores and ports; what the master stores becomes readable from the slave's own store; the
slave's process is killed, restarted and stopped like any other."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness.launcher import BrokerProcess, Topology
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import create_request
from reference_broker.tools import admin
from tests.broker.broker_helpers import send_request

pytestmark = pytest.mark.e2e

SMALL_FILES = {"mappedFileSizeCommitLog": 64 * 1024 * 1024, "mappedFileSizeConsumeQueue": 6000 * 20}
TOPIC = "GroupTopic"


def _max_offsets(b: BrokerProcess, queues: int) -> list[int]:
    with RemotingClient("127.0.0.1", b.port, timeout_s=10) as c:
        out = []
        for q in range(queues):
            r = c.invoke(create_request(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": str(q)}))
            assert r.code == ResponseCode.SUCCESS, r.remark
            out.append(int(r.ext_fields["offset"]))
        return out


def _wait_offsets(b: BrokerProcess, want: list[int], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (got := _max_offsets(b, len(want))) != want:
        assert time.monotonic() < deadline, f"{b.name}: queues at {got}, want {want}"
        time.sleep(0.2)


def _send(master: BrokerProcess, n: int, queues: int) -> None:
    with RemotingClient("127.0.0.1", master.port, timeout_s=15) as c:
        for i in range(n):
            r = c.invoke(send_request(TOPIC, b"body-%d" % i, queue_id=i % queues, props={"KEYS": f"k{i}"}))
            assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)


def _check_group(topo: Topology) -> None:
    master = topo.brokers[0]
    (slave,) = topo.slaves_of(master)
    assert topo.group("broker-a") == [master, slave]
    assert slave.conf["brokerName"] == master.conf["brokerName"] == "broker-a"
    assert (slave.conf["brokerRole"], slave.conf["brokerId"]) == ("SLAVE", "1")
    assert master.role == "ASYNC_MASTER" and master.conf["brokerId"] == "0"
    assert len({master.port, master.ha_port, slave.port, slave.ha_port}) == 4
    assert master.store_root != slave.store_root
    admin.update_topic(topo.namesrv_addr, TOPIC, 2, 2, broker_addr=master.addr)
    _send(master, 20, 2)
    _wait_offsets(slave, [10, 10])
    # kill -9 and restart the slave: it recovers its store and catches up with what was sent meanwhile.
    slave.kill()
    assert not slave.alive
    _send(master, 20, 2)
    slave.restart()
    _wait_offsets(slave, [20, 20])


def test_reference_group_replicates_and_stops_cleanly(tmp_path: Path) -> None:
    topo = Topology(tmp_path / "t", slaves=1)
    with topo:
        _check_group(topo)
        procs = list(topo.brokers)
    assert all(p.proc is not None and p.proc.returncode == 0 for p in procs), [p.proc.returncode for p in procs
                                                                                if p.proc is not None]


def test_reference_sync_master_and_explicit_slave(tmp_path: Path) -> None:
    with Topology(tmp_path / "t", broker_conf={"brokerRole": "SYNC_MASTER"}) as topo:
        master = topo.brokers[0]
        slave = topo.add_slave(master)
        assert master.role == "SYNC_MASTER" and slave.role == "SLAVE" and slave.name == "broker-a-s1"
        with pytest.raises(ValueError):
            topo.add_slave(slave)


def test_rocketmq_group_replicates(tmp_path: Path, rocketmq_home: Path) -> None:
    with Topology(tmp_path / "rmq", broker_conf=SMALL_FILES, impl="rocketmq", rocketmq_home=rocketmq_home,
                  slaves=1) as topo:
        assert topo.brokers[1].conf["haMasterAddress"] == f"127.0.0.1:{topo.brokers[0].port + 1}"
        _check_group(topo)
        topo.kill()  # RocketMQ's graceful stop (about 10 s a process) is tested in test_launcher_rocketmq.py
