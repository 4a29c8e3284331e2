"""Helpers for the client's end-to-end tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(pred: Callable[[], bool], timeout_s: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} not reached in {timeout_s} s")


def create_topic(topo: Any, topic: str, queues: int) -> None:
    """UPDATE_AND_CREATE_TOPIC on every broker (what mqadmin updateTopic does), then wait for the route."""
    from reference_broker.client.route import TopicRouteData
    from reference_broker.remoting.client import RemotingClient
    from reference_broker.remoting.codes import RequestCode, ResponseCode
    from reference_broker.remoting.command import create_request

    for broker in topo.brokers:
        with RemotingClient.from_addr(broker.addr) as client:
            answer = client.invoke(create_request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
                "topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues),
                "writeQueueNums": str(queues), "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0",
                "order": "false"}))
            assert answer.code == ResponseCode.SUCCESS, answer.remark

    def routed() -> bool:
        with RemotingClient.from_addr(topo.namesrv_addr) as ns:
            answer = ns.invoke(create_request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
        if answer.code != ResponseCode.SUCCESS:
            return False
        route = TopicRouteData.from_json(answer.body)
        return sum(q.read_queue_nums for q in route.queue_datas) == queues * len(topo.brokers)

    wait_for(routed, 40, f"route of {topic}")
