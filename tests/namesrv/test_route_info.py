"""RouteInfoManager: the sans-IO route tables."""

from __future__ import annotations

from typing import Any

import pytest

from reference_broker.namesrv.route_info import DataVersion, RegisterResult, RouteInfoManager

M = "10.0.0.1:10911"
S = "10.0.0.2:10911"


def tc(r: int = 8, w: int = 8, perm: int = 6, flag: int = 0) -> dict[str, Any]:
    return {"topicName": "x", "readQueueNums": r, "writeQueueNums": w, "perm": perm, "topicSysFlag": flag,
            "order": False, "topicFilterType": "SINGLE_TAG"}


def dv(counter: int, ts: int = 1) -> dict[str, int]:
    return {"counter": counter, "timestamp": ts}


@pytest.fixture
def rim() -> RouteInfoManager:
    return RouteInfoManager()


def test_register_master_and_slave(rim: RouteInfoManager) -> None:
    r = rim.register_broker("c1", M, "b1", 0, "10.0.0.1:10912", {"T": tc()}, dv(1), 1000)
    assert r == RegisterResult(None, None)
    r = rim.register_broker("c1", S, "b1", 1, "10.0.0.2:10912", {"T": tc(r=1, w=1)}, dv(5), 1000)
    assert r == RegisterResult("10.0.0.1:10912", M)
    route = rim.pick_topic_route_data("T")
    assert route == {
        "brokerDatas": [{"brokerAddrs": {"0": M, "1": S}, "brokerName": "b1", "cluster": "c1"}],
        "filterServerTable": {},
        "queueDatas": [{"brokerName": "b1", "perm": 6, "readQueueNums": 8, "topicSysFlag": 0, "writeQueueNums": 8}],
    }  # the slave's topic config did not change the queue data
    assert "orderTopicConf" not in route


def test_slave_without_master_gets_no_master(rim: RouteInfoManager) -> None:
    assert rim.register_broker("c1", S, "b1", 1, "ha", {"T": tc()}, dv(1), 0) == RegisterResult()
    assert rim.pick_topic_route_data("T") is None  # a slave alone registers no queues


def test_reregister_updates_queue_nums_only_on_new_data_version(rim: RouteInfoManager) -> None:
    rim.register_broker("c1", M, "b1", 0, "ha", {"T": tc()}, dv(1), 0)
    rim.register_broker("c1", M, "b1", 0, "ha", {"T": tc(r=4, w=4)}, dv(1), 10)  # same version: ignored
    route = rim.pick_topic_route_data("T")
    assert route is not None and route["queueDatas"][0]["readQueueNums"] == 8
    rim.register_broker("c1", M, "b1", 0, "ha", {"T": tc(r=4, w=2, perm=4)}, dv(2), 20)
    route = rim.pick_topic_route_data("T")
    assert route is not None
    assert route["queueDatas"] == [
        {"brokerName": "b1", "perm": 4, "readQueueNums": 4, "topicSysFlag": 0, "writeQueueNums": 2}]
    assert rim.broker_live_table[M].last_update_timestamp == 20
    assert rim.broker_live_table[M].data_version == DataVersion(1, 2)


def test_same_addr_new_id_replaces_old_entry(rim: RouteInfoManager) -> None:
    rim.register_broker("c1", M, "b1", 0, "ha", {"T": tc()}, dv(1), 0)
    rim.register_broker("c1", S, "b1", 1, "ha2", {}, dv(1), 0)
    rim.unregister_broker("c1", M, "b1", 0)
    rim.register_broker("c1", S, "b1", 0, "ha2", {"T": tc()}, dv(1), 0)  # slave promoted
    assert rim.broker_addr_table["b1"].broker_addrs == {0: S}


