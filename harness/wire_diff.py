"""The wire differential: one script of requests, good and bad, sent in the same order to a fresh reference broker
and a fresh Apache RocketMQ 4.9.8 (each with its own name server), and their answers compared field by field.

What is compared, per request (``compare``): the response code; the remark, where RocketMQ's is fixed text
(``Case.remark``), after the addresses, ports and timestamps in it are replaced by placeholders; the names of
the header's fields, and the values of those that must agree (offsets, queue ids, ``STABLE_FIELDS``); and the
body: a JSON body by its top-level keys, a message body by each message's topic, keys, body and queue offset,
anything else by whether there is one. What must differ is normalised first: timestamps, hosts and ports,
message ids (they embed the broker's address), the broker's version.

A difference is either fixed in the reference broker or listed in ``KNOWN_DIFFERENCES`` with its reason (and in
the README's "Deliberate differences"); tests/harness/test_wire_diff.py holds the two brokers to exactly that
list. ``python -m harness wire-diff`` prints the table.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from harness.launcher import Topology
from harness.rocketmq import BrokerImpl
from reference_broker.common import message as mc
from reference_broker.common.message_batch import BatchEntry, encode_batch
from reference_broker.common.record import RecordError, decode_messages
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode
from reference_broker.remoting.command import create_request, fastjson_loads
from reference_broker.remoting.errors import RemotingError
from reference_broker.remoting.headers import PULL_FLAG_SUBSCRIPTION, SEND_V1_KEYS

TOPIC: Final = "WireDiffTopic"
GROUP: Final = "WireDiffGroup"
PRODUCER_GROUP: Final = "WireDiffProducer"
BORN_MS: Final = 1_700_000_000_000
# Header fields whose values both brokers must give alike (the rest are compared by name only).
STABLE_FIELDS: Final = frozenset({"queueId", "queueOffset", "offset", "nextBeginOffset", "minOffset",
                                  "maxOffset", "suggestWhichBrokerId", "transactionId"})
SETTLE_S: Final = 1.0  # after sends: RocketMQ builds the consume queue a moment after the ack
BROKER_NAME: Final = "broker-a"  # the launcher's first broker (answers() starts it)

Target = Literal["broker", "namesrv"]


@dataclass(frozen=True)
class Case:
    name: str
    code: int
    fields: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    target: Target = "broker"
    remark: bool = True  # RocketMQ's remark is fixed text here (else it names an exception or a config dump)
    settle: bool = False  # wait SETTLE_S before this request
    body_summary: bool = True  # compare the bodies' summaries (else only whether there is one: a config dump)


@dataclass(frozen=True)
class Answer:
    code: int
    remark: str | None
    fields: dict[str, str]
    body: str  # the body's summary (``summarise``)


def _props(keys: str, tags: str = "A", **extra: str) -> str:
    pairs = {mc.PROPERTY_KEYS: keys, mc.PROPERTY_TAGS: tags, "WAIT": "true", **extra}
    return "".join(f"{k}\x01{v}\x02" for k, v in pairs.items())


def _send(name: str, topic: str = TOPIC, body: bytes = b"hello", queue_id: int = 0, keys: str = "k1",
          **extra: str) -> Case:
    fields = {"producerGroup": PRODUCER_GROUP, "topic": topic, "defaultTopic": "TBW102",
              "defaultTopicQueueNums": "4", "queueId": str(queue_id), "sysFlag": "0", "bornTimestamp": str(BORN_MS),
              "flag": "0", "properties": _props(keys, **extra), "reconsumeTimes": "0", "unitMode": "false",
              "batch": "false"}
    return Case(name, RequestCode.SEND_MESSAGE, fields, body)


def _v2(fields: Mapping[str, str]) -> dict[str, str]:
    """SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE's one-letter names (SendMessageRequestHeaderV2), as clients send."""
    return {SEND_V1_KEYS[k]: v for k, v in fields.items()}


def _pull(name: str, topic: str = TOPIC, queue_offset: int = 0, queue_id: int = 0, settle: bool = False) -> Case:
    return Case(name, RequestCode.PULL_MESSAGE, {
        "consumerGroup": GROUP, "topic": topic, "queueId": str(queue_id), "queueOffset": str(queue_offset),
        "maxMsgNums": "32", "sysFlag": str(PULL_FLAG_SUBSCRIPTION), "commitOffset": "0", "suspendTimeoutMillis": "0",
        "subscription": "*", "subVersion": "0", "expressionType": "TAG"}, settle=settle)


