"""This module owns the name server's route tables (namesrv/.../routeinfo/RouteInfoManager.java, 4.9.8).

Sans-IO: no sockets, no clock; every call that needs the time takes ``now_ms``. The shell (``server``) owns the
one event loop that calls in, so there is no lock (Java guards the tables with a ReadWriteLock).

Tables, as in Java:

- topicQueueTable: topic -> [QueueData]            (one QueueData per broker name)
- brokerAddrTable: brokerName -> BrokerData        (cluster, brokerName, brokerAddrs {brokerId: addr})
- clusterAddrTable: cluster -> {brokerName}
- brokerLiveTable: brokerAddr -> BrokerLiveInfo    (lastUpdateTimestamp, dataVersion, haServerAddr)
- filterServerTable: brokerAddr -> [filter server addr]

QueueData and BrokerData, and their JSON, are the clients' too: common/route_data.py.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Final

from reference_broker.common.route_data import MASTER_ID, BrokerData, QueueData

log = logging.getLogger(__name__)

BROKER_CHANNEL_EXPIRED_TIME_MS: Final = 120_000  # RouteInfoManager.BROKER_CHANNEL_EXPIRED_TIME


@dataclass(frozen=True, slots=True)
class DataVersion:
    """DataVersion.java: equal when timestamp and counter are equal."""

    timestamp: int = 0
    counter: int = 0

    @classmethod
    def from_json(cls, obj: Any) -> DataVersion:
        if obj is None:
            return cls()
        if not isinstance(obj, dict):
            raise ValueError(f"dataVersion must be an object, got {type(obj).__name__}")
        return cls(timestamp=_int(obj, "timestamp", 0), counter=_int(obj, "counter", 0))

    def to_json(self) -> dict[str, int]:
        return {"counter": self.counter, "timestamp": self.timestamp}


@dataclass(slots=True)
class BrokerLiveInfo:
    last_update_timestamp: int
    data_version: DataVersion
    ha_server_addr: str | None


@dataclass(frozen=True, slots=True)
class RegisterResult:
    """RegisterBrokerResult: set only for a slave whose master is registered and alive."""

    ha_server_addr: str | None = None
    master_addr: str | None = None


def _int(obj: dict[str, Any], key: str, default: int) -> int:
    value = obj.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key} must be an integer, got {value!r}")
    return value


def queue_data_from_topic_config(broker_name: str, topic: str, config: Any) -> QueueData:
    """The QueueData createAndUpdateQueueData builds from a TopicConfig (JSON object)."""
    if not isinstance(config, dict):
        raise ValueError(f"topic config of {topic!r} must be an object, got {type(config).__name__}")
    return QueueData(
        broker_name=broker_name,
        read_queue_nums=_int(config, "readQueueNums", 16),  # TopicConfig's defaults
        write_queue_nums=_int(config, "writeQueueNums", 16),
        perm=_int(config, "perm", 6),
        topic_sys_flag=_int(config, "topicSysFlag", 0),
    )


class RouteInfoManager:
    def __init__(self) -> None:
        self.topic_queue_table: dict[str, list[QueueData]] = {}
        self.broker_addr_table: dict[str, BrokerData] = {}
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.broker_live_table: dict[str, BrokerLiveInfo] = {}
        self.filter_server_table: dict[str, list[str]] = {}

    # -- registration
    def register_broker(
        self,
        cluster: str,
        addr: str,
        name: str,
        broker_id: int,
        ha_addr: str | None,
        topic_config: dict[str, Any] | None,
        data_version: DataVersion | dict[str, Any] | None,
        now_ms: int,
        filter_server_list: list[str] | None = None,
    ) -> RegisterResult:
        """RouteInfoManager.registerBroker. ``topic_config`` maps topic -> TopicConfig JSON object.

        Raises ValueError for a malformed topic config before any table changes.
        """
        version = data_version if isinstance(data_version, DataVersion) else DataVersion.from_json(data_version)
        queue_datas = [queue_data_from_topic_config(name, t, c) for t, c in (topic_config or {}).items()]

        self.cluster_addr_table.setdefault(cluster, set()).add(name)

        register_first = False
        broker_data = self.broker_addr_table.get(name)
        if broker_data is None:
            register_first = True
            broker_data = BrokerData(cluster, name)
            self.broker_addr_table[name] = broker_data
        # Slave switched to master: the same ip:port has one record only, under its new id.
        for old_id in [i for i, a in broker_data.broker_addrs.items() if a == addr and i != broker_id]:
            del broker_data.broker_addrs[old_id]
        old_addr = broker_data.broker_addrs.get(broker_id)
        broker_data.broker_addrs[broker_id] = addr
        register_first = register_first or old_addr is None

        changed = register_first or self._is_topic_config_changed(addr, version)
        if topic_config is not None and broker_id == MASTER_ID and changed:
            for topic, qd in zip(topic_config, queue_datas, strict=True):
                self._create_and_update_queue_data(topic, qd)

        prev = self.broker_live_table.get(addr)
        self.broker_live_table[addr] = BrokerLiveInfo(now_ms, version, ha_addr)
        if prev is None:
            log.info("new broker registered, %s HAServer: %s", addr, ha_addr)

        if filter_server_list is not None:
            if filter_server_list:
                self.filter_server_table[addr] = list(filter_server_list)
            else:
                self.filter_server_table.pop(addr, None)

        if broker_id != MASTER_ID:
            master_addr = broker_data.broker_addrs.get(MASTER_ID)
            if master_addr is not None:
                master_live = self.broker_live_table.get(master_addr)
                if master_live is not None:
                    return RegisterResult(master_live.ha_server_addr, master_addr)
        return RegisterResult()

    def _is_topic_config_changed(self, addr: str, version: DataVersion) -> bool:
        prev = self.broker_live_table.get(addr)
        return prev is None or prev.data_version != version

    def _create_and_update_queue_data(self, topic: str, queue_data: QueueData) -> None:
        queue_datas = self.topic_queue_table.get(topic)
        if queue_datas is None:
            self.topic_queue_table[topic] = [queue_data]
            log.info("new topic registered, %s %s", topic, queue_data)
            return
        add_new = True
        for i, qd in enumerate(queue_datas):
            if qd.broker_name == queue_data.broker_name:
                if qd == queue_data:
                    add_new = False
                else:
                    log.info("topic changed, %s OLD: %s NEW: %s", topic, qd, queue_data)
                    del queue_datas[i]
                break
        if add_new:
            queue_datas.append(queue_data)

    def unregister_broker(self, cluster: str, addr: str, name: str, broker_id: int) -> None:
        """RouteInfoManager.unregisterBroker."""
        live = self.broker_live_table.pop(addr, None)
        log.info("unregisterBroker, remove from brokerLiveTable %s, %s", "OK" if live else "Failed", addr)
        self.filter_server_table.pop(addr, None)
        remove_broker_name = False
        broker_data = self.broker_addr_table.get(name)
        if broker_data is not None:
            broker_data.broker_addrs.pop(broker_id, None)
            if not broker_data.broker_addrs:
                del self.broker_addr_table[name]
                remove_broker_name = True
        if remove_broker_name:
            names = self.cluster_addr_table.get(cluster)
            if names is not None:
                names.discard(name)
                if not names:
                    del self.cluster_addr_table[cluster]
            self._remove_topic_by_broker_name(name)

    def _remove_topic_by_broker_name(self, name: str) -> None:
        for topic in list(self.topic_queue_table):
            remaining = [qd for qd in self.topic_queue_table[topic] if qd.broker_name != name]
            if remaining:
                self.topic_queue_table[topic] = remaining
            else:
                del self.topic_queue_table[topic]
                log.info("remove topic[%s] all queue, from topicQueueTable, because channel destroyed", topic)

    # -- queries
    def pick_topic_route_data(self, topic: str) -> dict[str, Any] | None:
        """RouteInfoManager.pickupTopicRouteData as TopicRouteData JSON; None when the topic has no route."""
        queue_datas = self.topic_queue_table.get(topic)
        if queue_datas is None:
            return None
        broker_datas: list[dict[str, Any]] = []
        filter_servers: dict[str, list[str]] = {}
        for name in dict.fromkeys(qd.broker_name for qd in queue_datas):
            broker_data = self.broker_addr_table.get(name)
            if broker_data is None:
                continue
            broker_datas.append(broker_data.to_json())
            for addr in broker_data.broker_addrs.values():
                servers = self.filter_server_table.get(addr)
                if servers is not None:
                    filter_servers[addr] = list(servers)
        if not broker_datas:
            return None
        return {
            "brokerDatas": broker_datas,
            "filterServerTable": filter_servers,
            "queueDatas": [qd.to_json() for qd in queue_datas],
        }

    def get_all_cluster_info(self) -> dict[str, Any]:
        """ClusterInfo JSON: brokerAddrTable and clusterAddrTable."""
        return {
            "brokerAddrTable": {name: bd.to_json() for name, bd in self.broker_addr_table.items()},
            "clusterAddrTable": {c: sorted(names) for c, names in self.cluster_addr_table.items()},
        }

    # -- expiry
    def scan_not_active_broker(self, now_ms: int, expired_ms: int = BROKER_CHANNEL_EXPIRED_TIME_MS) -> list[str]:
        """RouteInfoManager.scanNotActiveBroker: drop brokers not heard from for ``expired_ms``; their addrs."""
        expired = [a for a, li in self.broker_live_table.items() if li.last_update_timestamp + expired_ms < now_ms]
        for addr in expired:
            log.warning("The broker channel expired, %s %dms", addr, expired_ms)
            self.on_broker_gone(addr)
        return expired

    def on_broker_gone(self, addr: str) -> None:
        """RouteInfoManager.onChannelDestroy for a broker address: remove it and whatever only it held."""
        self.broker_live_table.pop(addr, None)
        self.filter_server_table.pop(addr, None)
        removed_names: list[str] = []
        for name in list(self.broker_addr_table):
            broker_data = self.broker_addr_table[name]
            for broker_id in [i for i, a in broker_data.broker_addrs.items() if a == addr]:
                del broker_data.broker_addrs[broker_id]
                log.info("remove brokerAddr[%d, %s] from brokerAddrTable, because channel destroyed", broker_id, addr)
            if not broker_data.broker_addrs:
                del self.broker_addr_table[name]
                removed_names.append(name)
        for name in removed_names:
            for cluster in list(self.cluster_addr_table):
                names = self.cluster_addr_table[cluster]
                names.discard(name)
                if not names:
                    del self.cluster_addr_table[cluster]
            self._remove_topic_by_broker_name(name)
