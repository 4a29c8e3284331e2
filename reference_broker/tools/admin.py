"""This module owns the admin operations behind ``python -m reference_broker admin`` (mqadmin's subcommands,
tools/.../command/*, 4.9.8): each is a function over a name-server address that returns plain data, and the
CLI (``admin_cli``) prints it. They speak the remoting protocol directly, one short-lived connection per
peer, so they work against any broker that speaks RocketMQ 4.x's protocol.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reference_broker.common import record as rec
from reference_broker.common.quarantine_names import BIN_SUFFIX, QUARANTINE_DIR
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import RemotingCommand, create_request, fastjson_loads, json_loads
from reference_broker.remoting.errors import RemotingError
from reference_broker.store.quarantine import list_quarantine


class AdminError(RuntimeError):
    """A request failed; carries the RocketMQ response code when there was a response."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


def _split(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise AdminError(f"bad address {addr!r}: expected HOST:PORT")
    return host, int(port)


@contextmanager
def _connect(addr: str, timeout_s: float = 5.0) -> Iterator[RemotingClient]:
    host, port = _split(addr)
    client = RemotingClient(host, port, timeout_s)
    try:
        yield client
    finally:
        client.close()


def _invoke(addr: str, code: int, fields: dict[str, str] | None = None, body: bytes = b"",
            ok: tuple[int, ...] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
    with _connect(addr) as c:
        resp = c.invoke(create_request(code, fields or {}, body))
    if resp.code not in ok:
        raise AdminError(f"{addr}: code {resp.code}: {resp.remark}", resp.code)
    return resp


def _first_namesrv(namesrv: str) -> str:
    addrs = [a.strip() for a in namesrv.split(";") if a.strip()]
    if not addrs:
        raise AdminError("no name server address given (-n HOST:PORT)")
    return addrs[0]


@dataclass(frozen=True)
class QueueRef:
    broker_name: str
    broker_addr: str
    queue_id: int


def cluster_info(namesrv: str) -> dict[str, Any]:
    resp = _invoke(_first_namesrv(namesrv), RequestCode.GET_BROKER_CLUSTER_INFO)
    info: dict[str, Any] = fastjson_loads(resp.body)
    return info


def master_addrs(namesrv: str, cluster: str | None = None) -> dict[str, str]:
    """brokerName → master address, optionally within one cluster."""
    info = cluster_info(namesrv)
    names = None if cluster is None else set(info.get("clusterAddrTable", {}).get(cluster, []))
    out = {}
    for name, bd in info.get("brokerAddrTable", {}).items():
        if names is not None and name not in names:
            continue
        addr = bd.get("brokerAddrs", {}).get("0")
        if addr:
            out[name] = addr
    return out


def topic_route(namesrv: str, topic: str) -> dict[str, Any]:
    resp = _invoke(_first_namesrv(namesrv), RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    route: dict[str, Any] = fastjson_loads(resp.body)
    return route


def read_queues(namesrv: str, topic: str) -> list[QueueRef]:
    route = topic_route(namesrv, topic)
    addrs = {bd["brokerName"]: bd.get("brokerAddrs", {}).get("0") for bd in route.get("brokerDatas", [])}
    out = []
    for qd in route.get("queueDatas", []):
        addr = addrs.get(qd["brokerName"])
        if addr:
            out += [QueueRef(qd["brokerName"], addr, q) for q in range(int(qd["readQueueNums"]))]
    return sorted(out, key=lambda r: (r.broker_name, r.queue_id))


def update_topic(namesrv: str, topic: str, read_queues_n: int = 8, write_queues_n: int = 8, perm: int = 6,
                 cluster: str | None = None, broker_addr: str | None = None, order: bool = False) -> list[str]:
    """UpdateTopicSubCommand: create or update on one broker (-b) or every master of a cluster (-c)."""
    targets = [broker_addr] if broker_addr else list(master_addrs(namesrv, cluster).values())
    if not targets:
        raise AdminError("no broker to create the topic on (check -c / -b and the name server)")
    fields = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(read_queues_n),
              "writeQueueNums": str(write_queues_n), "perm": str(perm), "topicFilterType": "SINGLE_TAG",
              "topicSysFlag": "0", "order": str(order).lower()}
    for addr in targets:
        _invoke(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, fields)
    return targets


def update_subscription_group(namesrv: str, group: str, retry_max_times: int = 16, retry_queue_nums: int = 1,
                              consume_broadcast_enable: bool = True, cluster: str | None = None,
                              broker_addr: str | None = None) -> list[str]:
    """UpdateSubGroupSubCommand: create or update a subscription group on one broker (-b) or every master of a
    cluster (-c). The body is SubscriptionGroupConfig's JSON with 4.9.8's defaults for the fields not given."""
    targets = [broker_addr] if broker_addr else list(master_addrs(namesrv, cluster).values())
    if not targets:
        raise AdminError("no broker to create the subscription group on (check -c / -b and the name server)")
    body = json.dumps({"groupName": group, "consumeEnable": True, "consumeFromMinEnable": True,
                       "consumeBroadcastEnable": consume_broadcast_enable, "retryQueueNums": retry_queue_nums,
                       "retryMaxTimes": retry_max_times, "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1,
                       "notifyConsumerIdsChangedEnable": True}).encode()
    for addr in targets:
        _invoke(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)
    return targets


def topic_list(namesrv: str) -> list[str]:
    resp = _invoke(_first_namesrv(namesrv), RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    topics: list[str] = json_loads(resp.body).get("topicList", [])
    return topics


def _offset(addr: str, code: int, topic: str, queue_id: int) -> int:
    resp = _invoke(addr, code, {"topic": topic, "queueId": str(queue_id)})
    return int(resp.ext_fields.get("offset") or resp.ext_fields.get("timestamp") or 0)


def topic_status(namesrv: str, topic: str) -> list[dict[str, Any]]:
    """TopicStatusSubCommand: min/max offset and last update time per queue."""
    rows = []
    for q in read_queues(namesrv, topic):
        max_off = _offset(q.broker_addr, RequestCode.GET_MAX_OFFSET, topic, q.queue_id)
        min_off = _offset(q.broker_addr, RequestCode.GET_MIN_OFFSET, topic, q.queue_id)
        rows.append({"brokerName": q.broker_name, "queueId": q.queue_id, "minOffset": min_off, "maxOffset": max_off})
    return rows


def consumer_progress(namesrv: str, group: str, topic: str | None = None) -> list[dict[str, Any]]:
    """ConsumerProgressSubCommand: broker offset, consumer offset and the backlog (diff) per queue."""
    topics = [topic] if topic else []
    if not topics:
        for addr in master_addrs(namesrv).values():
            # fastjson: 4.9.8 writes the queue ids of offsetTable as bare numeric keys
            offsets = fastjson_loads(_invoke(addr, RequestCode.GET_ALL_CONSUMER_OFFSET).body).get("offsetTable", {})
            topics += [k.split("@", 1)[0] for k in offsets if k.split("@", 1)[1:] == [group]]
        topics = sorted(set(topics))
    rows = []
    for t in topics:
        for q in read_queues(namesrv, t):
            broker_off = _offset(q.broker_addr, RequestCode.GET_MAX_OFFSET, t, q.queue_id)
            resp = _invoke(q.broker_addr, RequestCode.QUERY_CONSUMER_OFFSET,
                           {"consumerGroup": group, "topic": t, "queueId": str(q.queue_id)},
                           ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
            consumer_off = int(resp.ext_fields["offset"]) if resp.code == ResponseCode.SUCCESS else -1
            rows.append({"topic": t, "brokerName": q.broker_name, "queueId": q.queue_id, "brokerOffset": broker_off,
                         "consumerOffset": consumer_off,
                         "diff": broker_off - max(consumer_off, 0)})
    return rows


def _describe(m: rec.MessageExt) -> dict[str, Any]:
    return {"msgId": m.msg_id, "offsetMsgId": m.offset_msg_id, "topic": m.topic, "tags": m.tags, "keys": m.keys,
            "queueId": m.queue_id, "queueOffset": m.queue_offset, "commitLogOffset": m.commit_log_offset,
            "reconsumeTimes": m.reconsume_times, "bornTimestamp": m.born_timestamp,
            "storeTimestamp": m.store_timestamp, "storeHost": f"{m.store_host[0]}:{m.store_host[1]}",
            "bodySize": len(m.body), "properties": m.properties,
            "body": m.body.decode("utf-8", "replace") if len(m.body) <= 512 else f"<{len(m.body)} bytes>"}


def query_msg_by_id(offset_msg_id: str) -> dict[str, Any]:
    """QueryMsgByIdSubCommand for an offsetMsgId: the broker address and offset are inside the id."""
    try:
        host, port, offset = rec.decode_message_id(offset_msg_id)
    except rec.MessageIdError as exc:
        raise AdminError(f"not an offsetMsgId: {exc}") from None
    resp = _invoke(f"{host}:{port}", RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(offset)})
    return _describe(rec.decode_messages(resp.body)[0])


def query_msg_by_key(namesrv: str, topic: str, key: str, max_num: int = 32) -> list[dict[str, Any]]:
    out = []
    for addr in sorted({q.broker_addr for q in read_queues(namesrv, topic)}):
        resp = _invoke(addr, RequestCode.QUERY_MESSAGE, {
            "topic": topic, "key": key, "maxNum": str(max_num), "beginTimestamp": "0",
            "endTimestamp": str(time.time_ns() // 1_000_000 + 1000)}, ok=(ResponseCode.SUCCESS,
                                                                         ResponseCode.QUERY_NOT_FOUND))
        if resp.code == ResponseCode.SUCCESS:
            out += [_describe(m) for m in rec.decode_messages(resp.body)]
    return out


def query_msg_by_offset(namesrv: str, topic: str, broker_name: str, queue_id: int, offset: int) -> dict[str, Any]:
    return _describe(message_at(namesrv, topic, broker_name, queue_id, offset))


def message_at(namesrv: str, topic: str, broker_name: str, queue_id: int, offset: int) -> rec.MessageExt:
    """The message at one queue offset as the broker stores it (body bytes and all), by a one-message pull."""
    addr = master_addrs(namesrv).get(broker_name)
    if addr is None:
        raise AdminError(f"broker {broker_name!r} is not known to the name server")
    resp = _invoke(addr, RequestCode.PULL_MESSAGE, {
        "consumerGroup": "TOOLS_CONSUMER", "topic": topic, "queueId": str(queue_id), "queueOffset": str(offset),
        "maxMsgNums": "1", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
        "subVersion": "0", "expressionType": "TAG"}, ok=(ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND,
                                                        ResponseCode.PULL_OFFSET_MOVED))
    if resp.code != ResponseCode.SUCCESS:
        raise AdminError(f"no message at {topic}/{broker_name}/{queue_id}@{offset} ({resp.remark})", resp.code)
    return rec.decode_messages(resp.body)[0]


def broker_status(broker_addr: str) -> dict[str, str]:
    resp = _invoke(broker_addr, RequestCode.GET_BROKER_RUNTIME_INFO)
    table: dict[str, str] = json_loads(resp.body).get("table", {})
    return table


def store_quarantine(store_root: str | Path) -> list[dict[str, Any]]:
    """The quarantined cuts of a store, read from its directory (offline: no broker needed; the broker's
    runtime stats give the totals as quarantinedFiles / quarantinedBytes / quarantinedIntactRecords)."""
    root = Path(store_root)
    rows = []
    for e in list_quarantine(root):
        row = e.to_json()
        row["path"] = str(root / QUARANTINE_DIR / (e.name + BIN_SUFFIX))
        rows.append(row)
    return rows


def replication_rows(info: dict[str, Any], runtime: dict[str, dict[str, str] | None],
                     cluster: str | None = None) -> list[dict[str, Any]]:
    """One row per broker of each broker group (cluster info's brokerAddrTable), from each broker's runtime
    info (None: unreachable). A master's row: its commit log's end, its connected slaves and how far the least
    advanced is behind (slaveFallBehindMuch); a slave's: the offset it acknowledged to its master
    (haReportedOffset) and its lag in bytes behind the master's end."""
    names = None if cluster is None else set(info.get("clusterAddrTable", {}).get(cluster, []))
    rows: list[dict[str, Any]] = []
    for name, bd in sorted(info.get("brokerAddrTable", {}).items()):
        if names is not None and name not in names:
            continue
        addrs = {int(i): a for i, a in bd.get("brokerAddrs", {}).items()}
        master = runtime.get(addrs[0]) if 0 in addrs else None
        master_max = int(master["commitLogMaxOffset"]) if master else None
        for broker_id, addr in sorted(addrs.items()):
            t = runtime.get(addr)
            row: dict[str, Any] = {"brokerName": name, "brokerId": broker_id, "addr": addr,
                                   "role": t.get("brokerRole", "?") if t else "unreachable",
                                   "maxOffset": t.get("commitLogMaxOffset", "") if t else ""}
            if t and broker_id == 0:
                row["slaves"] = t.get("haConnectionCount", "")
                row["fallBehind"] = t.get("slaveFallBehindMuch", "")
            elif t:
                ack = int(t.get("haReportedOffset", "0"))
                row["ackOffset"] = ack
                row["lagBytes"] = "" if master_max is None else max(0, master_max - ack)
                row["connected"] = t.get("haMasterConnected", "")
            rows.append(row)
    return rows


def ha_status(namesrv: str, cluster: str | None = None) -> list[dict[str, Any]]:
    """Replication of every broker group the name server knows (``admin haStatus``)."""
    info = cluster_info(namesrv)
    runtime: dict[str, dict[str, str] | None] = {}
    for bd in info.get("brokerAddrTable", {}).values():
        for addr in bd.get("brokerAddrs", {}).values():
            try:
                runtime[addr] = broker_status(addr)
            except (AdminError, RemotingError):
                runtime[addr] = None
    return replication_rows(info, runtime, cluster)


# ---- resetOffsetByTime ------------------------------------------------------------------------------------

def parse_timestamp(text: str, now_ms: int | None = None) -> int:
    """ResetOffsetByTimeCommand's -s: "now", milliseconds since the epoch, or local time
    yyyy-MM-dd#HH:mm:ss:SSS (UtilAll.YYYY_MM_DD_HH_MM_SS_SSS)."""
    text = text.strip()
    if text == "now":
        return time.time_ns() // 1_000_000 if now_ms is None else now_ms
    try:
        return int(text)
    except ValueError:
        pass
    bad = AdminError(f"bad timestamp {text!r}: expected now, milliseconds, or yyyy-MM-dd#HH:mm:ss:SSS")
    day, _, clock = text.partition("#")
    parts = clock.split(":")
    if len(parts) != 4 or len(parts[3]) != 3 or not parts[3].isdigit():
        raise bad
    try:
        parsed = time.strptime(f"{day} {parts[0]}:{parts[1]}:{parts[2]}", "%Y-%m-%d %H:%M:%S")
    except ValueError:
        raise bad from None
    return int(time.mktime(parsed)) * 1000 + int(parts[3])


@dataclass(frozen=True)
class ResetResult:
    """``mode`` "broker": the brokers rewound the live consumers (INVOKE_BROKER_TO_RESET_OFFSET), ``rows`` are
    brokerName / queueId / offset; "stored": nobody was online and the stored offsets were rewound (as
    ResetOffsetByTimeOldCommand does), ``rows`` also carry brokerOffset / consumerOffset / timestampOffset."""

    mode: str
    timestamp: int
    rows: list[dict[str, Any]]


def _route_masters(namesrv: str, topic: str) -> list[tuple[str, str, int]]:
    """(brokerName, address, readQueueNums) of each broker serving the topic (BrokerData.selectBrokerAddr:
    the master, else some slave)."""
    route = topic_route(namesrv, topic)
    queues = {qd["brokerName"]: int(qd["readQueueNums"]) for qd in route.get("queueDatas", [])}
    out = []
    for bd in route.get("brokerDatas", []):
        addrs = bd.get("brokerAddrs", {})
        addr = addrs.get("0") or next(iter(addrs.values()), None)
        if addr:
            out.append((bd["brokerName"], addr, queues.get(bd["brokerName"], 0)))
    return sorted(out)


def reset_offset_by_time(namesrv: str, group: str, topic: str, timestamp: int, force: bool = True,
                         for_c: bool = False) -> ResetResult:
    """ResetOffsetByTimeCommand (mqadmin resetOffsetByTime, 4.9.8): ask each broker of the topic to rewind
    the group's live consumers (DefaultMQAdminExtImpl.resetOffsetByTimestamp); when a broker answers
    CONSUMER_NOT_ONLINE, rewind the group's stored offsets instead (resetOffsetByTimestampOld: per queue the
    committed offset, the offset by time — moved only if ``force`` or earlier — written back with
    UPDATE_CONSUMER_OFFSET). ``for_c`` asks as a C++ client (the brokers then send ResetOffsetBodyForC)."""
    from reference_broker.common import reset_offset_body

    brokers = _route_masters(namesrv, topic)
    rows: list[dict[str, Any]] = []
    fields = {"topic": topic, "group": group, "timestamp": str(timestamp), "isForce": str(force).lower()}
    for _name, addr, _n in brokers:
        cmd = create_request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, fields)
        if for_c:
            cmd.language = "CPP"
        with _connect(addr) as c:
            resp = c.invoke(cmd)
        if resp.code == ResponseCode.CONSUMER_NOT_ONLINE:
            return _reset_stored_offsets(brokers, group, topic, timestamp, force)
        if resp.code != ResponseCode.SUCCESS:
            raise AdminError(f"{addr}: code {resp.code}: {resp.remark}", resp.code)
        table = reset_offset_body.decode(resp.body) if resp.body else {}
        rows += [{"brokerName": b, "queueId": q, "offset": o} for (_t, b, q), o in sorted(table.items())]
    return ResetResult("broker", timestamp, rows)


def _reset_stored_offsets(brokers: list[tuple[str, str, int]], group: str, topic: str, timestamp: int,
                          force: bool) -> ResetResult:
    """resetOffsetByTimestampOld. mqadmin reads the offsets with GET_CONSUME_STATS (208); this asks per queue
    (QUERY_CONSUMER_OFFSET, GET_MAX_OFFSET), which every broker serves. As there, a broker where the group
    committed nothing for the topic is left alone, and a queue without an offset counts as 0."""
    rows: list[dict[str, Any]] = []
    for name, addr, n in brokers:
        committed = {}
        for q in range(n):
            resp = _invoke(addr, RequestCode.QUERY_CONSUMER_OFFSET,
                           {"consumerGroup": group, "topic": topic, "queueId": str(q)},
                           ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
            if resp.code == ResponseCode.SUCCESS:
                committed[q] = int(resp.ext_fields["offset"])
        if not committed:
            continue
        for q in range(n):
            consumer_offset = committed.get(q, 0)
            by_time = int(_invoke(addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {
                "topic": topic, "queueId": str(q), "timestamp": str(timestamp)}).ext_fields["offset"])
            reset = consumer_offset
            if force or by_time < consumer_offset:
                reset = by_time
                _invoke(addr, RequestCode.UPDATE_CONSUMER_OFFSET, {
                    "consumerGroup": group, "topic": topic, "queueId": str(q), "commitOffset": str(by_time)})
            rows.append({"brokerName": name, "queueId": q,
                         "brokerOffset": _offset(addr, RequestCode.GET_MAX_OFFSET, topic, q),
                         "consumerOffset": consumer_offset, "timestampOffset": by_time, "resetOffset": reset})
    return ResetResult("stored", timestamp, rows)