def _offsets(name: str, code: int, topic: str = TOPIC, settle: bool = False, **extra: str) -> Case:
    return Case(name, code, {"topic": topic, "queueId": "0", **extra}, settle=settle)


def script() -> list[Case]:
    """The requests, in order; each broker gets them on fresh stores."""
    batch = encode_batch([BatchEntry(0, f"b{i}".encode(), {mc.PROPERTY_KEYS: f"bk{i}", "WAIT": "true"})
                          for i in range(3)])
    batch_fields = {"producerGroup": PRODUCER_GROUP, "topic": TOPIC, "defaultTopic": "TBW102",
                    "defaultTopicQueueNums": "4", "queueId": "1", "sysFlag": "0", "bornTimestamp": str(BORN_MS),
                    "flag": "0", "properties": "", "reconsumeTimes": "0", "unitMode": "false", "batch": "true"}
    heartbeat = json.dumps({"clientID": "127.0.0.1@wire-diff", "consumerDataSet": [{
        "groupName": GROUP, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False, "subscriptionDataSet": [{
            "topic": TOPIC, "subString": "*", "tagsSet": [], "codeSet": [], "subVersion": 1,
            "expressionType": "TAG", "classFilterMode": False}]}], "producerDataSet": []}).encode()
    client_id = "127.0.0.1@wire-diff"
    mq_set = {"consumerGroup": GROUP, "clientId": client_id, "onlyThisBroker": True,
              "mqSet": [{"topic": TOPIC, "brokerName": BROKER_NAME, "queueId": 0}]}
    group_config = {"groupName": "WireDiffCreatedGroup", "consumeEnable": True, "consumeFromMinEnable": True,
                    "consumeBroadcastEnable": True, "retryQueueNums": 1, "retryMaxTimes": 16, "brokerId": 0,
                    "whichBrokerWhenConsumeSlowly": 1, "notifyConsumerIdsChangedEnable": True}
    fake_addr = "127.0.0.1:1"  # a broker that registers from this script; nothing listens there
    register_body = json.dumps({"topicConfigSerializeWrapper": {
        "topicConfigTable": {}, "dataVersion": {"timestamp": BORN_MS, "counter": 1}},
        "filterServerList": []}).encode()
    broker_header = {"brokerName": "WireDiffFake", "brokerAddr": fake_addr, "clusterName": "WireDiffCluster",
                     "brokerId": "0"}
    send = _send("send", keys="k1")

    def check_config(expression: str, expression_type: str) -> bytes:
        return json.dumps({"clientId": client_id, "group": GROUP, "subscriptionData": {
            "topic": TOPIC, "subString": expression, "tagsSet": [], "codeSet": [], "subVersion": 1,
            "expressionType": expression_type, "classFilterMode": False}}).encode()
    return [
        Case("create topic", RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6",
            "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}),
        send,
        Case("send with V2 header names", RequestCode.SEND_MESSAGE_V2, _v2(_send("", keys="k2").fields), b"hello"),
        _send("send with a delay level", keys="k3", DELAY="2"),
        _send("send to an illegal topic name", topic="bad topic!"),
        _send("send to a system topic", topic="SCHEDULE_TOPIC_XXXX"),
        _send("send to queue 99", queue_id=99),
        _send("send a body over 4 MiB", body=b"x" * ((4 << 20) + 1)),
        Case("send without a topic", RequestCode.SEND_MESSAGE,
             {k: v for k, v in send.fields.items() if k != "topic"}, b"hello"),
        Case("send with a queue id that is not a number", RequestCode.SEND_MESSAGE,
             {**send.fields, "queueId": "one"}, b"hello", remark=False),
        # 4.9.8 answers a NullPointerException's text; the reference broker names the field.
        Case("send without a flag", RequestCode.SEND_MESSAGE,
             {k: v for k, v in send.fields.items() if k != "flag"}, b"hello", remark=False),
        Case("send without a producer group", RequestCode.SEND_MESSAGE,
             {k: v for k, v in send.fields.items() if k != "producerGroup"}, b"hello"),
        Case("create a read-only topic", RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": "WireDiffReadOnly", "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1",
            "perm": "4", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}),
        _send("send to a read-only topic", topic="WireDiffReadOnly"),
        Case("send a batch", RequestCode.SEND_BATCH_MESSAGE, _v2(batch_fields), batch),
        Case("send a batch with V1 header names", RequestCode.SEND_BATCH_MESSAGE, batch_fields, batch),
        _offsets("max offset", RequestCode.GET_MAX_OFFSET, settle=True),
        _offsets("max offset of an unknown topic", RequestCode.GET_MAX_OFFSET, topic="NoSuchTopic"),
        _offsets("min offset", RequestCode.GET_MIN_OFFSET),
        _offsets("earliest store time", RequestCode.GET_EARLIEST_MSG_STORETIME),
        _offsets("offset by timestamp 0", RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, timestamp="0"),
        _pull("pull from 0"),
        _pull("pull past the end", queue_offset=100),
        _pull("pull an unknown topic", topic="NoSuchTopic"),
        Case("query an unknown group's offset", RequestCode.QUERY_CONSUMER_OFFSET,
             {"consumerGroup": "NoSuchGroup", "topic": TOPIC, "queueId": "0"}),
        Case("commit an offset", RequestCode.UPDATE_CONSUMER_OFFSET,
             {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0", "commitOffset": "1"}),
        Case("query the committed offset", RequestCode.QUERY_CONSUMER_OFFSET,
             {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0"}),
        Case("reset offsets by time on an unknown topic", RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
             {"topic": "NoSuchTopic", "group": GROUP, "timestamp": "0", "isForce": "true"}),
        Case("reset offsets by time of a group with offsets on one queue only",
             RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
             {"topic": TOPIC, "group": GROUP, "timestamp": "0", "isForce": "true"}),
        Case("view the message at offset 0", RequestCode.VIEW_MESSAGE_BY_ID, {"offset": "0"}),
        Case("view past the log's end", RequestCode.VIEW_MESSAGE_BY_ID, {"offset": "99999999"}, remark=False),
        Case("query by key", RequestCode.QUERY_MESSAGE, {
            "topic": TOPIC, "key": "k1", "maxNum": "32", "beginTimestamp": "0",
            "endTimestamp": str(4_000_000_000_000)}, settle=True),
        Case("query by a key nobody sent", RequestCode.QUERY_MESSAGE, {
            "topic": TOPIC, "key": "nope", "maxNum": "32", "beginTimestamp": "0",
            "endTimestamp": str(4_000_000_000_000)}),
        Case("heartbeat", RequestCode.HEART_BEAT, body=heartbeat),
        Case("check a TAG subscription", RequestCode.CHECK_CLIENT_CONFIG, body=check_config("A || B", "TAG")),
        Case("check an SQL92 subscription without enablePropertyFilter", RequestCode.CHECK_CLIENT_CONFIG,
             body=check_config("a > 1", "SQL92")),
        Case("consumer list of an unknown group", RequestCode.GET_CONSUMER_LIST_BY_GROUP,
             {"consumerGroup": "NoSuchGroup"}),
        Case("send back", RequestCode.CONSUMER_SEND_MSG_BACK, {
            "group": GROUP, "offset": "0", "delayLevel": "0", "originTopic": TOPIC, "maxReconsumeTimes": "16"}),
        Case("send back an offset past the end", RequestCode.CONSUMER_SEND_MSG_BACK, {
            "group": GROUP, "offset": "99999999", "delayLevel": "0", "originTopic": TOPIC}, remark=False),
        _send("send a half message (TRAN_MSG)", keys="tx1", TRAN_MSG="true", PGROUP=PRODUCER_GROUP),
        Case("register a filter server", RequestCode.REGISTER_FILTER_SERVER, {"filterServerAddr": "127.0.0.1:1"}),
        Case("end a transaction where no half message is", RequestCode.END_TRANSACTION, {
            "producerGroup": PRODUCER_GROUP, "tranStateTableOffset": "0", "commitLogOffset": "99999999",
            "commitOrRollback": "8", "fromTransactionCheck": "false", "msgId": "m"}),
        Case("end a transaction with a bad commitOrRollback", RequestCode.END_TRANSACTION, {
            "producerGroup": PRODUCER_GROUP, "tranStateTableOffset": "0", "commitLogOffset": "0",
            "commitOrRollback": "5", "fromTransactionCheck": "false", "msgId": "m"},
             remark=False),  # 4.9.8: the RemotingCommandException's class, message and a stack frame
        Case("lock a queue", RequestCode.LOCK_BATCH_MQ, body=json.dumps(mq_set).encode()),
        Case("lock a queue for another client", RequestCode.LOCK_BATCH_MQ,
             body=json.dumps({**mq_set, "clientId": "127.0.0.1@other"}).encode()),
        Case("unlock the queue", RequestCode.UNLOCK_BATCH_MQ, body=json.dumps(mq_set).encode()),
        Case("unregister the client", RequestCode.UNREGISTER_CLIENT,
             {"clientID": client_id, "consumerGroup": GROUP}),
        Case("create a subscription group", RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
             body=json.dumps(group_config).encode()),
        Case("all subscription groups", RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG),
        Case("all consumer offsets", RequestCode.GET_ALL_CONSUMER_OFFSET),
        Case("all delay offsets", RequestCode.GET_ALL_DELAY_OFFSET),
        Case("runtime info", RequestCode.GET_BROKER_RUNTIME_INFO),
        Case("broker config", RequestCode.GET_BROKER_CONFIG, body_summary=False),
        Case("an unknown request code", 9999),
        Case("all topic configs", RequestCode.GET_ALL_TOPIC_CONFIG),
        Case("delete the read-only topic", RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "WireDiffReadOnly"}),
        Case("route of the topic", RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}, target="namesrv",
             settle=True),
        Case("route of an unknown topic", RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "NoSuchTopic"},
             target="namesrv"),
        Case("a missing kv config", RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "nope"}, target="namesrv"),
        Case("put a kv config", RequestCode.PUT_KV_CONFIG, {"namespace": "WireDiffNs", "key": "k", "value": "v1"},
             target="namesrv"),
        Case("get the kv config", RequestCode.GET_KV_CONFIG, {"namespace": "WireDiffNs", "key": "k"},
             target="namesrv"),
        Case("kv list of the namespace", RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "WireDiffNs"},
             target="namesrv"),
        Case("kv list of an unknown namespace", RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "NoSuchNs"},
             target="namesrv"),
        Case("put a kv config without a value", RequestCode.PUT_KV_CONFIG, {"namespace": "WireDiffNs", "key": "k"},
             target="namesrv", remark=False),
        Case("delete the kv config", RequestCode.DELETE_KV_CONFIG, {"namespace": "WireDiffNs", "key": "k"},
             target="namesrv"),
        Case("get the deleted kv config", RequestCode.GET_KV_CONFIG, {"namespace": "WireDiffNs", "key": "k"},
             target="namesrv"),
        Case("kv list of the emptied namespace", RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "WireDiffNs"},
             target="namesrv"),
        Case("an unknown request code at the name server", 9999, target="namesrv"),
        Case("cluster info", RequestCode.GET_BROKER_CLUSTER_INFO, target="namesrv"),
        Case("all topics at the name server", RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, target="namesrv"),
        Case("register a broker", RequestCode.REGISTER_BROKER,
             {**broker_header, "haServerAddr": "127.0.0.1:2", "compressed": "false", "bodyCrc32": "0"},
             register_body, target="namesrv"),
        Case("unregister that broker", RequestCode.UNREGISTER_BROKER, broker_header, target="namesrv"),
        Case("unregister a broker nobody registered", RequestCode.UNREGISTER_BROKER,
             {**broker_header, "brokerName": "NoSuchBroker"}, target="namesrv"),
    ]


