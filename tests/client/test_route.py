"""Topic routes: parsing TopicRouteData, writable and readable queues, round-robin selection."""

from __future__ import annotations

from typing import Any

import pytest

from reference_broker.client.message import MessageQueue
from reference_broker.client.route import (
    TopicPublishInfo,
    TopicRouteData,
    publish_info_from_route,
    subscribe_info_from_route,
)

ROUTE: dict[str, Any] = {
    "queueDatas": [
        {"brokerName": "broker-b", "readQueueNums": 2, "writeQueueNums": 3, "perm": 6, "topicSysFlag": 0},
        {"brokerName": "broker-a", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "topicSysFlag": 0},
        {"brokerName": "broker-r", "readQueueNums": 2, "writeQueueNums": 2, "perm": 4, "topicSysFlag": 0},
        {"brokerName": "broker-s", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6, "topicSysFlag": 0},
    ],
    "brokerDatas": [
        {"cluster": "c", "brokerName": "broker-a", "brokerAddrs": {"0": "10.0.0.1:10911", "1": "10.0.0.2:10911"}},
        {"cluster": "c", "brokerName": "broker-b", "brokerAddrs": {"0": "10.0.0.3:10911"}},
        {"cluster": "c", "brokerName": "broker-r", "brokerAddrs": {"0": "10.0.0.4:10911"}},
        {"cluster": "c", "brokerName": "broker-s", "brokerAddrs": {"1": "10.0.0.5:10911"}},  # slave only
    ],
    "filterServerTable": {},
}


def test_parse_route_json_bytes() -> None:
    import json

    route = TopicRouteData.from_json(json.dumps(ROUTE).encode())
    assert [q.broker_name for q in route.queue_datas] == ["broker-b", "broker-a", "broker-r", "broker-s"]
    broker_a = route.broker_data("broker-a")
    assert broker_a is not None
    assert broker_a.broker_addrs == {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}
    assert broker_a.select_broker_addr() == "10.0.0.1:10911"
    assert route.order_topic_conf is None


@pytest.mark.parametrize("bad", [b"[]", b'{"queueDatas":[{"brokerName":"x"}]}', b"not json"])
def test_malformed_route_is_a_value_error(bad: bytes) -> None:
    with pytest.raises(ValueError):
        TopicRouteData.from_json(bad)


def test_publish_info_takes_writable_queues_of_brokers_with_a_master_sorted_by_broker() -> None:
    info = publish_info_from_route("T", TopicRouteData.from_json(ROUTE))
    assert info.message_queues == [MessageQueue("T", "broker-a", i) for i in range(4)] + [
        MessageQueue("T", "broker-b", i) for i in range(3)]
    assert not info.order_topic


def test_subscribe_info_takes_every_readable_queue() -> None:
    mqs = subscribe_info_from_route("T", TopicRouteData.from_json(ROUTE))
    assert len(mqs) == 4 + 2 + 2 + 1
    assert MessageQueue("T", "broker-r", 1) in mqs


def test_order_topic_conf_lists_queues_per_broker() -> None:
    route = TopicRouteData.from_json({**ROUTE, "orderTopicConf": "broker-a:2;broker-b:1"})
    info = publish_info_from_route("T", route)
    assert info.order_topic
    assert info.message_queues == [MessageQueue("T", "broker-a", 0), MessageQueue("T", "broker-a", 1),
                                   MessageQueue("T", "broker-b", 0)]


def test_select_one_is_round_robin() -> None:
    mqs = [MessageQueue("T", "a", i) for i in range(4)]
    info = TopicPublishInfo(mqs, None)
    picks = [info.select_one() for _ in range(8)]
    assert sorted(picks[:4]) == mqs and picks[:4] == picks[4:]


def test_select_one_avoids_the_broker_that_just_failed() -> None:
    mqs = [MessageQueue("T", "a", 0), MessageQueue("T", "a", 1), MessageQueue("T", "b", 0)]
    info = TopicPublishInfo(mqs, None)
    assert all(info.select_one("a").broker_name == "b" for _ in range(10))
    single = TopicPublishInfo(mqs[:2], None)
    assert single.select_one("a").broker_name == "a"  # no other broker: round robin anyway


def test_default_topic_route_is_capped_for_a_new_topic() -> None:
    route = TopicRouteData.from_json(ROUTE).with_queue_nums_capped(4)
    info = publish_info_from_route("NewTopic", route)
    assert [mq for mq in info.message_queues if mq.broker_name == "broker-b"] == [
        MessageQueue("NewTopic", "broker-b", i) for i in range(2)]  # min(4, readQueueNums 2)


def test_normalized_ignores_list_order() -> None:
    a = TopicRouteData.from_json(ROUTE)
    b = TopicRouteData.from_json({**ROUTE, "queueDatas": ROUTE["queueDatas"][::-1],
                                  "brokerDatas": ROUTE["brokerDatas"][::-1]})
    assert a.normalized() == b.normalized()
    c = TopicRouteData.from_json({**ROUTE, "queueDatas": ROUTE["queueDatas"][:1]})
    assert a.normalized() != c.normalized()
