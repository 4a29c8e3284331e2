"""This module owns a consumer's subscription to one topic: the tag expression, its parsed form and the
client-side tag re-check (FilterAPI.buildSubscriptionData, SubscriptionData, PullAPIWrapper, 4.9.8), and
MessageSelector (client/.../consumer/MessageSelector.java): a TAG expression or an SQL92 one. Sans-IO.

A tag expression is ``*`` (everything) or tags joined by ``||`` (``"TagA || TagB"``); each tag is trimmed and
blanks are dropped. The broker filters by the tags' Java hash codes only (``codeSet``), so the client keeps a
pulled message only if its TAGS string is in ``tagsSet``; a message without tags is dropped then.

An SQL92 expression (``MessageSelector.by_sql("a > 5 AND TAGS = 'x'")``) is evaluated by the broker alone
(one with enablePropertyFilter=true) over the message's properties; the client keeps it as written, with no
tags and no codes, and re-checks nothing (FilterAPI.build).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Final

from reference_broker.common.java_hash import string_hash_code
from reference_broker.common.record import MessageExt

SUB_ALL: Final = "*"
EXPRESSION_TAG: Final = "TAG"  # ExpressionType.TAG
EXPRESSION_SQL92: Final = "SQL92"  # ExpressionType.SQL92


@dataclass(frozen=True, slots=True)
class MessageSelector:
    """MessageSelector: what a consumer subscribes with — ``by_tag("A || B")`` or ``by_sql("a > 5")``."""

    expression_type: str
    expression: str

    @classmethod
    def by_sql(cls, sql: str) -> MessageSelector:
        """Messages whose properties satisfy ``sql`` (RocketMQ's SQL92 subset; the broker needs
        enablePropertyFilter=true). TAGS and KEYS are properties too."""
        return cls(EXPRESSION_SQL92, sql)

    @classmethod
    def by_tag(cls, tag: str | None) -> MessageSelector:
        """Messages with one of the tags ("TagA || TagB"); None or "*" means all."""
        return cls(EXPRESSION_TAG, SUB_ALL if tag is None else tag)


@dataclass(slots=True)
class SubscriptionData:
    topic: str
    sub_string: str = SUB_ALL
    tags_set: frozenset[str] = frozenset()
    code_set: frozenset[int] = frozenset()
    # SubscriptionData.subVersion = System.currentTimeMillis() at creation; the broker keeps the newest.
    sub_version: int = field(default_factory=lambda: int(time.time() * 1000))
    expression_type: str = EXPRESSION_TAG
    class_filter_mode: bool = False
    # filterClassSource (@JSONField(serialize = false)): the uploaded filter's source, never in heartbeats
    filter_class_source: str | None = None
    filter_class_name: str = ""  # REGISTER_MESSAGE_FILTER_CLASS's className

    @property
    def matches_all(self) -> bool:
        return not self.tags_set

    def is_matched(self, msg: MessageExt) -> bool:
        """The client's re-check of a pulled message (PullAPIWrapper.processPullResult)."""
        if not self.tags_set or self.class_filter_mode:
            return True
        tags = msg.tags
        return tags is not None and tags in self.tags_set

    def filter(self, msgs: list[MessageExt]) -> list[MessageExt]:
        if not self.tags_set or self.class_filter_mode:
            return msgs
        tags_set = self.tags_set
        return [m for m in msgs if m.tags in tags_set]

    def to_json(self) -> dict[str, Any]:
        # SubscriptionData as fastjson writes it inside HeartbeatData (sets as arrays; sorted for stable output).
        return {
            "classFilterMode": self.class_filter_mode,
            "codeSet": sorted(self.code_set),
            "expressionType": self.expression_type,
            "subString": self.sub_string,
            "subVersion": self.sub_version,
            "tagsSet": sorted(self.tags_set),
            "topic": self.topic,
        }


def build_subscription_data(topic: str, sub_string: str | None) -> SubscriptionData:
    """FilterAPI.buildSubscriptionData for the TAG expression type."""
    if sub_string is None or sub_string.strip() in ("", SUB_ALL):
        return SubscriptionData(topic, SUB_ALL)
    tags = [t.strip() for t in sub_string.split("||")]
    tags = [t for t in tags if t]
    return SubscriptionData(
        topic=topic,
        sub_string=sub_string,
        tags_set=frozenset(tags),
        code_set=frozenset(string_hash_code(t) for t in tags),
    )


def build_class_filter_subscription(topic: str, source: str, class_name: str) -> SubscriptionData:
    """DefaultMQPushConsumerImpl.subscribe(topic, fullClassName, filterClassSource) (4.2.0): classFilterMode
    true and the source kept for the upload to filter servers. 4.2.0 also put the class name in subString;
    here subString stays ``*`` (what the broker itself serves a class-filter subscription) and the name goes
    only into the upload's header."""
    if not source.strip():
        raise ValueError("the filter source is empty")
    return SubscriptionData(topic, SUB_ALL, class_filter_mode=True, filter_class_source=source,
                            filter_class_name=class_name)


def build_subscription(topic: str, selector: str | MessageSelector | None) -> SubscriptionData:
    """A subscription from a tag expression or a MessageSelector (FilterAPI.build, 4.9.8): a non-TAG
    expression is kept as written; ValueError when it is empty (FilterAPI's IllegalArgumentException)."""
    if selector is None or isinstance(selector, str):
        return build_subscription_data(topic, selector)
    if selector.expression_type == EXPRESSION_TAG:
        return build_subscription_data(topic, selector.expression)
    if not selector.expression:
        raise ValueError(f"Expression can't be null! {selector.expression_type}")
    return SubscriptionData(topic, selector.expression, expression_type=selector.expression_type)