_ADDR = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}:\d+")
_LONG_NUMBER = re.compile(r"\b\d{10,}\b")  # timestamps and the like


def normalise(text: str) -> str:
    return _LONG_NUMBER.sub("<n>", _ADDR.sub("<addr>", text))


def summarise(body: bytes | None) -> str:
    """A body as both brokers can agree on it: a JSON object by its keys, messages by what was stored."""
    if not body:
        return "-"
    try:
        obj = fastjson_loads(body)
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        return "json " + ",".join(sorted(str(k) for k in obj))
    if isinstance(obj, list):
        return f"json list of {len(obj)}"
    try:
        msgs = decode_messages(body)
    except (RecordError, ValueError):
        msgs = []
    if msgs:
        return "messages " + "; ".join(f"{m.topic} {m.keys} {m.body[:16]!r} q{m.queue_id}@{m.queue_offset}"
                                      for m in msgs)
    return f"{len(body)} bytes"


NO_ANSWER: Final = -1  # the code recorded for a request that got no response (RocketMQ's codes are >= 0)


def ask(addr: str, case: Case, timeout_s: float = 10.0) -> Answer:
    """One request on a connection of its own (a broker that closes the connection on one request does not
    spoil the next); no response within ``timeout_s``, or a closed connection, is ``NO_ANSWER``."""
    try:
        with RemotingClient.from_addr(addr, timeout_s) as client:
            resp = client.invoke(create_request(case.code, dict(case.fields), case.body), timeout_s=timeout_s)
    except (RemotingError, OSError) as exc:
        return Answer(NO_ANSWER, f"no response: {type(exc).__name__}", {}, "-")
    return Answer(resp.code, resp.remark, dict(resp.ext_fields or {}), summarise(resp.body))


