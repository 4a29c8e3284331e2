"""TopicConfig and TopicConfigManager (RocketMQ 4.9.8).

Sources: common/.../TopicConfig.java, broker/.../topic/TopicConfigManager.java. The reserved topic names
(TopicValidator, MixAll) are in common/topic_names.py, the permission bits (PermName) in common/perm.py and the
rules for names from outside in common/names.py: the clients and the name server share them.

``{storePathRootDir}/config/topics.json`` (fastjson shape, keys as the Java getters)::

    {"topicConfigTable": {"T": {"order": false, "perm": 6, "readQueueNums": 16,
                                "topicFilterType": "SINGLE_TAG", "topicName": "T",
                                "topicSysFlag": 0, "writeQueueNums": 16}, ...},
     "dataVersion": {"timestamp": 1700000000000, "counter": 3}}
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reference_broker.broker.broker_config import BrokerConfig
from reference_broker.broker.config_manager import ConfigManager, dump_json
from reference_broker.common import names, topic_names
from reference_broker.common.perm import PERM_INHERIT, PERM_READ, PERM_WRITE, is_inherited, perm_to_string
from reference_broker.common.topic_names import (
    REPLY_TOPIC_POSTFIX,
    RMQ_SYS_BENCHMARK_TOPIC,
    RMQ_SYS_OFFSET_MOVED_EVENT,
    RMQ_SYS_SCHEDULE_TOPIC,
    RMQ_SYS_SELF_TEST_TOPIC,
    SYSTEM_TOPIC_PREFIX,
    SYSTEM_TOPICS,
)

log = logging.getLogger(__name__)

DLQ_NUMS_PER_GROUP = 1  # AbstractSendMessageProcessor.DLQ_NUMS_PER_GROUP
SCHEDULE_TOPIC_QUEUE_NUM = 18  # ScheduleMessageService max delay level
TOPIC_FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")

# The send processor reads these as ``topic_config.<name>`` (defined in common/topic_names.py).
AUTO_CREATE_TOPIC_KEY_TOPIC = topic_names.AUTO_CREATE_TOPIC_KEY_TOPIC
is_not_allowed_send_topic = topic_names.is_not_allowed_send_topic
retry_topic = topic_names.retry_topic
dlq_topic = topic_names.dlq_topic


def validate_topic(topic: str, for_creation: bool = False) -> str | None:
    """TopicValidator.validateTopic: None when valid, else RocketMQ's remark text.

    ``for_creation`` adds the client-side rule (Validators.checkTopic) that a user topic may
    not be the auto-create key topic TBW102."""
    problem = names.validate_topic(topic)
    if problem is None and for_creation and topic == AUTO_CREATE_TOPIC_KEY_TOPIC:
        return f"The topic[{topic}] is conflict with AUTO_CREATE_TOPIC_KEY_TOPIC."
    return problem


@dataclass
class TopicConfig:
    topic_name: str
    read_queue_nums: int = 16  # TopicConfig.defaultReadQueueNums
    write_queue_nums: int = 16  # TopicConfig.defaultWriteQueueNums
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    def __str__(self) -> str:
        """TopicConfig.toString (4.9.8), as remarks quote it: "request queueId[99] is illegal, TopicConfig [...]"."""
        return (f"TopicConfig [topicName={self.topic_name}, readQueueNums={self.read_queue_nums}, "
                f"writeQueueNums={self.write_queue_nums}, perm={perm_to_string(self.perm)}, "
                f"topicFilterType={self.topic_filter_type}, topicSysFlag={self.topic_sys_flag}, "
                f"order={'true' if self.order else 'false'}]")

    def to_json(self) -> dict[str, Any]:
        return {
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": self.topic_filter_type,
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json(cls, obj: Any) -> TopicConfig:
        if not isinstance(obj, dict):
            raise ValueError(f"topic config must be an object, got {type(obj).__name__}")
        name = obj.get("topicName")
        if not isinstance(name, str):
            raise ValueError("topic config without a string topicName")
        tc = cls(name)
        for key, attr, typ in (
            ("readQueueNums", "read_queue_nums", int),
            ("writeQueueNums", "write_queue_nums", int),
            ("perm", "perm", int),
            ("topicSysFlag", "topic_sys_flag", int),
            ("order", "order", bool),
            ("topicFilterType", "topic_filter_type", str),
        ):
            if key in obj:
                v = obj[key]
                if not isinstance(v, typ) or (typ is int and isinstance(v, bool)):
                    raise ValueError(f"topic {name}: {key} must be {typ.__name__}, got {v!r}")
                setattr(tc, attr, v)
        if tc.topic_filter_type not in TOPIC_FILTER_TYPES:
            raise ValueError(f"topic {name}: bad topicFilterType {tc.topic_filter_type!r}")
        return tc


@dataclass
class DataVersion:
    """common/.../DataVersion.java: bumped on every table change; the namesrv compares it."""

    timestamp: int = 0
    counter: int = 0

    def __post_init__(self) -> None:
        if self.timestamp == 0:
            self.timestamp = int(time.time() * 1000)

    def next_version(self) -> None:
        self.timestamp = int(time.time() * 1000)
        self.counter += 1

    def to_json(self) -> dict[str, int]:
        return {"counter": self.counter, "timestamp": self.timestamp}

    @classmethod
    def from_json(cls, obj: Any) -> DataVersion:
        if not isinstance(obj, dict):
            raise ValueError("dataVersion must be an object")
        ts, counter = obj.get("timestamp", 0), obj.get("counter", 0)
        if not isinstance(ts, int) or not isinstance(counter, int):
            raise ValueError("dataVersion timestamp/counter must be integers")
        return cls(ts, counter)


class TopicConfigManager(ConfigManager):
    """The broker's topic table, seeded with the 4.9.8 system topics, persisted to topics.json."""

    def __init__(self, store_root: Path | str, broker_config: BrokerConfig | None = None) -> None:
        super().__init__()
        self.store_root = Path(store_root)
        self.broker_config = broker_config if broker_config is not None else BrokerConfig()
        self.topic_config_table: dict[str, TopicConfig] = {}
        self.on_change: Callable[[], None] | None = None
        self.data_version = DataVersion()
        self.system_topics: set[str] = set(SYSTEM_TOPICS)
        self._init_system_topics()

    def _put_system(self, tc: TopicConfig) -> None:
        self.system_topics.add(tc.topic_name)
        self.topic_config_table[tc.topic_name] = tc

    def _init_system_topics(self) -> None:
        bc = self.broker_config
        self._put_system(TopicConfig(RMQ_SYS_SELF_TEST_TOPIC, 1, 1))
        if bc.auto_create_topic_enable:
            n = bc.default_topic_queue_nums
            self._put_system(TopicConfig(AUTO_CREATE_TOPIC_KEY_TOPIC, n, n, PERM_INHERIT | PERM_READ | PERM_WRITE))
        self._put_system(TopicConfig(RMQ_SYS_BENCHMARK_TOPIC, 1024, 1024))
        cluster_perm = PERM_INHERIT | (PERM_READ | PERM_WRITE if bc.cluster_topic_enable else 0)
        self._put_system(TopicConfig(bc.broker_cluster_name, perm=cluster_perm))
        broker_perm = PERM_INHERIT | (PERM_READ | PERM_WRITE if bc.broker_topic_enable else 0)
        self._put_system(TopicConfig(bc.broker_name, 1, 1, broker_perm))
        self._put_system(TopicConfig(RMQ_SYS_OFFSET_MOVED_EVENT, 1, 1))
        self._put_system(TopicConfig(RMQ_SYS_SCHEDULE_TOPIC, SCHEDULE_TOPIC_QUEUE_NUM, SCHEDULE_TOPIC_QUEUE_NUM))
        if bc.trace_topic_enable:
            self._put_system(TopicConfig(bc.msg_trace_topic_name, 1, 1))
        self._put_system(TopicConfig(f"{bc.broker_cluster_name}_{REPLY_TOPIC_POSTFIX}", 1, 1))

    # ---------------------------------------------------------------- ConfigManager
    def config_file_path(self) -> Path:
        return self.store_root / "config" / "topics.json"

    def encode(self, pretty: bool = False) -> str:
        return dump_json(
            {
                "dataVersion": self.data_version.to_json(),
                # a copy: the writer thread encodes while the loop may add topics (see config_manager.py)
                "topicConfigTable": {k: v.to_json() for k, v in dict(self.topic_config_table).items()},
            },
            pretty,
        )

    def decode(self, text: str) -> None:
        obj = json.loads(text)
        if obj is None:
            return
        if not isinstance(obj, dict):
            raise ValueError("topics.json must hold a JSON object")
        table = obj.get("topicConfigTable", {})
        if not isinstance(table, dict):
            raise ValueError("topicConfigTable must be an object")
        loaded = {name: TopicConfig.from_json(tc) for name, tc in table.items()}
        version = DataVersion.from_json(obj["dataVersion"]) if "dataVersion" in obj else None
        # Loaded entries overlay the seeded system topics (TopicConfigManager.decode: putAll).
        self.topic_config_table.update(loaded)
        if version is not None:
            self.data_version = version

    # ---------------------------------------------------------------- queries
    def select_topic_config(self, topic: str) -> TopicConfig | None:
        return self.topic_config_table.get(topic)

    def is_system_topic(self, topic: str) -> bool:
        return topic in self.system_topics or topic.startswith(SYSTEM_TOPIC_PREFIX)

    def is_order_topic(self, topic: str) -> bool:
        tc = self.topic_config_table.get(topic)
        return tc is not None and tc.order

    # ---------------------------------------------------------------- changes
    def replace_all(self, table: dict[str, TopicConfig], version: DataVersion) -> None:
        """A slave takes its master's table and data version (SlaveSynchronize.syncTopicConfig: clear, putAll,
        assignNewOne, persist); no re-registration — the name server routes by the master's table."""
        self.topic_config_table.clear()
        self.topic_config_table.update(table)
        self.data_version = DataVersion(version.timestamp, version.counter)
        self.persist_soon()

    def _changed(self) -> None:
        self.data_version.next_version()
        self.persist_soon()  # off the loop, coalesced (TopicConfigManager persists inline; see config_persister.py)
        if self.on_change is not None:  # the broker re-registers with the name servers (registerBrokerAll)
            self.on_change()

    def update_topic_config(self, tc: TopicConfig) -> None:
        old = self.topic_config_table.get(tc.topic_name)
        log.info("%s topic config, old: %s new: %s", "update" if old else "create new", old, tc)
        self.topic_config_table[tc.topic_name] = tc
        self._changed()

    def delete_topic_config(self, topic: str) -> TopicConfig | None:
        old = self.topic_config_table.pop(topic, None)
        if old is not None:
            log.info("delete topic config OK, topic: %s", old)
            self._changed()
        else:
            log.warning("delete topic config failed, topic: %s not exists", topic)
        return old

    def update_order_topic_config(self, order_topics: set[str]) -> None:
        """updateOrderTopicConfig: the namesrv's ORDER_TOPIC_CONFIG list decides each topic's flag."""
        changed = False
        for name, tc in self.topic_config_table.items():
            want = name in order_topics
            if tc.order != want:
                tc.order = want
                changed = True
        if changed:
            self._changed()

    def create_topic_in_send_message_method(
        self,
        topic: str,
        default_topic: str,
        remote_address: str,
        client_default_topic_queue_nums: int,
        topic_sys_flag: int,
    ) -> TopicConfig | None:
        """Auto-create ``topic`` from ``default_topic`` (TBW102) on a send to an unknown topic."""
        existing = self.topic_config_table.get(topic)
        if existing is not None:
            return existing
        default_tc = self.topic_config_table.get(default_topic)
        if default_tc is None:
            log.warning(
                "Create new topic failed, because the default topic[%s] not exist. producer:[%s]",
                default_topic,
                remote_address,
            )
            return None
        if default_topic == AUTO_CREATE_TOPIC_KEY_TOPIC and not self.broker_config.auto_create_topic_enable:
            # A TBW102 left in topics.json from an earlier run no longer grants inheritance.
            default_tc.perm = PERM_READ | PERM_WRITE
        if not is_inherited(default_tc.perm):
            log.warning(
                "Create new topic failed, because the default topic[%s] has no perm [%d] producer:[%s]",
                default_topic,
                default_tc.perm,
                remote_address,
            )
            return None
        queue_nums = max(0, min(client_default_topic_queue_nums, default_tc.write_queue_nums))
        tc = TopicConfig(
            topic,
            queue_nums,
            queue_nums,
            default_tc.perm & ~PERM_INHERIT,
            default_tc.topic_filter_type,
            topic_sys_flag,
        )
        log.info("Create new topic by default topic:[%s] config:[%s] producer:[%s]", default_topic, tc, remote_address)
        self.topic_config_table[topic] = tc
        self._changed()
        return tc

    def create_topic_in_send_message_back_method(
        self, topic: str, client_default_topic_queue_nums: int, perm: int, topic_sys_flag: int
    ) -> TopicConfig:
        """Create a retry/DLQ/system topic with explicit queue count and perm if absent."""
        existing = self.topic_config_table.get(topic)
        if existing is not None:
            return existing
        tc = TopicConfig(topic, client_default_topic_queue_nums, client_default_topic_queue_nums, perm)
        tc.topic_sys_flag = topic_sys_flag
        log.info("create new topic %s", tc)
        self.topic_config_table[topic] = tc
        self._changed()
        return tc

    def create_retry_topic(self, group: str, retry_queue_nums: int, topic_sys_flag: int = 0) -> TopicConfig:
        """SendMessageProcessor: ``%RETRY%group`` with the group's retryQueueNums, perm R|W."""
        return self.create_topic_in_send_message_back_method(
            retry_topic(group), retry_queue_nums, PERM_READ | PERM_WRITE, topic_sys_flag
        )

    def create_dlq_topic(self, group: str) -> TopicConfig:
        """``%DLQ%group``, one queue, perm R|W (6): 4.9.2+ (≤ 4.9.1 was PERM_WRITE only)."""
        return self.create_topic_in_send_message_back_method(
            dlq_topic(group), DLQ_NUMS_PER_GROUP, PERM_READ | PERM_WRITE, 0
        )
