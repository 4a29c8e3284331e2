"""HEART_BEAT with many groups: the bounds (refused whole, nothing created), the parse, and serving a large
heartbeat in slices so other work on the loop goes on."""

from __future__ import annotations

import asyncio
import json

import pytest

from reference_broker.broker.heartbeat import (
    MAX_CONSUMER_DATA_PER_HEARTBEAT,
    HeartbeatLimits,
    HeartbeatTooLarge,
    parse_heartbeat,
)
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import create_request, json_dumps
from reference_broker.remoting.headers import BadRequest
from tests.broker.broker_helpers import FakeConn
from tests.broker.heartbeat_load import many_groups_heartbeat
from tests.broker.test_processors import answer, broker, call  # noqa: F401 - the processor-test fixture


def _consumer(group, topics=("T",)):
    return {"groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
            "subscriptionDataSet": [{"topic": t, "subString": "a || b"} for t in topics]}


def test_parse_reads_consumers_and_producers():
    hb = parse_heartbeat({"clientID": "c", "consumerDataSet": [_consumer("G", ("T", "U"))],
                          "producerDataSet": [{"groupName": "P"}]})
    assert hb.client_id == "c" and hb.producer_groups == ["P"]
    (c,) = hb.consumers
    assert c.group == "G" and [s.topic for s in c.subscriptions] == ["T", "U"]
    assert c.subscriptions[0].tags_set == ["a", "b"]


@pytest.mark.parametrize("body", [
    {"clientID": "c", "consumerDataSet": [_consumer(f"G{i}") for i in range(4)]},
    {"clientID": "c", "producerDataSet": [{"groupName": f"P{i}"} for i in range(4)]},
    {"clientID": "c", "consumerDataSet": [_consumer("G", [f"T{i}" for i in range(4)])]},
])
def test_bounds(body):
    limits = HeartbeatLimits(max_consumers=3, max_producers=3, max_subscriptions_per_consumer=3)
    with pytest.raises(HeartbeatTooLarge, match="at most 3"):
        parse_heartbeat(body, limits)
    trimmed = {k: (v[:3] if isinstance(v, list) else v) for k, v in body.items()}
    if "consumerDataSet" in trimmed:
        trimmed["consumerDataSet"] = [{**c, "subscriptionDataSet": c["subscriptionDataSet"][:3]}
                                      for c in trimmed["consumerDataSet"]]
    parse_heartbeat(trimmed, limits)  # at the bound: accepted


@pytest.mark.parametrize("body", [
    {"consumerDataSet": []},
    {"clientID": "c", "consumerDataSet": {"groupName": "G"}},
    {"clientID": "c", "consumerDataSet": [_consumer("G"), {"groupName": 5}]},
    {"clientID": "c", "producerDataSet": [{}]},
])
def test_malformed_is_a_bad_request(body):
    with pytest.raises(BadRequest):
        parse_heartbeat(body)


def test_over_the_bound_is_refused_and_creates_nothing(broker):  # noqa: F811
    n = MAX_CONSUMER_DATA_PER_HEARTBEAT + 1
    sgm, tcm = broker.subscription_group_manager, broker.topic_config_manager
    groups_before, topics_before = set(sgm.subscription_group_table), set(tcm.topic_config_table)
    r = call(broker, broker.client_processor, many_groups_heartbeat("c", [f"X{i}" for i in range(n)]))
    assert r.code == ResponseCode.SYSTEM_ERROR
    assert f"{n} consumer groups" in r.remark and f"at most {MAX_CONSUMER_DATA_PER_HEARTBEAT}" in r.remark
    assert set(sgm.subscription_group_table) == groups_before and set(tcm.topic_config_table) == topics_before
    assert not broker.consumer_manager.table
    # a bad entry at the end also registers nothing of the entries before it
    body = json.loads(many_groups_heartbeat("c", ["Y0", "Y1"]).body)
    body["consumerDataSet"].append({"groupName": ""})
    r = call(broker, broker.client_processor, create_request(RequestCode.HEART_BEAT, {}, json_dumps(body)))
    assert r.code == ResponseCode.SYSTEM_ERROR and "Y0" not in sgm.subscription_group_table


def test_a_large_heartbeat_lets_the_loop_run_and_answers_once_on_disk(broker):  # noqa: F811
    n = MAX_CONSUMER_DATA_PER_HEARTBEAT
    conn = FakeConn()

    async def scenario():
        ticks = 0
        stop = asyncio.Event()

        async def ticker():
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0)

        t = asyncio.ensure_future(ticker())
        r = await answer(broker.client_processor, conn, many_groups_heartbeat("c", [f"G{i}" for i in range(n)]))
        stop.set()
        await t
        return r, ticks

    r, ticks = broker.run(scenario)
    assert r.code == ResponseCode.SUCCESS
    assert ticks >= 10, "the heartbeat gave the loop back between slices"
    assert all(f"G{i}" in broker.consumer_manager.table for i in range(n))
    # answered only once both files hold every new group and retry topic
    root = broker.message_store_config.store_path_root_dir / "config"
    groups = json.loads((root / "subscriptionGroup.json").read_text())["subscriptionGroupTable"]
    topics = json.loads((root / "topics.json").read_text())["topicConfigTable"]
    assert all(f"G{i}" in groups and f"%RETRY%G{i}" in topics for i in range(n))
    broker.run(asyncio.sleep, 0.05)
    notified = {c.ext_fields["consumerGroup"] for c in conn.sent if c.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED}
    assert len(notified) == n  # ConsumerManager.registerConsumer: each new group's members are told


def test_a_connection_closed_mid_heartbeat_is_not_registered_again(broker):  # noqa: F811
    conn = FakeConn()

    async def scenario():
        pending = broker.client_processor.handle(conn, many_groups_heartbeat("c", [f"G{i}" for i in range(500)]))
        assert asyncio.iscoroutine(pending)
        task = asyncio.ensure_future(pending)
        await asyncio.sleep(0)  # the first slice ran
        conn.closed = True
        broker.client_processor.on_channel_close(conn)
        return await task

    r = broker.run(scenario)
    assert r.code == ResponseCode.SYSTEM_ERROR
    assert not broker.consumer_manager.table
