"""Heartbeats registering the most new consumer groups the broker accepts, on a real name server and broker:
other connections keep being served throughout, and the groups and their retry topics survive a SIGTERM."""

from __future__ import annotations

import json

import pytest

from harness.launcher import Topology
from reference_broker.broker.heartbeat import MAX_CONSUMER_DATA_PER_HEARTBEAT
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import create_request, json_loads
from tests.broker.heartbeat_load import many_groups_heartbeat, run_load

pytestmark = pytest.mark.e2e

PROBE_BOUND_S = 1.0  # generous: measured worst ~0.1 s on a busy 2-core machine (the old code: ~10 s)


def _tables(port):
    with RemotingClient("127.0.0.1", port, timeout_s=30) as c:
        groups = json_loads(c.invoke(create_request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {})).body)
        topics = json_loads(c.invoke(create_request(RequestCode.GET_ALL_TOPIC_CONFIG, {})).body)
    return groups["subscriptionGroupTable"], topics["topicConfigTable"]


def test_many_group_heartbeats_do_not_stall_other_clients_and_survive_sigterm(tmp_path):
    n = MAX_CONSUMER_DATA_PER_HEARTBEAT
    names = [[f"HB{h}_G{i}" for i in range(n)] for h in range(2)]
    with Topology(tmp_path / "topo") as topo:
        broker = topo.brokers[0]
        result = run_load(broker.port, [many_groups_heartbeat(f"client-{h}", names[h]) for h in range(2)])
        assert result.heartbeat_codes == [ResponseCode.SUCCESS, ResponseCode.SUCCESS]
        assert not result.probe_failures
        assert len(result.probe_latencies_s) >= 10
        assert result.worst_probe_s < PROBE_BOUND_S, (
            f"a send waited {result.worst_probe_s:.2f} s behind the heartbeats (answered in "
            f"{[round(s, 2) for s in result.heartbeat_s]} s)")

        # one past the bound: refused whole, nothing created
        over = [f"OVER_G{i}" for i in range(n + 1)]
        with RemotingClient("127.0.0.1", broker.port, timeout_s=30) as c:
            r = c.invoke(many_groups_heartbeat("client-over", over))
        assert r.code == ResponseCode.SYSTEM_ERROR and f"at most {n}" in (r.remark or "")
        groups, topics = _tables(broker.port)
        assert not any(g.startswith("OVER_") for g in groups)
        assert not any(t.startswith("%RETRY%OVER_") for t in topics)

        assert broker.stop() == 0  # SIGTERM: graceful shutdown
        config = broker.store_root / "config"
        groups = json.loads((config / "subscriptionGroup.json").read_text())["subscriptionGroupTable"]
        topics = json.loads((config / "topics.json").read_text())["topicConfigTable"]
        for g in names[0] + names[1]:
            assert g in groups and f"%RETRY%{g}" in topics, g

        broker.start()
        groups, topics = _tables(broker.port)
        assert all(g in groups and f"%RETRY%{g}" in topics for g in names[0] + names[1])
