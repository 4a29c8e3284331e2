"""NamesrvProcessor remembers the connection each broker registered over; that connection's close removes the
broker (RouteInfoManager.onChannelDestroy), another connection's close or an unregistered broker's does not."""

from __future__ import annotations

import asyncio
import json

from reference_broker.namesrv.processor import NamesrvProcessor
from reference_broker.namesrv.route_info import RouteInfoManager
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import create_request

BODY = json.dumps({"topicConfigSerializeWrapper": {"topicConfigTable": {"T": {
    "topicName": "T", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}}, "dataVersion": {"counter": 1,
                                                                                           "timestamp": 1}},
    "filterServerList": []}).encode()


def register(proc: NamesrvProcessor, ctx: object, addr: str, broker_id: int = 0) -> None:
    cmd = create_request(RequestCode.REGISTER_BROKER, {
        "brokerName": "b", "brokerAddr": addr, "clusterName": "c", "haServerAddr": addr, "brokerId": str(broker_id),
        "bodyCrc32": "0"}, BODY)
    assert asyncio.run(proc.handle(ctx, cmd)).code == ResponseCode.SUCCESS  # type: ignore[arg-type]


def addrs(proc: NamesrvProcessor) -> dict[int, str]:
    bd = proc.route_info.broker_addr_table.get("b")
    return {} if bd is None else dict(bd.broker_addrs)


def test_the_registration_connections_close_removes_only_its_broker():
    proc = NamesrvProcessor(RouteInfoManager())
    master_conn, slave_conn = object(), object()
    register(proc, master_conn, "h:1")
    register(proc, slave_conn, "h:2", broker_id=1)
    proc.on_channel_close(object())
    assert addrs(proc) == {0: "h:1", 1: "h:2"}
    proc.on_channel_close(master_conn)
    assert addrs(proc) == {1: "h:2"}
    proc.on_channel_close(slave_conn)
    assert addrs(proc) == {} and proc.route_info.pick_topic_route_data("T") is None


def test_a_later_registration_over_a_new_connection_wins():
    proc = NamesrvProcessor(RouteInfoManager())
    old, new = object(), object()
    register(proc, old, "h:1")
    register(proc, new, "h:1")
    proc.on_channel_close(old)
    assert addrs(proc) == {0: "h:1"}


def test_an_unregistered_brokers_connection_closes_without_effect():
    proc = NamesrvProcessor(RouteInfoManager())
    conn = object()
    register(proc, conn, "h:1")
    cmd = create_request(RequestCode.UNREGISTER_BROKER, {"brokerName": "b", "brokerAddr": "h:1",
                                                          "clusterName": "c", "brokerId": "0"})
    assert asyncio.run(proc.handle(conn, cmd)).code == ResponseCode.SUCCESS  # type: ignore[arg-type]
    assert proc.broker_channels == {}
