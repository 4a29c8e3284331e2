"""Apache RocketMQ's C++ client (PyPI ``rocketmq`` 0.4.x) consumes from the reference broker: a push consumer
concurrently and orderly with tag expressions, failed consumption through %RETRY%group to %DLQ%group, broadcast,
and the pull consumer with its offsets. Each test checks the deliveries against what the broker stored and the
broker's side (consumer offsets, retry and DLQ topics) through the admin functions; each runs against the
reference broker and (slow) Apache RocketMQ 4.9.8.

Not exposed by the 0.4.x binding, so not tested here: the consumer's maxReconsumeTimes (the group's retryMaxTimes
on the broker decides, set with admin updateSubGroup), consumeFromWhere (the C++ default, CONSUME_FROM_LAST_OFFSET),
SQL92 selectors, committing a pull consumer's offsets to the broker (its offset table lives in the process), and
pull by queue or from a given offset (``pull`` walks every queue of the topic from the table's offset).
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from typing import Any

import pytest

from reference_broker.tools import admin
from tests.interop.conftest import Broker, Cpp
from tests.interop.helpers import create_topic, stored, wait_stored

pytestmark = pytest.mark.e2e

# Consumers whose committed offsets a test reads keep running this long after their last delivery: the C++
# client persists offsets every 5 s, and the oneway updates it sends at shutdown can be lost with the
# connection it closes at once (seen against 4.9.8: one queue's offset never arrived).
PERSIST_S = 6


def _produce(broker: Broker, cpp: Cpp, ops: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Send ``ops`` and return what the broker stored for them, by key."""
    results = cpp("produce", {"ns": broker.ns, "group": "CPP_PG", "ops": ops})
    # Setup, not what is tested: on a loaded machine the C++ client's first route lookup can time out and it
    # fails the sends with "No route info" though the name server routes the topic; such sends go again once.
    again = [i for i, r in enumerate(results) if "No route info" in str(r.get("error", ""))]
    if again:
        time.sleep(1.0)
        for i, r in zip(again, cpp("produce", {"ns": broker.ns, "group": "CPP_PG", "ops": [ops[i] for i in again]}),
                        strict=True):
            results[i] = r
    assert [r.get("status") for r in results] == ["OK"] * len(ops), results
    topic = ops[0]["topic"]
    return {m["keys"]: m for m in wait_stored(broker.ns, topic, len(ops))}


def _committed(broker: Broker, group: str, topic: str) -> tuple[dict[int, int], dict[int, int]]:
    """(queueId → the group's committed offset, -1: none; queueId → the broker's max offset)."""
    rows = admin.consumer_progress(broker.ns, group, topic)
    return {r["queueId"]: r["consumerOffset"] for r in rows}, {r["queueId"]: r["brokerOffset"] for r in rows}


def _same_place(got: list[dict[str, Any]], msgs: dict[str, dict[str, Any]]) -> bool:
    return all((d["queueId"], d["queueOffset"], d["msgId"]) ==
               (msgs[d["key"]]["queueId"], msgs[d["key"]]["queueOffset"], msgs[d["key"]]["properties"]["UNIQ_KEY"])
               for d in got)


def test_a_push_consumer_gets_what_its_tag_expression_selects(broker: Broker, cpp: Cpp) -> None:
    topic, group = "CppPushTags", "CPP_TAGS"
    create_topic(broker.ns, broker.addr, topic, 4)
    tags = ["TagA", "TagB", "TagC"]
    msgs = _produce(broker, cpp, [{"how": "sync", "topic": topic, "key": f"k{i}", "tags": tags[i % 3]}
                                  for i in range(12)])
    *got, summary = cpp("push", {"ns": broker.ns, "group": group, "topic": topic, "expression": "TagA || TagC",
                                 "expect": 8, "timeout": 40, "settle": PERSIST_S})
    assert summary == {"done": True, "received": 8}
    assert sorted(d["key"] for d in got) == sorted(f"k{i}" for i in range(12) if i % 3 != 1)
    assert all(d["topic"] == topic and d["body"] == f"body-{d['key']}" and d["tags"] in ("TagA", "TagC")
               and d["reconsumeTimes"] == 0 for d in got)
    assert _same_place(got, msgs)
    # the shutdown committed each queue's offset past its last delivered message. Not past trailing TagB ones:
    # the broker answers their pull NO_MATCHED_MSG with the next offset, which this client does not commit
    # (4.9.8 the same: the offset is the client's to send)
    committed, _ends = _committed(broker, group, topic)
    last: dict[int, int] = {}
    for d in got:
        last[d["queueId"]] = max(last.get(d["queueId"], -1), d["queueOffset"])
    assert committed == {q: last[q] + 1 for q in committed}