def compare(case: Case, ours: Answer, theirs: Answer) -> list[str]:
    """What differs, in words (empty: the answers agree)."""
    out = []
    if ours.code != theirs.code:
        out.append(f"code {ours.code} vs {theirs.code}")
    if case.remark and normalise(ours.remark or "") != normalise(theirs.remark or ""):
        out.append(f"remark {ours.remark!r} vs {theirs.remark!r}")
    if set(ours.fields) != set(theirs.fields):
        out.append(f"header fields {sorted(ours.fields)} vs {sorted(theirs.fields)}")
    for name in sorted(STABLE_FIELDS & set(ours.fields) & set(theirs.fields)):
        if ours.fields[name] != theirs.fields[name]:
            out.append(f"{name} {ours.fields[name]} vs {theirs.fields[name]}")
    if case.body_summary and normalise(ours.body) != normalise(theirs.body):
        out.append(f"body {ours.body[:200]!r} vs {theirs.body[:200]!r}")
    elif not case.body_summary and (ours.body == "-") != (theirs.body == "-"):
        out.append(f"body {'none' if ours.body == '-' else 'some'} vs {'none' if theirs.body == '-' else 'some'}")
    return out


def answers(impl: BrokerImpl, root: Path, cases: list[Case], rocketmq_home: Path | None = None,
            progress: Callable[[str], None] = lambda _line: None) -> list[Answer]:
    """The script's answers from a fresh name server and broker of ``impl``."""
    with Topology(root, impl=impl, rocketmq_home=rocketmq_home,
                  broker_conf={"mappedFileSizeCommitLog": 64 << 20}) as topo:
        progress(f"{impl}: {len(cases)} requests")
        out = []
        for case in cases:
            if case.settle:
                time.sleep(SETTLE_S)
            out.append(ask(topo.brokers[0].addr if case.target == "broker" else topo.namesrv_addr, case))
        topo.kill()
        return out


