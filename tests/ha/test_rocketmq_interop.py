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
