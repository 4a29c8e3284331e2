"""This module owns the route records the name server hands out and the clients read (RocketMQ 4.9.8
common/.../protocol/route/QueueData.java and BrokerData.java): their fields and their JSON. Sans-IO.

In a TopicRouteData body (GET_ROUTEINFO_BY_TOPIC) and in ClusterInfo (GET_BROKER_CLUSTER_INFO)::

    QueueData:  {"brokerName", "perm", "readQueueNums", "topicSysFlag", "writeQueueNums"}
    BrokerData: {"brokerAddrs": {"0": "host:port", "1": ...}, "brokerName", "cluster"}

``to_json`` writes the fields in fastjson's order (alphabetical), as the Java name server does; ``from_json``
reads what a name server sends, in any order.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Final

MASTER_ID: Final = 0  # MixAll.MASTER_ID: the broker id of a master; a slave's is > 0


@dataclass(frozen=True, slots=True)
class QueueData:
    """One broker's queues of a topic."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int  # PermName bits (perm.py)
    topic_sys_flag: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json(cls, obj: Any) -> QueueData:
        """KeyError, TypeError, ValueError or AttributeError when ``obj`` is not a QueueData object."""
        return cls(str(obj["brokerName"]), int(obj["readQueueNums"]), int(obj["writeQueueNums"]), int(obj["perm"]),
                   int(obj.get("topicSysFlag", 0)))


@dataclass(frozen=True, slots=True)
class BrokerData:
    """A broker name's addresses by broker id. The dict itself changes as brokers come and go (the name
    server's table); it takes no part in the hash."""

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict, hash=False)

    def select_broker_addr(self) -> str | None:
        """BrokerData.selectBrokerAddr: the master, else any slave."""
        addr = self.broker_addrs.get(MASTER_ID)
        if addr is None and self.broker_addrs:
            return random.choice(list(self.broker_addrs.values()))
        return addr

    def to_json(self) -> dict[str, Any]:
        # Java's HashMap<Long, String> iterates small ids in ascending order; keys become JSON strings.
        return {
            "brokerAddrs": {str(k): v for k, v in sorted(self.broker_addrs.items())},
            "brokerName": self.broker_name,
            "cluster": self.cluster,
        }

    @classmethod
    def from_json(cls, obj: Any) -> BrokerData:
        """KeyError, TypeError, ValueError or AttributeError when ``obj`` is not a BrokerData object."""
        return cls(str(obj.get("cluster", "")), str(obj["brokerName"]),
                   {int(k): str(v) for k, v in (obj.get("brokerAddrs") or {}).items()})