# Differences the reference broker keeps on purpose, or has not closed yet: case name -> why (README, "Deliberate
# differences"). tests/harness/test_wire_diff.py fails on any other, and on one of these that went away.
KNOWN_DIFFERENCES: Final[dict[str, str]] = {
    "register a filter server": "4.9.8 no longer serves REGISTER_FILTER_SERVER (the FilterServer left RocketMQ in "
                                "4.3: REQUEST_CODE_NOT_SUPPORTED); the reference broker has 4.2.0's FilterServer "
                                "and answers as 4.2.0 did, with brokerId and brokerName (docs/filter_server.md)",
    "send a batch with V1 header names": "the reference broker reads a batch's header by either naming; 4.9.8 "
                                         "reads only SendMessageRequestHeaderV2's letters, finds no topic and "
                                         "answers 'The specified topic is blank.'",
    "send to a read-only topic": "4.9.8's msgCheck never reads the topic's permission (only producers' route "
                                 "selection honours it), so it stores a message sent to a topic whose perm "
                                 "forbids writing (docs/findings.md F9); the reference broker refuses it with "
                                 "NO_PERMISSION",
    "put a kv config without a value": "4.9.8 enforces no header field here: it answers SUCCESS and keeps a null "
                                       "value, which then reads as not found; the reference name server refuses "
                                       "it, naming the field",
    "an unknown request code at the name server": "4.9.8's name server never answers a request code it does not "
                                                  "know (DefaultRequestProcessor returns null): the client waits "
                                                  "for its timeout; the reference name server answers "
                                                  "REQUEST_CODE_NOT_SUPPORTED at once, as the broker does",
}


def run(root: Path, rocketmq_home: Path | None = None,
        progress: Callable[[str], None] = lambda _line: None) -> list[dict[str, Any]]:
    """One row per case: its name, both answers' codes, and what differs."""
    cases = script()
    ours = answers("reference", root / "reference", cases, progress=progress)
    theirs = answers("rocketmq", root / "rocketmq", cases, rocketmq_home, progress)
    return [{"case": c.name, "code": int(c.code), "reference": o.code, "rocketmq": t.code,
             "differences": compare(c, o, t), "known": KNOWN_DIFFERENCES.get(c.name)}
            for c, o, t in zip(cases, ours, theirs, strict=True)]


def format_rows(rows: list[dict[str, Any]]) -> str:
    lines = []
    for r in rows:
        state = "same" if not r["differences"] else ("known" if r["known"] else "DIFFER")
        lines.append(f"{state:6}  {r['case']}  (request {r['code']}: {r['reference']} / {r['rocketmq']})")
        lines += [f"          {d}" for d in r["differences"]]
    return "\n".join(lines)
