"""One script of SQL92 requests, good and bad, for a name server with two brokers — broker-a with
enablePropertyFilter=true, broker-b without — sent the same way to the reference broker and to RocketMQ 4.9.8
(tests/broker/test_sql92_e2e.py, test_sql92_vs_rocketmq.py). Each step is answered as (code, remark, what was
delivered); the answers 4.9.8 gave are in EXPECTED_498."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from harness.launcher import Topology
from harness.rocketmq import BrokerImpl
from reference_broker.common.record import decode_messages
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode
from reference_broker.remoting.command import RemotingCommand, create_request
from reference_broker.remoting.headers import PULL_FLAG_SUBSCRIPTION

TOPIC: Final = "SqlTopic"
GROUP: Final = "SqlGroup"
SETTLE_S: Final = 1.5  # RocketMQ builds the consume queue a moment after the send's answer

# The messages, in queue order: (keys, tags, user properties). Values cover numbers, non-numbers, blanks.
MESSAGES: Final[list[tuple[str, str, dict[str, str]]]] = [
    ("m0", "A", {"a": "1", "b": "x"}),
    ("m1", "B", {"a": "5", "b": "y"}),
    ("m2", "A", {"a": "10", "b": "x", "c": "on"}),
    ("m3", "C", {"a": "2.5"}),
    ("m4", "B", {"b": "x"}),
    ("m5", "A", {"a": "abc", "b": ""}),
    ("m6", "C", {"a": "-3", "b": "it's"}),
    ("m7", "A", {"a": "7", "c": "on"}),
]

# Selectors whose deliveries are compared: nulls, type conversion, evaluation errors, TAGS and KEYS.
DELIVERY_EXPRESSIONS: Final = [
    "a > 4", "a > 4.0", "a BETWEEN 1 AND 7", "a NOT BETWEEN 1 AND 7", "b = 'x'", "b <> 'x'", "'x' <> b",
    "b IN ('x', 'y')", "b NOT IN ('x')", "c IS NULL", "c IS NOT NULL", "TAGS = 'A' AND a >= 5",
    "TAGS IN ('B', 'C') OR c = 'on'", "NOT (a < 3)", "a = 10 OR b = 'it''s'", "KEYS = 'm3'", "TRUE",
    "a > -5 AND a < 2.6", "(a > 4) IS NULL",
]

# Malformed selectors for CHECK_CLIENT_CONFIG: JavaCC syntax and lexical errors and the factories' checks.
MALFORMED: Final = ["a >", "a > 'x'", "a = #", "a = 'abc", "a = 99999999999999999999", "TRUE = 'a'",
                    "a BETWEEN 3 AND 1", "1", "(a = 1", "a IN (1)", "a = 0.0", "a = NULL", "a NOT x", ""]


def props_text(keys: str, tags: str, user: dict[str, str]) -> str:
    pairs = {"KEYS": keys, "TAGS": tags, "WAIT": "true", **user}
    return "\x02".join(f"{k}\x01{v}" for k, v in pairs.items())


def subscription(expression: str, expression_type: str = "SQL92", version: int = 1) -> dict[str, Any]:
    return {"topic": TOPIC, "subString": expression, "tagsSet": [], "codeSet": [], "subVersion": version,
            "expressionType": expression_type, "classFilterMode": False}


def check_request(expression: str, expression_type: str = "SQL92") -> RemotingCommand:
    body = {"clientId": "127.0.0.1@sql92", "group": GROUP,
            "subscriptionData": subscription(expression, expression_type)}
    return create_request(RequestCode.CHECK_CLIENT_CONFIG, {}, json.dumps(body).encode())


def heartbeat(group: str, expression: str, expression_type: str = "SQL92") -> RemotingCommand:
    body = {"clientID": "127.0.0.1@sql92", "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [subscription(expression, expression_type)]}]}
    return create_request(RequestCode.HEART_BEAT, {}, json.dumps(body).encode())


def pull(expression: str, expression_type: str = "SQL92", with_subscription: bool = True, group: str = GROUP,
         version: int = 1) -> RemotingCommand:
    return create_request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": group, "topic": TOPIC, "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
        "sysFlag": str(PULL_FLAG_SUBSCRIPTION if with_subscription else 0), "commitOffset": "0",
        "suspendTimeoutMillis": "0", "subscription": expression, "subVersion": str(version),
        "expressionType": expression_type})


def _send_all(addr: str) -> None:
    with RemotingClient.from_addr(addr, 10) as c:
        r = c.invoke(create_request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6",
            "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}))
        assert r.code == 0, r.remark
        for keys, tags, user in MESSAGES:
            r = c.invoke(create_request(RequestCode.SEND_MESSAGE, {
                "producerGroup": "SqlProducer", "topic": TOPIC, "defaultTopic": "TBW102",
                "defaultTopicQueueNums": "1", "queueId": "0", "sysFlag": "0", "bornTimestamp": "1", "flag": "0",
                "properties": props_text(keys, tags, user), "reconsumeTimes": "0", "unitMode": "false",
                "batch": "false"}, b"body-" + keys.encode()))
            assert r.code == 0, r.remark


@contextmanager
def brokers(impl: BrokerImpl, root: Path, rocketmq_home: Path | None = None) -> Iterator[tuple[str, str]]:
    """A name server and the two brokers (addresses of a, b), the messages sent to each."""
    with Topology(root, impl=impl, brokers=0, rocketmq_home=rocketmq_home,
                  broker_conf={"mappedFileSizeCommitLog": 64 << 20}) as topo:
        a = topo.add_broker("broker-a", {"enablePropertyFilter": "true"})
        b = topo.add_broker("broker-b", {"enablePropertyFilter": "false"})
        for broker in (a, b):
            _send_all(broker.addr)
        time.sleep(SETTLE_S)
        try:
            yield a.addr, b.addr
        finally:
            topo.kill()


Answers = dict[str, tuple[int, str | None, list[str]]]


def run_script(addr_a: str, addr_b: str) -> Answers:
    """Every step's answer by name. A heartbeat and the pulls relying on it share one connection (the
    registration lasts as long as the connection)."""
    out: Answers = {}

    def one(addr: str, cmd: RemotingCommand) -> tuple[int, str | None, list[str]]:
        with RemotingClient.from_addr(addr, 10) as c:
            return _answer(c.invoke(cmd, timeout_s=10))

    for name, addr in (("A", addr_a), ("B", addr_b)):
        out[f"{name} check a TAG subscription"] = one(addr, check_request("A || B", "TAG"))
        out[f"{name} check a valid selector"] = one(addr, check_request("a > 4"))
        out[f"{name} check an unknown expression type"] = one(addr, check_request("a > 4", "FOO"))
        out[f"{name} check 'sql92' in lower case"] = one(addr, check_request("a > 4", "sql92"))
        out[f"{name} check without a subscription"] = one(addr, create_request(
            RequestCode.CHECK_CLIENT_CONFIG, {}, json.dumps({"clientId": "x", "group": GROUP}).encode()))
        for expr in MALFORMED:
            out[f"{name} check {expr!r}"] = one(addr, check_request(expr))
        out[f"{name} pull+sub a valid selector"] = one(addr, pull("a > 4"))
        out[f"{name} pull+sub a malformed selector"] = one(addr, pull("a >"))
        out[f"{name} pull+sub an unknown type"] = one(addr, pull("a > 4", "FOO"))
        out[f"{name} pull+sub an empty selector"] = one(addr, pull(""))
        for label, group, expr, etype in (("valid", GROUP + "V", "a > 4", "SQL92"),
                                          ("malformed", GROUP + "M", "a >", "SQL92"),
                                          ("unknown type", GROUP + "U", "a > 4", "FOO")):
            with RemotingClient.from_addr(addr, 10) as c:
                out[f"{name} heartbeat {label}"] = _answer(c.invoke(heartbeat(group, expr, etype)))
                for version in (1, 2):
                    out[f"{name} pull {label} v{version}"] = _answer(c.invoke(
                        pull("", etype, with_subscription=False, group=group, version=version)))
        out[f"{name} still serves a TAG pull"] = one(addr, pull("A || C", "TAG"))
    for expr in DELIVERY_EXPRESSIONS:
        out[f"A delivers {expr!r}"] = one(addr_a, pull(expr))
    return out


def _answer(resp: RemotingCommand) -> tuple[int, str | None, list[str]]:
    keys = [m.keys for m in decode_messages(resp.body)] if resp.code == 0 and resp.body else []
    return resp.code, resp.remark, keys


def answers(impl: BrokerImpl, root: Path, rocketmq_home: Path | None = None) -> Answers:
    with brokers(impl, root, rocketmq_home) as (a, b):
        return run_script(a, b)
