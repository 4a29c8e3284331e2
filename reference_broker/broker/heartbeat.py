"""HeartbeatData as the broker reads it (common/.../protocol/heartbeat/HeartbeatData.java, ConsumerData.java,
ProducerData.java, 4.9.8), and the bounds on what one HEART_BEAT may register. Sans-IO: JSON in, data out.

HEART_BEAT body::

    {"clientID": "...",
     "consumerDataSet": [{"groupName": "G", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
                          "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": false,
                          "subscriptionDataSet": [{"topic": "T", "subString": "*", "subVersion": 0, ...}]}],
     "producerDataSet": [{"groupName": "P"}]}

Bounds (our own; RocketMQ 4.9.8 bounds none of these, ClientManageProcessor.heartBeat registers whatever the
set holds): a heartbeat is refused whole, before anything is registered or created, when it carries more than
``max_consumers`` consumer entries, ``max_producers`` producer entries, or a consumer entry with more than
``max_subscriptions_per_consumer`` subscriptions. A real client sends one entry per group it runs, so the
bounds are far above any real client, and keep one request from creating an unbounded number of subscription
groups and retry topics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from reference_broker.broker.client_manager import SubscriptionData
from reference_broker.common.names import validate_group, validate_topic
from reference_broker.remoting.headers import BadRequest

MAX_CONSUMER_DATA_PER_HEARTBEAT: Final = 1000
MAX_PRODUCER_DATA_PER_HEARTBEAT: Final = 1000
MAX_SUBSCRIPTIONS_PER_CONSUMER: Final = 1000


@dataclass(frozen=True)
class HeartbeatLimits:
    max_consumers: int = MAX_CONSUMER_DATA_PER_HEARTBEAT
    max_producers: int = MAX_PRODUCER_DATA_PER_HEARTBEAT
    max_subscriptions_per_consumer: int = MAX_SUBSCRIPTIONS_PER_CONSUMER


class HeartbeatTooLarge(BadRequest):
    """The heartbeat exceeds a bound; the message is the SYSTEM_ERROR remark."""


@dataclass(frozen=True)
class ConsumerData:
    group: str
    consume_type: str
    message_model: str
    consume_from_where: str
    subscriptions: list[SubscriptionData]


@dataclass(frozen=True)
class HeartbeatData:
    client_id: str
    consumers: list[ConsumerData]
    producer_groups: list[str]


def _entries(obj: dict[str, Any], key: str) -> list[Any]:
    value = obj.get(key) or []
    if not isinstance(value, list):
        raise BadRequest(f"{key} must be a list")
    return value


def _check_bounds(consumers: list[Any], producers: list[Any], limits: HeartbeatLimits) -> None:
    if len(consumers) > limits.max_consumers:
        raise HeartbeatTooLarge(f"heartbeat carries {len(consumers)} consumer groups; this broker accepts at most "
                                f"{limits.max_consumers} per heartbeat")
    if len(producers) > limits.max_producers:
        raise HeartbeatTooLarge(f"heartbeat carries {len(producers)} producer groups; this broker accepts at most "
                                f"{limits.max_producers} per heartbeat")
    for c in consumers:
        subs = c.get("subscriptionDataSet") if isinstance(c, dict) else None
        if isinstance(subs, list) and len(subs) > limits.max_subscriptions_per_consumer:
            raise HeartbeatTooLarge(f"consumer group {c.get('groupName')!r} carries {len(subs)} subscriptions; "
                                    f"this broker accepts at most {limits.max_subscriptions_per_consumer}")


def _group_name(obj: Any, where: str) -> str:
    """The entry's groupName, checked as the client checks it (Validators.checkGroup): a consumer group
    becomes a subscription group, a %RETRY% topic and a directory (common/names.py). 4.9.8 checks none."""
    if not isinstance(obj, dict) or not isinstance(obj.get("groupName"), str):
        raise BadRequest(f"each {where} entry needs a string groupName")
    group = obj["groupName"]
    problem = validate_group(group)
    if problem is not None:
        raise BadRequest(problem)
    return str(group)


def _consumer(obj: Any) -> ConsumerData:
    group = _group_name(obj, "consumerDataSet")
    subs = obj.get("subscriptionDataSet") or []
    if not isinstance(subs, list):
        raise BadRequest("subscriptionDataSet must be a list")
    subscriptions = [SubscriptionData.from_json(s) for s in subs]
    for sub in subscriptions:
        problem = validate_topic(sub.topic)
        if problem is not None:
            raise BadRequest(problem)
    return ConsumerData(group, str(obj.get("consumeType") or "CONSUME_PASSIVELY"),
                        str(obj.get("messageModel") or "CLUSTERING"),
                        str(obj.get("consumeFromWhere") or "CONSUME_FROM_LAST_OFFSET"), subscriptions)


def _producer_group(obj: Any) -> str:
    return _group_name(obj, "producerDataSet")


def parse_heartbeat(obj: dict[str, Any], limits: HeartbeatLimits | None = None) -> HeartbeatData:
    """The whole heartbeat, checked against ``limits`` first; BadRequest (HeartbeatTooLarge for a bound)
    on anything wrong, so a bad entry anywhere registers nothing."""
    client_id = str(obj.get("clientID") or "")
    if not client_id:
        raise BadRequest("heartbeat without clientID")
    consumers = _entries(obj, "consumerDataSet")
    producers = _entries(obj, "producerDataSet")
    _check_bounds(consumers, producers, limits or HeartbeatLimits())
    return HeartbeatData(client_id, [_consumer(c) for c in consumers], [_producer_group(p) for p in producers])
