"""BrokerConfig and the ``broker.conf`` reader (common/.../BrokerConfig.java, 4.9.8 defaults).

``load_broker_conf`` reads RocketMQ's Java-properties ``key=value`` file. Broker keys land in
``BrokerConfig`` (``BROKER_KEYS``), store keys in ``MessageStoreConfig`` (store ``ROCKETMQ_KEYS``).
Unlike MixAll.properties2Object, which silently ignores unknown keys and reads any
non-"true" boolean as false, an unknown key or a bad value is an error naming the file,
the line, the key and the reason: a typo in broker.conf should stop the broker, not be
silently replaced by a default.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from reference_broker.store.config import ROCKETMQ_KEYS, MessageStoreConfig, coerce_value


def _local_host_name() -> str:
    # BrokerConfig.localHostName(); "DEFAULT_BROKER" when the host name is unknown.
    return platform.node() or "DEFAULT_BROKER"


@dataclass
class BrokerConfig:
    broker_cluster_name: str = "DefaultCluster"  # brokerClusterName
    broker_name: str = field(default_factory=_local_host_name)  # brokerName
    broker_id: int = 0  # brokerId (MixAll.MASTER_ID)
    listen_port: int = 10911  # listenPort (NettyServerConfig)
    namesrv_addr: str | None = field(default_factory=lambda: os.environ.get("NAMESRV_ADDR"))  # namesrvAddr
    # RocketMQ defaults brokerIP1 to the first non-loopback address; no socket lookups here.
    broker_ip1: str = "127.0.0.1"  # brokerIP1
    broker_permission: int = 6  # brokerPermission: PERM_READ | PERM_WRITE
    default_topic_queue_nums: int = 8  # defaultTopicQueueNums (auto-created topics, TBW102)
    auto_create_topic_enable: bool = True  # autoCreateTopicEnable
    cluster_topic_enable: bool = True  # clusterTopicEnable
    broker_topic_enable: bool = True  # brokerTopicEnable
    auto_create_subscription_group: bool = True  # autoCreateSubscriptionGroup
    trace_topic_enable: bool = False  # traceTopicEnable
    msg_trace_topic_name: str = "RMQ_SYS_TRACE_TOPIC"  # msgTraceTopicName
    register_name_server_period_ms: int = 30_000  # registerNameServerPeriod (getter clamps)
    flush_consumer_offset_interval_ms: int = 5000  # flushConsumerOffsetInterval
    send_message_thread_pool_nums: int = 1  # sendMessageThreadPoolNums (1 in 4.9.x)
    send_thread_pool_queue_capacity: int = 10_000  # sendThreadPoolQueueCapacity
    pull_thread_pool_queue_capacity: int = 100_000  # pullThreadPoolQueueCapacity
    wait_time_mills_in_send_queue: int = 200  # waitTimeMillsInSendQueue
    wait_time_mills_in_pull_queue: int = 5000  # waitTimeMillsInPullQueue
    wait_time_mills_in_heartbeat_queue: int = 31_000  # waitTimeMillsInHeartbeatQueue
    wait_time_mills_in_transaction_queue: int = 3000  # waitTimeMillsInTransactionQueue
    long_polling_enable: bool = True  # longPollingEnable
    short_polling_time_mills: int = 1000  # shortPollingTimeMills
    broker_fast_failure_enable: bool = True  # brokerFastFailureEnable
    slave_read_enable: bool = False  # slaveReadEnable
    offset_check_in_slave: bool = False  # offsetCheckInSlave
    reject_transaction_message: bool = False  # rejectTransactionMessage
    transaction_timeout_ms: int = 6000  # transactionTimeOut
    transaction_check_max: int = 15  # transactionCheckMax
    transaction_check_interval_ms: int = 60_000  # transactionCheckInterval
    filter_server_nums: int = 0  # filterServerNums
    enable_property_filter: bool = False  # enablePropertyFilter

    def get_register_name_server_period_ms(self) -> int:
        """BrokerConfig.getRegisterNameServerPeriod: clamped to [10 s, 60 s]."""
        return max(10_000, min(60_000, self.register_name_server_period_ms))


# broker.conf key → BrokerConfig field.
BROKER_KEYS: dict[str, str] = {
    "brokerClusterName": "broker_cluster_name",
    "brokerName": "broker_name",
    "brokerId": "broker_id",
    "listenPort": "listen_port",
    "namesrvAddr": "namesrv_addr",
    "brokerIP1": "broker_ip1",
    "brokerPermission": "broker_permission",
    "defaultTopicQueueNums": "default_topic_queue_nums",
    "autoCreateTopicEnable": "auto_create_topic_enable",
    "clusterTopicEnable": "cluster_topic_enable",
    "brokerTopicEnable": "broker_topic_enable",
    "autoCreateSubscriptionGroup": "auto_create_subscription_group",
    "traceTopicEnable": "trace_topic_enable",
    "msgTraceTopicName": "msg_trace_topic_name",
    "registerNameServerPeriod": "register_name_server_period_ms",
    "flushConsumerOffsetInterval": "flush_consumer_offset_interval_ms",
    "sendMessageThreadPoolNums": "send_message_thread_pool_nums",
    "sendThreadPoolQueueCapacity": "send_thread_pool_queue_capacity",
    "pullThreadPoolQueueCapacity": "pull_thread_pool_queue_capacity",
    "waitTimeMillsInSendQueue": "wait_time_mills_in_send_queue",
    "waitTimeMillsInPullQueue": "wait_time_mills_in_pull_queue",
    "waitTimeMillsInHeartbeatQueue": "wait_time_mills_in_heartbeat_queue",
    "waitTimeMillsInTransactionQueue": "wait_time_mills_in_transaction_queue",
    "longPollingEnable": "long_polling_enable",
    "shortPollingTimeMills": "short_polling_time_mills",
    "brokerFastFailureEnable": "broker_fast_failure_enable",
    "slaveReadEnable": "slave_read_enable",
    "offsetCheckInSlave": "offset_check_in_slave",
    "rejectTransactionMessage": "reject_transaction_message",
    "transactionTimeOut": "transaction_timeout_ms",
    "transactionCheckMax": "transaction_check_max",
    "transactionCheckInterval": "transaction_check_interval_ms",
    "filterServerNums": "filter_server_nums",
    "enablePropertyFilter": "enable_property_filter",
}

_BOOL_FIELDS = {f.name for f in fields(BrokerConfig) if f.type in ("bool", bool)}
_INT_FIELDS = {f.name for f in fields(BrokerConfig) if f.type in ("int", int)}


class BrokerConfError(ValueError):
    """A broker.conf that cannot be used; the message names the file, line, key and reason."""


def coerce_broker_value(name: str, raw: str) -> Any:
    """A broker.conf string as the type of BrokerConfig field ``name``; ValueError with a reason."""
    raw = raw.strip()
    if name in _BOOL_FIELDS:
        if raw.lower() not in ("true", "false"):
            raise ValueError(f"expected true or false, got {raw!r}")
        return raw.lower() == "true"
    if name in _INT_FIELDS:
        try:
            return int(raw)
        except ValueError:
            raise ValueError(f"expected an integer, got {raw!r}") from None
    return raw


def parse_properties(text: str) -> list[tuple[int, str, str]]:
    """Java-properties lines → (line number, key, value). Comments (# or !), blank lines,
    ``=``/``:``/whitespace separators, backslash line continuation."""
    out: list[tuple[int, str, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        lineno = i + 1
        line = lines[i].lstrip()
        i += 1
        if not line or line[0] in "#!":
            continue
        while line.endswith("\\") and not line.endswith("\\\\") and i < len(lines):
            line = line[:-1] + lines[i].lstrip()
            i += 1
        sep = len(line)
        for j, ch in enumerate(line):
            if ch in "=: \t":
                sep = j
                break
        key = line[:sep]
        rest = line[sep:].lstrip(" \t")
        if rest[:1] in ("=", ":"):
            rest = rest[1:]
        out.append((lineno, key, rest.strip()))
    return out


def load_broker_conf(path: Path | str) -> tuple[BrokerConfig, MessageStoreConfig]:
    """Read a broker.conf into (BrokerConfig, MessageStoreConfig); BrokerConfError when unusable."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BrokerConfError(f"{path}: broker config file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise BrokerConfError(f"{path}: cannot read broker config file: {e}") from None
    broker = BrokerConfig()
    store = MessageStoreConfig()
    for lineno, key, value in parse_properties(text):
        try:
            if key in BROKER_KEYS:
                setattr(broker, BROKER_KEYS[key], coerce_broker_value(BROKER_KEYS[key], value))
            elif key in ROCKETMQ_KEYS:
                setattr(store, ROCKETMQ_KEYS[key], coerce_value(ROCKETMQ_KEYS[key], value))
            else:
                raise ValueError("unknown key")
        except ValueError as e:
            raise BrokerConfError(f"{path}:{lineno}: {key}: {e}") from None
    store.store_host = (broker.broker_ip1, broker.listen_port)
    return broker, store
