"""A name server, a master and a slave as real processes (harness Topology): the slave registers with brokerId 1,
learns the master's HA address from the name server's reply, and replicates what the master stores."""

from __future__ import annotations

import time

import pytest

from harness.launcher import Topology
from reference_broker.common import record as rec
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import create_request
from tests.broker.broker_helpers import send_request

pytestmark = pytest.mark.e2e


def max_offset(client: RemotingClient, topic: str, queue_id: int) -> int:
    r = client.invoke(create_request(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(queue_id)}))
    assert r.code == ResponseCode.SUCCESS, r.remark
    return int(r.ext_fields["offset"])


def runtime(client: RemotingClient) -> dict[str, str]:
    import json
    r = client.invoke(create_request(RequestCode.GET_BROKER_RUNTIME_INFO, {}))
    assert r.code == ResponseCode.SUCCESS
    return json.loads(r.body)["table"]


def first_send_ok(mc: RemotingClient, topic: str) -> None:
    """Send until a SYNC_MASTER answers SEND_OK: SLAVE_NOT_AVAILABLE until its slave has connected."""
    deadline = time.monotonic() + 30
    while (r := mc.invoke(send_request(topic, b"first"))).code != ResponseCode.SUCCESS:
        assert r.code == ResponseCode.SLAVE_NOT_AVAILABLE, (r.code, r.remark)  # not connected yet
        assert time.monotonic() < deadline
        time.sleep(0.2)


def test_slave_process_replicates_the_master(tmp_path):
    with Topology(tmp_path / "t") as topo:
        master = topo.brokers[0]
        slave = topo.add_broker("broker-a-slave", extra={"brokerName": "broker-a", "brokerId": "1",
                                                          "brokerRole": "SLAVE"})
        offsets = []
        with RemotingClient("127.0.0.1", master.port, timeout_s=10) as mc:
            for i in range(40):
                r = mc.invoke(send_request("HaT", b"body-%d" % i, queue_id=i % 4, props={"KEYS": f"k{i}"}))
                assert r.code == ResponseCode.SUCCESS, r.remark
                offsets.append(r.ext_fields["msgId"])
            master_info = runtime(mc)
            master_max = [10, 10, 10, 10]
            deadline = time.monotonic() + 30
            while [max_offset(mc, "HaT", q) for q in range(4)] != master_max:  # the master's own dispatch
                assert time.monotonic() < deadline
                time.sleep(0.05)
        with RemotingClient("127.0.0.1", slave.port, timeout_s=10) as sc:
            deadline = time.monotonic() + 60
            while runtime(sc)["commitLogMaxOffset"] != master_info["commitLogMaxOffset"]:
                assert time.monotonic() < deadline, "the slave did not catch up"
                time.sleep(0.2)
            while [max_offset(sc, "HaT", q) for q in range(4)] != master_max:
                assert time.monotonic() < deadline, "the slave's consume queues did not catch up"
                time.sleep(0.2)
            # Every message, read back from the slave's own commit log by the offset the master reported.
            for i, msg_id in enumerate(offsets):
                _host, _port, phy = rec.decode_message_id(msg_id)
                r = sc.invoke(create_request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(phy)}))
                assert r.code == ResponseCode.SUCCESS, r.remark
                assert rec.decode_message(r.body).body == b"body-%d" % i
            # A slave refuses sends.
            r = sc.invoke(send_request("HaT", b"no"))
            assert r.code != ResponseCode.SUCCESS


def test_sync_master_with_a_paused_then_stopped_slave(tmp_path):
    """A SYNC_MASTER process: SEND_OK while its slave acknowledges; FLUSH_SLAVE_TIMEOUT while the slave process
    is stopped with SIGSTOP (its connection stays open, nothing is acknowledged) — the message stored all the
    same; SEND_OK again once it resumes; SLAVE_NOT_AVAILABLE once it has shut down."""
    conf = {"brokerRole": "SYNC_MASTER", "slaveTimeout": "1000"}
    with Topology(tmp_path / "t", broker_conf=conf) as topo:
        master = topo.brokers[0]
        slave = topo.add_broker("broker-a-slave", extra={"brokerName": "broker-a", "brokerId": "1",
                                                          "brokerRole": "SLAVE"})
        with RemotingClient("127.0.0.1", master.port, timeout_s=15) as mc:
            first_send_ok(mc, "SyncT")
            assert mc.invoke(send_request("SyncT", b"acked")).code == ResponseCode.SUCCESS
            slave.pause()
            try:
                r = mc.invoke(send_request("SyncT", b"unacked"))
                assert r.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, (r.code, r.remark)
                phy = rec.decode_message_id(r.ext_fields["msgId"])[2]
                view = mc.invoke(create_request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(phy)}))
                assert rec.decode_message(view.body).body == b"unacked"  # stored on the master
            finally:
                slave.resume()
            deadline = time.monotonic() + 30
            while (r := mc.invoke(send_request("SyncT", b"after"))).code != ResponseCode.SUCCESS:
                assert time.monotonic() < deadline, (r.code, r.remark)
            slave.stop()
            deadline = time.monotonic() + 30  # the master notices the closed connection at once, or nearly
            while (r := mc.invoke(send_request("SyncT", b"alone"))).code != ResponseCode.SLAVE_NOT_AVAILABLE:
                assert r.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, (r.code, r.remark)
                assert time.monotonic() < deadline


def test_sync_master_under_64_sends_in_flight_answers_each_once_the_slave_holds_it(tmp_path):
    """Many sends waiting at once: the master's event loop reads the slave's reports and releases every send a
    report covers, and sends the new bytes itself at the end of its turns. Every send is answered SEND_OK, and
    the slave holds the master's whole log."""
    from harness.broker_bench import run_producer
    conf = {"brokerRole": "SYNC_MASTER"}
    with Topology(tmp_path / "t", broker_conf=conf, slaves=1) as topo:
        master, slave = topo.brokers[0], topo.brokers[1]
        with RemotingClient("127.0.0.1", master.port, timeout_s=15) as mc:
            first_send_ok(mc, "SyncLoad")
        res = run_producer(topo, ["-t", "SyncLoad", "--lean", "-p", "2", "-s", "256", "-d", "30", "-q", "1500",
                                  "--in-flight", "32"], lambda _line: None)
        assert res["messages"] == 3000 and res["send_failed"] == 0 and res["response_failed"] == 0, res
        with RemotingClient("127.0.0.1", master.port, timeout_s=10) as mc:
            master_end = runtime(mc)["commitLogMaxOffset"]
            acked = runtime(mc)["haPush2SlaveMaxOffset"]
        assert acked == master_end  # every SEND_OK was acknowledged, and nothing else was written
        with RemotingClient("127.0.0.1", slave.port, timeout_s=10) as sc:
            assert int(runtime(sc)["commitLogMaxOffset"]) >= int(master_end)
