"""Shared steps of the FilterServer's end-to-end tests: send, consume with a class filter, read the route, find
the broker's filter-server processes."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from harness.launcher import Topology
from reference_broker.client import (
    ClientConfig,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    Producer,
    PushConsumer,
)
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import create_request

# The well-behaved filter, and the same rule in plain Python for the expected set.
GOOD_SOURCE = """\
def match(message):
    n = int(message.properties.get("n", "-1"))
    return message.tags == "A" and n % 3 == 0 and message.body.startswith(b"body-")
"""


def good_rule(i: int) -> bool:
    return i % 2 == 0 and i % 3 == 0  # tags "A" on even i


def cfg(topo: Topology, name: str) -> ClientConfig:
    return ClientConfig(topo.namesrv_addr, name, poll_name_server_interval_s=1.0, rebalance_interval_s=1.0,
                        persist_consumer_offset_interval_s=1.0, heartbeat_broker_interval_s=2.0)


def send(topo: Topology, topic: str, start: int, n: int) -> list[int]:
    """Messages ``start .. start+n-1``: key k<i>, tags A on even i, property n=i."""
    c = cfg(topo, f"fs-producer-{topic}-{start}")
    with Producer("FilterSrvProducer", c.namesrv_addr, client_config=c) as producer:
        for i in range(start, start + n):
            producer.send(Message(topic, f"body-{i}".encode(), tags="A" if i % 2 == 0 else "B", keys=f"k{i}",
                                  properties={"n": str(i)}))
    return list(range(start, start + n))


class Collector:
    """A push consumer in class-filter mode, collecting the keys it receives."""

    def __init__(self, topo: Topology, topic: str, group: str, source: str) -> None:
        self.keys: list[str] = []
        self.lock = threading.Lock()
        c = cfg(topo, f"fs-consumer-{group}")
        self.consumer = PushConsumer(group, c.namesrv_addr, client_config=c,
                                     consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        self.consumer.subscribe(topic, filter_source=source)
        self.consumer.register_message_listener(self._listen)

    def _listen(self, msgs: list[Any], _ctx: object) -> ConsumeConcurrentlyStatus:
        with self.lock:
            self.keys.extend(m.keys for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def got(self) -> set[str]:
        with self.lock:
            return set(self.keys)

    def start(self) -> Collector:
        self.consumer.start()
        return self

    def shutdown(self) -> None:
        self.consumer.shutdown()


def route(topo: Topology, topic: str) -> dict[str, Any]:
    with RemotingClient.from_addr(topo.namesrv_addr) as ns:
        answer = ns.invoke(create_request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    obj: dict[str, Any] = json.loads(answer.body)
    return obj


def filter_servers(topo: Topology, topic: str) -> list[str]:
    table = route(topo, topic).get("filterServerTable") or {}
    return sorted(s for servers in table.values() for s in servers)


def children(pid: int) -> list[int]:
    """The live child processes of ``pid`` (from /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return sorted(out)


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def filtersrv_pids(broker_pid: int) -> list[int]:
    return [p for p in children(broker_pid) if " filtersrv " in cmdline(p)]
