"""This module owns the client's view of a topic route (TopicRouteData, TopicPublishInfo, 4.9.8). Sans-IO.

The name server answers GET_ROUTEINFO_BY_TOPIC with TopicRouteData JSON::

    {"queueDatas":  [{"brokerName", "readQueueNums", "writeQueueNums", "perm", "topicSysFlag"}],
     "brokerDatas": [{"cluster", "brokerName", "brokerAddrs": {"0": "host:port", "1": ...}}],
     "orderTopicConf": "brokerName:queues;..." (optional), "filterServerTable": {...}}

From it a producer builds the writable queues (MQClientInstance.topicRouteData2TopicPublishInfo) and a
consumer the readable ones (topicRouteData2TopicSubscribeInfo). Only brokers with a master (id 0) take
writes. QueueData and BrokerData, shared with the name server, are in common/route_data.py.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field, replace
from typing import Any

from reference_broker.client.message import MessageQueue
from reference_broker.common.perm import PERM_READ, PERM_WRITE
from reference_broker.common.route_data import MASTER_ID, BrokerData, QueueData
from reference_broker.remoting.command import fastjson_loads


@dataclass(frozen=True, slots=True)
class TopicRouteData:
    queue_datas: tuple[QueueData, ...]
    broker_datas: tuple[BrokerData, ...]
    order_topic_conf: str | None = None
    # filterServerTable: broker address -> its filter servers (RocketMQ <= 4.2's class-filter mode)
    filter_server_table: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def from_json(cls, raw: bytes | str | dict[str, Any]) -> TopicRouteData:
        """ValueError (or KeyError/TypeError, re-raised as ValueError) for a body that is not a route."""
        try:
            obj = raw if isinstance(raw, dict) else fastjson_loads(raw.encode() if isinstance(raw, str) else raw)
            qds = tuple(QueueData.from_json(q) for q in obj.get("queueDatas") or ())
            bds = tuple(BrokerData.from_json(b) for b in obj.get("brokerDatas") or ())
            conf = obj.get("orderTopicConf")
            fst = {str(addr): tuple(str(s) for s in servers)
                   for addr, servers in (obj.get("filterServerTable") or {}).items()}
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"malformed TopicRouteData: {exc!r}") from None
        return cls(qds, bds, str(conf) if conf else None, fst)

    def normalized(self) -> tuple[Any, ...]:
        """A value equal for equal routes whatever the list order (topicRouteDataIsChange sorts both)."""
        return (
            tuple(sorted(self.queue_datas, key=lambda q: q.broker_name)),
            tuple(sorted((b.broker_name, b.cluster, tuple(sorted(b.broker_addrs.items())))
                          for b in self.broker_datas)),
            self.order_topic_conf,
            tuple(sorted((addr, tuple(sorted(servers))) for addr, servers in self.filter_server_table.items())),
        )

    def broker_data(self, broker_name: str) -> BrokerData | None:
        for bd in self.broker_datas:
            if bd.broker_name == broker_name:
                return bd
        return None

    def with_queue_nums_capped(self, cap: int) -> TopicRouteData:
        """The default-topic (TBW102) route as a producer uses it for a new topic: at most ``cap`` queues per
        broker (DefaultMQProducer.defaultTopicQueueNums, 4)."""
        qds = tuple(replace(q, read_queue_nums=min(cap, q.read_queue_nums),
                            write_queue_nums=min(cap, q.read_queue_nums)) for q in self.queue_datas)
        return replace(self, queue_datas=qds)


class TopicPublishInfo:
    """The writable queues of a topic and the round-robin cursor over them (TopicPublishInfo.java).

    Java keeps the cursor in a ThreadLocalIndex (a random start per thread); one shared counter with a random
    start spreads sends the same way and is atomic under the GIL.
    """

    __slots__ = ("_cursor", "message_queues", "order_topic", "route")

    def __init__(self, message_queues: list[MessageQueue], route: TopicRouteData | None, order_topic: bool = False):
        self.message_queues = message_queues
        self.route = route
        self.order_topic = order_topic
        self._cursor = itertools.count(random.randrange(1 << 16))

    @property
    def ok(self) -> bool:
        return bool(self.message_queues)

    def select_one(self, last_broker_name: str | None = None) -> MessageQueue:
        """selectOneMessageQueue: round robin, avoiding ``last_broker_name`` (the broker that just failed) when
        another broker has a queue."""
        mqs = self.message_queues
        n = len(mqs)
        if last_broker_name is not None:
            for _ in range(n):
                mq = mqs[next(self._cursor) % n]
                if mq.broker_name != last_broker_name:
                    return mq
        return mqs[next(self._cursor) % n]


def publish_info_from_route(topic: str, route: TopicRouteData) -> TopicPublishInfo:
    """MQClientInstance.topicRouteData2TopicPublishInfo."""
    mqs: list[MessageQueue] = []
    if route.order_topic_conf:
        for item in route.order_topic_conf.split(";"):
            name, _, nums = item.partition(":")
            mqs.extend(MessageQueue(topic, name, i) for i in range(int(nums)))
        return TopicPublishInfo(mqs, route, order_topic=True)
    for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if not qd.perm & PERM_WRITE:
            continue
        bd = route.broker_data(qd.broker_name)
        if bd is None or MASTER_ID not in bd.broker_addrs:
            continue
        mqs.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.write_queue_nums))
    return TopicPublishInfo(mqs, route)


def subscribe_info_from_route(topic: str, route: TopicRouteData) -> set[MessageQueue]:
    """MQClientInstance.topicRouteData2TopicSubscribeInfo: every readable queue."""
    return {
        MessageQueue(topic, qd.broker_name, i)
        for qd in route.queue_datas
        if qd.perm & PERM_READ
        for i in range(qd.read_queue_nums)
    }
