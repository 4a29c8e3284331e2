"""SubscriptionGroupConfig and SubscriptionGroupManager (RocketMQ 4.9.8).

Sources: common/.../subscription/SubscriptionGroupConfig.java,
broker/.../subscription/SubscriptionGroupManager.java.

``{storePathRootDir}/config/subscriptionGroup.json``::

    {"subscriptionGroupTable": {"G": {"brokerId": 0, "consumeBroadcastEnable": true,
        "consumeEnable": true, "consumeFromMinEnable": true, "groupName": "G",
        "notifyConsumerIdsChangedEnable": true, "retryMaxTimes": 16, "retryQueueNums": 1,
        "whichBrokerWhenConsumeSlowly": 1}},
     "dataVersion": {"timestamp": ..., "counter": ...}}
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from reference_broker.broker.broker_config import BrokerConfig
from reference_broker.broker.config_manager import ConfigManager, dump_json
from reference_broker.broker.topic_config import DataVersion
from reference_broker.common.names import validate_group

log = logging.getLogger(__name__)

# MixAll system consumer groups, created at start (SubscriptionGroupManager.init).
SYSTEM_GROUPS = (
    "TOOLS_CONSUMER",
    "FILTERSRV_CONSUMER",
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PULL",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
    "CID_SYS_RMQ_TRANS",
)
CID_RMQ_SYS_PREFIX = "CID_RMQ_SYS_"


def is_sys_consumer_group(group: str) -> bool:
    """MixAll.isSysConsumerGroup: always auto-created, whatever autoCreateSubscriptionGroup says."""
    return group.startswith(CID_RMQ_SYS_PREFIX)


@dataclass
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True


_JSON_KEYS = {
    "groupName": "group_name",
    "consumeEnable": "consume_enable",
    "consumeFromMinEnable": "consume_from_min_enable",
    "consumeBroadcastEnable": "consume_broadcast_enable",
    "retryQueueNums": "retry_queue_nums",
    "retryMaxTimes": "retry_max_times",
    "brokerId": "broker_id",
    "whichBrokerWhenConsumeSlowly": "which_broker_when_consume_slowly",
    "notifyConsumerIdsChangedEnable": "notify_consumer_ids_changed_enable",
}
_FIELD_TYPES = {f.name: f.type for f in fields(SubscriptionGroupConfig)}


def group_to_json(cfg: SubscriptionGroupConfig) -> dict[str, Any]:
    return {k: getattr(cfg, attr) for k, attr in sorted(_JSON_KEYS.items())}


def group_from_json(obj: Any, check_ranges: bool = False) -> SubscriptionGroupConfig:
    """A group from its JSON; ``check_ranges`` (a request's body) also refuses numbers past their Java type.
    Loading a stored table does not, so a table an older broker stored with such a value still loads."""
    if not isinstance(obj, dict) or not isinstance(obj.get("groupName"), str):
        raise ValueError("subscription group must be an object with a string groupName")
    cfg = SubscriptionGroupConfig(obj["groupName"])
    for key, attr in _JSON_KEYS.items():
        if key == "groupName" or key not in obj:
            continue
        v = obj[key]
        want_bool = _FIELD_TYPES[attr] in ("bool", bool)
        if want_bool != isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"group {cfg.group_name}: bad {key} {v!r}")
        # SubscriptionGroupConfig declares these int (the broker ids long); fastjson refuses a number past the
        # field's type. Accepted, a retryQueueNums past an int gave a retry queue id no record can hold, and
        # the delay level that later delivered the send-back failed on it forever.
        lo, hi = _LONG_RANGE if key in _LONG_KEYS else _INT_RANGE
        if check_ranges and not want_bool and not lo <= v <= hi:
            raise ValueError(f"group {cfg.group_name}: {key} {v} out of range [{lo}, {hi}]")
        setattr(cfg, attr, v)
    return cfg


_LONG_KEYS = frozenset({"brokerId", "whichBrokerWhenConsumeSlowly"})
_INT_RANGE = (-(2**31), 2**31 - 1)
_LONG_RANGE = (-(2**63), 2**63 - 1)


class SubscriptionGroupManager(ConfigManager):
    def __init__(self, store_root: Path | str, broker_config: BrokerConfig | None = None) -> None:
        super().__init__()
        self.store_root = Path(store_root)
        self.broker_config = broker_config if broker_config is not None else BrokerConfig()
        self.subscription_group_table: dict[str, SubscriptionGroupConfig] = {
            g: SubscriptionGroupConfig(g) for g in SYSTEM_GROUPS
        }
        self.data_version = DataVersion()

    def config_file_path(self) -> Path:
        return self.store_root / "config" / "subscriptionGroup.json"

    def encode(self, pretty: bool = False) -> str:
        return dump_json(
            {
                "dataVersion": self.data_version.to_json(),
                # a copy: the writer thread encodes while the loop may add groups (see config_manager.py)
                "subscriptionGroupTable": {k: group_to_json(v)
                                           for k, v in dict(self.subscription_group_table).items()},
            },
            pretty,
        )

    def decode(self, text: str) -> None:
        obj = json.loads(text)
        if obj is None:
            return
        if not isinstance(obj, dict) or not isinstance(obj.get("subscriptionGroupTable", {}), dict):
            raise ValueError('subscriptionGroup.json must hold {"subscriptionGroupTable": {...}}')
        loaded = {k: group_from_json(v) for k, v in obj.get("subscriptionGroupTable", {}).items()}
        version = DataVersion.from_json(obj["dataVersion"]) if "dataVersion" in obj else None
        self.subscription_group_table.update(loaded)
        if version is not None:
            self.data_version = version

    def replace_all(self, table: dict[str, SubscriptionGroupConfig], version: DataVersion) -> None:
        """A slave takes its master's groups and data version (SlaveSynchronize.syncSubscriptionGroupConfig)."""
        self.subscription_group_table.clear()
        self.subscription_group_table.update(table)
        self.data_version = DataVersion(version.timestamp, version.counter)
        self.persist_soon()

    def update_subscription_group_config(self, cfg: SubscriptionGroupConfig) -> None:
        old = self.subscription_group_table.get(cfg.group_name)
        log.info("%s subscription group config, old: %s new: %s", "update" if old else "create new", old, cfg)
        self.subscription_group_table[cfg.group_name] = cfg
        self.data_version.next_version()
        self.persist_soon()

    def find_subscription_group_config(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config, auto-created with defaults when autoCreateSubscriptionGroup
        (or the group is a CID_RMQ_SYS_ one); None when unknown and not auto-created."""
        cfg = self.subscription_group_table.get(group)
        if cfg is None and validate_group(group) is not None:
            # Not in 4.9.8, which auto-creates any name: a group that cannot be one becomes neither a config
            # nor, through %RETRY%/%DLQ%, a consume-queue directory (see common/names.py).
            return None
        if cfg is None and (self.broker_config.auto_create_subscription_group or is_sys_consumer_group(group)):
            cfg = SubscriptionGroupConfig(group)
            self.subscription_group_table[group] = cfg
            log.info("auto create a subscription group, %s", cfg)
            self.data_version.next_version()
            self.persist_soon()
        return cfg

    def delete_subscription_group_config(self, group: str) -> SubscriptionGroupConfig | None:
        old = self.subscription_group_table.pop(group, None)
        if old is not None:
            self.data_version.next_version()
            self.persist_soon()
        return old