def test_unregister(rim: RouteInfoManager) -> None:
    rim.register_broker("c1", M, "b1", 0, "ha", {"T": tc(), "U": tc()}, dv(1), 0)
    rim.register_broker("c1", S, "b1", 1, "ha", {}, dv(1), 0)
    rim.register_broker("c1", "10.0.0.3:10911", "b2", 0, "ha", {"T": tc()}, dv(1), 0)
    rim.unregister_broker("c1", S, "b1", 1)
    assert rim.broker_addr_table["b1"].broker_addrs == {0: M}
    rim.unregister_broker("c1", M, "b1", 0)
    assert "b1" not in rim.broker_addr_table
    assert rim.cluster_addr_table == {"c1": {"b2"}}
    assert rim.pick_topic_route_data("U") is None
    route = rim.pick_topic_route_data("T")
    assert route is not None and [q["brokerName"] for q in route["queueDatas"]] == ["b2"]
    rim.unregister_broker("c1", "10.0.0.3:10911", "b2", 0)
    assert rim.cluster_addr_table == {} and rim.topic_queue_table == {} and rim.broker_live_table == {}


def test_expiry_removes_broker_and_its_queue_data(rim: RouteInfoManager) -> None:
    rim.register_broker("c1", M, "b1", 0, "ha", {"T": tc()}, dv(1), 0)
    rim.register_broker("c1", S, "b1", 1, "ha", {}, dv(1), 100_000)
    rim.register_broker("c2", "10.0.0.3:10911", "b2", 0, "ha", {"T": tc(), "V": tc()}, dv(1), 100_000)
    assert rim.scan_not_active_broker(120_000) == []  # not *strictly* older than 120 s
    assert rim.scan_not_active_broker(120_001) == [M]
    assert rim.broker_addr_table["b1"].broker_addrs == {1: S}
    route = rim.pick_topic_route_data("T")
    assert route is not None and {q["brokerName"] for q in route["queueDatas"]} == {"b1", "b2"}  # b1 has a slave
    assert sorted(rim.scan_not_active_broker(300_000, expired_ms=1000)) == sorted([S, "10.0.0.3:10911"])
    assert rim.topic_queue_table == {} and rim.broker_addr_table == {} and rim.cluster_addr_table == {}
    assert rim.pick_topic_route_data("T") is None


def test_cluster_info_and_multiple_topics_and_brokers(rim: RouteInfoManager) -> None:
    rim.register_broker("c1", M, "b1", 0, "ha", {"T": tc(), "U": tc(r=2, w=2)}, dv(1), 0)
    rim.register_broker("c1", "10.0.0.3:10911", "b2", 0, "ha", {"T": tc(r=3, w=3)}, dv(1), 0)
    rim.register_broker("c2", "10.0.0.4:10911", "b3", 0, "ha", {"W": tc()}, dv(1), 0)
    info = rim.get_all_cluster_info()
    assert info["clusterAddrTable"] == {"c1": ["b1", "b2"], "c2": ["b3"]}
    assert info["brokerAddrTable"]["b2"] == {"brokerAddrs": {"0": "10.0.0.3:10911"}, "brokerName": "b2",
                                             "cluster": "c1"}
    route = rim.pick_topic_route_data("T")
    assert route is not None
    assert [(q["brokerName"], q["readQueueNums"]) for q in route["queueDatas"]] == [("b1", 8), ("b2", 3)]
    assert [b["brokerName"] for b in route["brokerDatas"]] == ["b1", "b2"]
    route = rim.pick_topic_route_data("U")
    assert route is not None and [b["brokerName"] for b in route["brokerDatas"]] == ["b1"]
    assert rim.pick_topic_route_data("nope") is None


def test_filter_servers(rim: RouteInfoManager) -> None:
    rim.register_broker("c1", M, "b1", 0, "ha", {"T": tc()}, dv(1), 0, filter_server_list=["f:1"])
    route = rim.pick_topic_route_data("T")
    assert route is not None and route["filterServerTable"] == {M: ["f:1"]}
    rim.register_broker("c1", M, "b1", 0, "ha", {"T": tc()}, dv(1), 0, filter_server_list=[])
    assert rim.filter_server_table == {}


def test_bad_topic_config_raises_before_changing_tables(rim: RouteInfoManager) -> None:
    with pytest.raises(ValueError, match="readQueueNums"):
        rim.register_broker("c1", M, "b1", 0, "ha", {"T": {"readQueueNums": "x"}}, dv(1), 0)
    assert rim.broker_addr_table == {} and rim.cluster_addr_table == {}
