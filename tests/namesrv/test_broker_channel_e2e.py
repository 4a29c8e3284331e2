"""The name server takes the close of a broker's registration connection for the broker's end
(BrokerHousekeepingService.onChannelClose → RouteInfoManager.onChannelDestroy): a broker killed with SIGKILL
leaves the routes at once, not after the 120 s expiry; one that lives stays, registration after registration."""

from __future__ import annotations

import json
import time

import pytest

from harness.launcher import Topology
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import create_request
from tests.broker.broker_helpers import send_request

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def brokers_of(namesrv: str, topic: str) -> dict[str, dict[str, str]]:
    with RemotingClient.from_addr(namesrv) as ns:
        r = ns.invoke(create_request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
    if r.code != ResponseCode.SUCCESS:
        return {}
    return {bd["brokerName"]: bd["brokerAddrs"] for bd in json.loads(r.body)["brokerDatas"]}


def test_a_killed_broker_leaves_the_routes_at_once(tmp_path):
    with Topology(tmp_path / "t", brokers=2, broker_conf={"registerNameServerPeriod": "10000"}) as topo:
        a, b = topo.brokers
        for broker in (a, b):
            with RemotingClient.from_addr(broker.addr) as c:
                assert c.invoke(send_request("ChanT", b"x")).code == ResponseCode.SUCCESS
        deadline = time.monotonic() + 30
        while set(brokers_of(topo.namesrv_addr, "ChanT")) != {"broker-a", "broker-b"}:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        time.sleep(11)  # a periodic registration over the kept connection: the broker stays routed
        assert set(brokers_of(topo.namesrv_addr, "ChanT")) == {"broker-a", "broker-b"}
        a.kill()
        deadline = time.monotonic() + 5
        while "broker-a" in brokers_of(topo.namesrv_addr, "ChanT"):
            assert time.monotonic() < deadline, "the killed broker is still routed"
            time.sleep(0.1)
        assert set(brokers_of(topo.namesrv_addr, "ChanT")) == {"broker-b"}
        a.start()  # back: registered again
        deadline = time.monotonic() + 30
        while "broker-a" not in brokers_of(topo.namesrv_addr, "ChanT"):
            assert time.monotonic() < deadline
            time.sleep(0.2)
