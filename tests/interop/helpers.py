"""Broker-side reads for the interop tests: what the broker stored, through the project's admin functions
(reference_broker/tools/admin.py), which speak the remoting protocol to either implementation."""

from __future__ import annotations

import time
from typing import Any

from reference_broker.tools import admin


def stored(ns: str, topic: str) -> list[dict[str, Any]]:
    """Every message of ``topic`` the broker holds, by queue and offset (admin queryMsgByOffset)."""
    out = []
    for row in admin.topic_status(ns, topic):
        # max(.., 0): the reference broker answers -1 for a queue with no consume queue yet (4.9.8: 0)
        for offset in range(max(row["minOffset"], 0), row["maxOffset"]):
            out.append(admin.query_msg_by_offset(ns, topic, row["brokerName"], row["queueId"], offset))
    return out


def wait_stored(ns: str, topic: str, count: int, timeout_s: float = 20.0) -> list[dict[str, Any]]:
    """``stored`` once the topic holds ``count`` messages (a oneway or delayed send lands later than its call
    returns); what it holds at the deadline otherwise."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            msgs = stored(ns, topic)
        except admin.AdminError:  # no route yet: the topic is created by the first message
            msgs = []
        if len(msgs) >= count or time.monotonic() > deadline:
            return msgs
        time.sleep(0.2)


def create_topic(ns: str, broker_addr: str, topic: str, queues: int, timeout_s: float = 30.0) -> None:
    """updateTopic on the broker, then wait until the name server routes it: both brokers register the new
    topic with the name server in the background, and a client that asks first is told there is no route."""
    admin.update_topic(ns, topic, queues, queues, broker_addr=broker_addr)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if admin.topic_route(ns, topic).get("queueDatas"):
                return
        except admin.AdminError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"the name server has no route for {topic} after {timeout_s} s")
        time.sleep(0.1)