def test_an_orderly_push_consumer_gets_each_queue_in_order(broker: Broker, cpp: Cpp) -> None:
    topic, group = "CppOrderly", "CPP_ORDERLY"
    create_topic(broker.ns, broker.addr, topic, 4)
    # five orders of four steps, each order on one queue (hashing_queue_selector: order id % 4)
    ops: list[dict[str, Any]] = [
        {"how": "orderly", "topic": topic, "key": f"o{order}-{step}", "arg": order, "tags": f"Step{step}"}
        for step in range(4) for order in range(5)]
    msgs = _produce(broker, cpp, ops)
    assert all(msgs[op["key"]]["queueId"] == op["arg"] % 4 for op in ops)
    *got, summary = cpp("push", {"ns": broker.ns, "group": group, "topic": topic, "orderly": True,
                                 "expression": "Step0 || Step1 || Step2 || Step3", "expect": 20, "timeout": 40,
                                 "settle": PERSIST_S})
    assert summary == {"done": True, "received": 20}
    assert sorted(d["key"] for d in got) == sorted(op["key"] for op in ops)
    assert _same_place(got, msgs)
    by_queue: dict[int, list[int]] = defaultdict(list)
    by_order: dict[str, list[int]] = defaultdict(list)
    for d in got:
        by_queue[d["queueId"]].append(d["queueOffset"])
        order, step = d["key"].split("-")
        by_order[order].append(int(step))
    assert all(offsets == sorted(offsets) for offsets in by_queue.values())
    assert all(steps == [0, 1, 2, 3] for steps in by_order.values())
    committed, ends = _committed(broker, group, topic)
    assert committed == ends


def test_failed_consumption_goes_through_the_retry_topic_to_the_dlq(broker: Broker, cpp: Cpp) -> None:
    topic, group = "CppRetry", "CPP_RETRY"
    create_topic(broker.ns, broker.addr, topic, 1)
    # maxReconsumeTimes: the C++ client sends none, so the group's retryMaxTimes decides (4.9.8's
    # asyncConsumerSendMsgBack)
    admin.update_subscription_group(broker.ns, group, retry_max_times=2, broker_addr=broker.addr)
    (original,) = _produce(broker, cpp, [{"how": "sync", "topic": topic, "key": "poison", "tags": "TagF"}]).values()
    *got, summary = cpp("push", {"ns": broker.ns, "group": group, "topic": topic, "expression": "TagF",
                                 "fail": "always", "expect": 3, "timeout": 60, "settle": 3})
    # the first delivery and two retries (each RECONSUME_LATER sent it back: CONSUMER_SEND_MSG_BACK), then none
    assert summary == {"done": True, "received": 3}
    assert [(d["key"], d["reconsumeTimes"]) for d in got] == [("poison", 0), ("poison", 1), ("poison", 2)]
    # the client shows a retried message under its original topic (RETRY_TOPIC), its id unchanged
    assert all(d["topic"] == topic and d["msgId"] == original["msgId"] for d in got)
    assert [d["props"].get("RETRY_TOPIC") for d in got] == [None, topic, topic]
    retried = stored(broker.ns, f"%RETRY%{group}")
    assert [(m["reconsumeTimes"], m["properties"]["RETRY_TOPIC"]) for m in retried] == [(1, topic), (2, topic)]
    (dead,) = wait_stored(broker.ns, f"%DLQ%{group}", 1)
    assert (dead["body"], dead["keys"], dead["tags"]) == ("body-poison", "poison", "TagF")
    assert dead["reconsumeTimes"] == 3 and dead["properties"]["RETRY_TOPIC"] == topic
    assert dead["properties"]["UNIQ_KEY"] == original["msgId"]
    # no originMsgId from this client: 4.9.8 falls back to the stored message's offset id
    assert dead["properties"]["ORIGIN_MESSAGE_ID"] == original["offsetMsgId"]


