"""Our slave store replicating from Apache RocketMQ 4.9.8's master (the distribution's broker, a SYNC_MASTER): the
wire format, the start rule and the acknowledgements agree with HAConnection's, and the slave's dispatch reads
RocketMQ's records. Skipped with the reason when there is no distribution or no java."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness.launcher import Topology
from reference_broker.common import record as rec
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import ResponseCode
from reference_broker.store.config import BrokerRole
from reference_broker.store.status import GetMessageStatus
from reference_broker.tools import admin
from tests.broker.broker_helpers import send_request
from tests.ha.ha_helpers import log_bytes, open_slave
from tests.store.store_helpers import stores_fixture, wait_until

pytestmark = pytest.mark.e2e

FILE_SIZE = 64 * 1024 * 1024
TOPIC = "HaInterop"


@pytest.fixture
def stores():
    yield from stores_fixture()


def test_our_slave_replicates_a_rocketmq_sync_master(tmp_path: Path, rocketmq_home: Path, stores) -> None:
    conf = {"mappedFileSizeCommitLog": FILE_SIZE, "mappedFileSizeConsumeQueue": 6000 * 20,
            "brokerRole": "SYNC_MASTER"}
    with Topology(tmp_path / "rmq", broker_conf=conf, impl="rocketmq", rocketmq_home=rocketmq_home) as topo:
        master = topo.brokers[0]
        admin.update_topic(topo.namesrv_addr, TOPIC, 2, 2, broker_addr=master.addr)
        # BrokerStartup: haListenPort = listenPort + 1.
        slave, client = open_slave(stores, tmp_path / "slave", None, broker_role=BrokerRole.SLAVE,
                                   mapped_file_size_commit_log=FILE_SIZE,
                                   ha_master_address=f"127.0.0.1:{master.port + 1}")
        wait_until(lambda: client.connected, 30, "our slave to connect")
        with RemotingClient("127.0.0.1", master.port, timeout_s=15) as c:
            # The SYNC_MASTER answers SEND_OK only once our slave acknowledged the message (else
            # SLAVE_NOT_AVAILABLE, or FLUSH_SLAVE_TIMEOUT after 3 s); the first may race the connection.
            deadline = time.monotonic() + 30
            while (r := c.invoke(send_request(TOPIC, b"first", props={"KEYS": "first"}))).code != ResponseCode.SUCCESS:
                assert r.code == ResponseCode.SLAVE_NOT_AVAILABLE, (r.code, r.remark)
                assert time.monotonic() < deadline
                time.sleep(0.2)
            last_phy = 0
            for i in range(30):
                r = c.invoke(send_request(TOPIC, b"body-%d" % i, queue_id=i % 2, props={"KEYS": f"k{i}"}))
                assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)  # acknowledged by our slave
                last_phy = rec.decode_message_id(r.ext_fields["msgId"])[2]
        # Every SEND_OK was acknowledged, so the last message is on our slave already.
        last = slave.look_message_by_offset(last_phy)
        assert last is not None and last.body == b"body-29"
        end = slave.get_max_phy_offset()
        wait_until(lambda: slave.dispatch_behind_bytes() == 0, 30, "our slave's dispatch")
        rmq_file = (master.store_root / "commitlog" / f"{0:020d}").read_bytes()
        assert log_bytes(slave, 0, end) == rmq_file[:end]
        assert rmq_file[end:end + 8] == bytes(8)  # nothing after it on the master
        bodies = []
        for q in range(2):
            res = slave.get_message("g", TOPIC, q, 0, 32)
            assert res.status is GetMessageStatus.FOUND
            bodies += [rec.decode_message(raw).body for raw in res.messages]
        assert sorted(bodies) == sorted([b"first"] + [b"body-%d" % i for i in range(30)]
                                        + [b"first"] * (len(bodies) - 31))
        topo.kill()


def test_rocketmq_slave_replicates_our_master(tmp_path: Path, rocketmq_home: Path, stores) -> None:
    """Apache RocketMQ 4.9.8's broker as a SLAVE (haMasterAddress set: it does not ask the name server) replicating
    our master store: its commit log becomes ours and its own dispatch builds queues from our records."""
    from reference_broker.remoting.client import RemotingClient as Client
    from reference_broker.remoting.codes import RequestCode
    from reference_broker.remoting.command import create_request
    from tests.ha.ha_helpers import open_master
    from tests.store.store_helpers import make_msg, put_ok

    master, ha = open_master(stores, tmp_path / "master", broker_role=BrokerRole.SYNC_MASTER,
                             mapped_file_size_commit_log=FILE_SIZE)
    conf = {"mappedFileSizeCommitLog": FILE_SIZE, "mappedFileSizeConsumeQueue": 6000 * 20}
    with Topology(tmp_path / "rmq", broker_conf=conf, brokers=0, impl="rocketmq",
                  rocketmq_home=rocketmq_home) as topo:
        slave = topo.add_broker("broker-a-slave", extra={
            "brokerName": "broker-a", "brokerId": "1", "brokerRole": "SLAVE",
            "haMasterAddress": f"127.0.0.1:{ha.port}"})
        wait_until(lambda: ha.connection_count() == 1, 60, "RocketMQ's slave to connect")
        # 4.9.8's HAClient sends its first report one haSendHeartbeatInterval (5 s) after connecting, and the
        # master sends nothing before it: a SYNC_MASTER put in that window ends FLUSH_SLAVE_TIMEOUT.
        wait_until(lambda: any(c.slave_request_offset >= 0 for c in ha.connections), 30,
                   "RocketMQ's slave's first report")
        results = [put_ok(master, make_msg(f"rmq-{i}", topic=TOPIC, queue_id=i % 2, keys=f"k{i}")) for i in range(30)]
        # SYNC_MASTER puts answered PUT_OK: RocketMQ's slave acknowledged each one.
        assert all(r.append is not None for r in results)
        end = master.get_max_phy_offset()
        rmq_file = slave.store_root / "commitlog" / f"{0:020d}"
        wait_until(lambda: rmq_file.exists() and rmq_file.read_bytes()[:end] == log_bytes(master, 0, end), 30,
                   "RocketMQ's commit log to equal ours")

        def rmq_max_offsets() -> list[int]:
            with Client("127.0.0.1", slave.port, timeout_s=10) as c:
                return [int(c.invoke(create_request(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": str(q)}))
                            .ext_fields["offset"]) for q in range(2)]

        wait_until(lambda: rmq_max_offsets() == [15, 15], 30, "RocketMQ's dispatch of our records")
        topo.kill()
