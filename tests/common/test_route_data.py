"""QueueData and BrokerData: the JSON the name server writes (fastjson's field order) and the clients read."""

from __future__ import annotations

import json

import pytest

from reference_broker.common.route_data import MASTER_ID, BrokerData, QueueData


def test_queue_data_json_order_and_round_trip() -> None:
    qd = QueueData("b1", 8, 4, 6, 0)
    assert json.dumps(qd.to_json()) == ('{"brokerName": "b1", "perm": 6, "readQueueNums": 8, "topicSysFlag": 0, '
                                        '"writeQueueNums": 4}')
    assert QueueData.from_json(qd.to_json()) == qd
    assert QueueData.from_json({"brokerName": "b", "readQueueNums": 1, "writeQueueNums": 2, "perm": 4}) == \
        QueueData("b", 1, 2, 4, 0)


def test_broker_data_json_order_and_round_trip() -> None:
    bd = BrokerData("c1", "b1", {1: "h:2", 0: "h:1"})
    assert json.dumps(bd.to_json()) == '{"brokerAddrs": {"0": "h:1", "1": "h:2"}, "brokerName": "b1", "cluster": "c1"}'
    assert BrokerData.from_json(bd.to_json()) == bd
    assert BrokerData.from_json({"brokerName": "b"}) == BrokerData("", "b", {})


@pytest.mark.parametrize("bad", [{"brokerName": "b"}, {"brokerName": "b", "readQueueNums": "x", "writeQueueNums": 1,
                                                       "perm": 6}, []])
def test_malformed_queue_data(bad: object) -> None:
    with pytest.raises((KeyError, TypeError, ValueError)):
        QueueData.from_json(bad)


def test_select_broker_addr_prefers_the_master() -> None:
    assert BrokerData("c", "b", {1: "s", MASTER_ID: "m"}).select_broker_addr() == "m"
    assert BrokerData("c", "b", {2: "s"}).select_broker_addr() == "s"
    assert BrokerData("c", "b").select_broker_addr() is None