def test_broadcast_consumers_each_get_every_message(broker: Broker, cpp: Cpp) -> None:
    topic, group = "CppBroadcast", "CPP_BROADCAST"
    create_topic(broker.ns, broker.addr, topic, 4)
    spec = {"ns": broker.ns, "group": group, "topic": topic, "broadcast": True, "expect": 8, "timeout": 40,
            "settle": 2}
    # One after the other: both write their offsets under the same $HOME/.rocketmq_offsets/<client id>/<group>,
    # and the C++ client's start fails when another process creates that directory at the same moment
    # ("create offset store dir fail", OffsetStore.cpp).
    consumers = []
    for _ in range(2):
        consumers.append(cpp.start("push", spec))
        consumers[-1].wait_started()
    # A new broadcast consumer starts at each queue's end (CONSUME_FROM_LAST_OFFSET, no local offset yet): give
    # both their first rebalance before sending.
    time.sleep(3)
    msgs = _produce(broker, cpp, [{"how": "sync", "topic": topic, "key": f"b{i}"} for i in range(8)])
    for c in consumers:
        *got, summary = c.result(60)
        assert summary == {"done": True, "received": 8}
        assert sorted(d["key"] for d in got) == sorted(msgs)
        assert _same_place(got, msgs)
    # broadcast offsets live with each consumer (a local file under its HOME), not on the broker
    assert admin.consumer_progress(broker.ns, group) == []  # the broker holds no offset of the group
    # $HOME/.rocketmq_offsets/<ip>@<instance>/<group>/offsets.Json: a boost archive, each queue's JSON then
    # its offset
    (local,) = cpp.home.glob(f".rocketmq_offsets/*/{group}/offsets.Json")
    saved = {int(q): int(o) for q, o in re.findall(r'"queueId" : (\d+),[^}]*}\s*(\d+)', local.read_text())}
    assert saved == {r["queueId"]: r["maxOffset"] for r in admin.topic_status(broker.ns, topic)}


def test_the_pull_consumer_reads_every_queue_and_keeps_its_offsets(broker: Broker, cpp: Cpp) -> None:
    topic = "CppPull"
    create_topic(broker.ns, broker.addr, topic, 4)
    msgs = _produce(broker, cpp, [{"how": "sync", "topic": topic, "key": f"p{i}", "tags": "TagA" if i % 2 else "TagB"}
                                  for i in range(10)])
    ends = {r["queueId"]: r["maxOffset"] for r in admin.topic_status(broker.ns, topic)}
    *got, summary = cpp("pull", {"ns": broker.ns, "group": "CPP_PULL", "topic": topic, "max_num": 3})
    assert sorted(d["key"] for d in got) == sorted(msgs)
    assert _same_place(got, msgs)
    # the binding's offset table: each queue's nextBeginOffset, the broker's end of it
    assert summary == {"done": True, "offsets": {f"{topic}@{q}": end for q, end in ends.items()}}
    *tagged, summary = cpp("pull", {"ns": broker.ns, "group": "CPP_PULL", "topic": topic, "expression": "TagA"})
    assert sorted(d["key"] for d in tagged) == sorted(k for k in msgs if int(k[1:]) % 2)
    assert summary["offsets"] == {f"{topic}@{q}": end for q, end in ends.items()}
