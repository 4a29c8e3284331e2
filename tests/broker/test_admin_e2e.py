"""``python -m reference_broker admin`` against a real name server and broker."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from harness.launcher import Topology
from reference_broker.client.message_id import UniqIdGenerator
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode
from reference_broker.remoting.command import create_request
from tests.broker.broker_helpers import send_request

pytestmark = pytest.mark.e2e


def admin(topo, *args):
    p = subprocess.run([sys.executable, "-m", "reference_broker", "admin", *args, *(
        ["-n", topo.namesrv_addr] if args[0] != "brokerStatus" else [])],
        capture_output=True, text=True, timeout=60)
    return p


def test_admin_subcommands(tmp_path):
    with Topology(tmp_path / "t") as topo:
        p = admin(topo, "updateTopic", "-t", "AdminT", "-c", "DefaultCluster", "-r", "2", "-w", "2")
        assert p.returncode == 0, p.stderr
        assert f"create topic to {topo.brokers[0].addr} success." in p.stdout
        p = admin(topo, "updateSubGroup", "-g", "AdminG", "-c", "DefaultCluster", "-r", "3")
        assert p.returncode == 0, p.stderr
        assert f"create subscription group to {topo.brokers[0].addr} success." in p.stdout
        with RemotingClient("127.0.0.1", topo.brokers[0].port) as c:
            groups = json.loads(c.invoke(create_request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)).body)
        assert groups["subscriptionGroupTable"]["AdminG"]["retryMaxTimes"] == 3
        # client ids as a Java producer makes them: 32 hex digits like an offsetMsgId, but the "port" is the
        # pid and half the salt (≥ 65536 for any non-zero pid), so they do not decode as one
        uniq = UniqIdGenerator(pid=0x1092)
        uids = [uniq.create() for _ in range(5)]
        with RemotingClient("127.0.0.1", topo.brokers[0].port) as c:
            ids = []
            for i in range(5):
                r = c.invoke(send_request("AdminT", b"body%d" % i, queue_id=i % 2,
                                          props={"KEYS": f"key{i}", "UNIQ_KEY": uids[i]}))
                assert r.code == 0
                ids.append(r.ext_fields["msgId"])
            c.invoke(create_request(RequestCode.UPDATE_CONSUMER_OFFSET, {
                "consumerGroup": "G1", "topic": "AdminT", "queueId": "0", "commitOffset": "1"}))
        time.sleep(0.3)  # let the broker dispatch and re-register
        p = admin(topo, "topicList", "--json")
        assert "AdminT" in json.loads(p.stdout)
        rows = json.loads(admin(topo, "topicStatus", "-t", "AdminT", "--json").stdout)
        assert sorted((r["queueId"], r["maxOffset"]) for r in rows) == [(0, 3), (1, 2)]
        rows = json.loads(admin(topo, "consumerProgress", "-g", "G1", "--json").stdout)
        by_q = {r["queueId"]: r for r in rows}
        assert by_q[0]["consumerOffset"] == 1 and by_q[0]["diff"] == 2
        out = admin(topo, "consumerProgress", "-g", "G1", "-t", "AdminT").stdout
        assert "Diff Total: 4" in out  # 2 on queue 0, 2 on queue 1 (never consumed: offset -1 counts as 0)
        msg = json.loads(admin(topo, "queryMsgById", "-i", ids[3]).stdout)
        assert msg["body"] == "body3" and msg["keys"] == "key3"
        # a client id (UNIQ_KEY) falls back to a key query in the topic (DefaultMQAdminExtImpl.viewMessage)
        p = admin(topo, "queryMsgById", "-i", uids[2], "-t", "AdminT")
        assert p.returncode == 0, p.stderr
        msg = json.loads(p.stdout)
        assert msg["body"] == "body2" and msg["properties"]["UNIQ_KEY"] == uids[2]
        assert msg["offsetMsgId"] == ids[2]
        p = admin(topo, "queryMsgById", "-i", uids[2])
        assert p.returncode != 0 and "not an offsetMsgId" in p.stderr and "UNIQ_KEY" in p.stderr
        p = admin(topo, "queryMsgById", "-i", uniq.create(), "-t", "AdminT")  # never sent
        assert p.returncode != 0 and "no message" in p.stderr
        found = json.loads(admin(topo, "queryMsgByKey", "-t", "AdminT", "-k", "key2").stdout)
        assert [m["body"] for m in found] == ["body2"]
        msg = json.loads(admin(topo, "queryMsgByOffset", "-t", "AdminT", "-b", "broker-a", "-i", "1", "-o",
                               "0").stdout)
        assert msg["body"] == "body1"
        rows = json.loads(admin(topo, "clusterList", "--json").stdout)
        assert rows == [{"cluster": "DefaultCluster", "brokerName": "broker-a", "brokerId": "0",
                         "addr": topo.brokers[0].addr}]
        status = json.loads(admin(topo, "brokerStatus", "-b", topo.brokers[0].addr, "--json").stdout)
        assert int(status["commitLogMaxOffset"]) > 0
        bad = admin(topo, "queryMsgById", "-i", "nothex")
        assert bad.returncode != 0 and "offsetMsgId" in bad.stderr
        bad = admin(topo, "updateTopic", "-t", "X", "-r", "0")
        assert bad.returncode != 0
        p = subprocess.run([sys.executable, "-m", "reference_broker", "admin", "topicList", "-n", "127.0.0.1:1"],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode != 0 and "connection problem" in p.stderr
