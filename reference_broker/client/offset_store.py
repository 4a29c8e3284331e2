"""This module owns consumer offsets on the client side (client/.../consumer/store/*, 4.9.8).

An offset is the next queue offset to consume. ``OffsetTable`` is the sans-IO core both stores share (the
in-memory map, with increase-only updates). Two stores around it:

- ``RemoteBrokerOffsetStore`` (CLUSTERING): reads QUERY_CONSUMER_OFFSET from the queue's broker, writes
  UPDATE_CONSUMER_OFFSET oneway, as 4.9.8's persistAll does. A broker error (QUERY_NOT_FOUND for a new group)
  reads as -1, a transport error as -2 (readOffset's contract; callers skip the queue on -2).
- ``LocalFileOffsetStore`` (BROADCASTING): ``<dir>/<clientId>/<group>/offsets.json``, written whole to a
  temporary file and renamed into place, the previous version kept as ``offsets.json.bak``. The default dir is
  ``~/.rocketmq_offsets`` (rocketmq.client.localOffsetStoreDir). Java stores fastjson's map with object keys,
  which is not JSON; ours is ``{"offsetTable": [{"topic", "brokerName", "queueId", "offset"}, ...]}``.
"""

from __future__ import annotations

import enum
import json
import logging
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from reference_broker.client import protocol
from reference_broker.client.errors import ClientErrorCode, MQBrokerError, MQClientError
from reference_broker.client.message import MessageQueue
from reference_broker.common.route_data import MASTER_ID

if TYPE_CHECKING:
    from reference_broker.client.instance import MQClientInstance

log = logging.getLogger(__name__)

DEFAULT_LOCAL_DIR = Path.home() / ".rocketmq_offsets"
QUERY_OFFSET_TIMEOUT_S = 5.0  # RemoteBrokerOffsetStore.fetchConsumeOffsetFromBroker: 5000 ms


class ReadOffsetType(enum.Enum):
    READ_FROM_MEMORY = "READ_FROM_MEMORY"
    READ_FROM_STORE = "READ_FROM_STORE"
    MEMORY_FIRST_THEN_STORE = "MEMORY_FIRST_THEN_STORE"


class OffsetTable:
    def __init__(self) -> None:
        self._table: dict[MessageQueue, int] = {}
        self._lock = threading.Lock()

    def update(self, mq: MessageQueue, offset: int, increase_only: bool = False) -> None:
        """updateOffset: with ``increase_only`` an older (smaller) offset never replaces a newer one."""
        with self._lock:
            old = self._table.get(mq)
            if old is None or not increase_only or offset > old:
                self._table[mq] = offset

    def get(self, mq: MessageQueue) -> int | None:
        return self._table.get(mq)

    def remove(self, mq: MessageQueue) -> None:
        with self._lock:
            self._table.pop(mq, None)

    def items(self) -> list[tuple[MessageQueue, int]]:
        with self._lock:
            return list(self._table.items())

    def for_topic(self, topic: str) -> dict[MessageQueue, int]:
        """cloneOffsetTable."""
        return {mq: o for mq, o in self.items() if mq.topic == topic}


class OffsetStore(Protocol):
    table: OffsetTable

    def load(self) -> None: ...

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None: ...

    def read_offset(self, mq: MessageQueue, read_type: ReadOffsetType) -> int: ...

    def persist_all(self, mqs: Iterable[MessageQueue]) -> None: ...

    def persist(self, mq: MessageQueue) -> None: ...

    def remove_offset(self, mq: MessageQueue) -> None: ...


class RemoteBrokerOffsetStore:
    def __init__(self, instance: MQClientInstance, group: str) -> None:
        self.instance = instance
        self.group = group
        self.table = OffsetTable()

    def load(self) -> None:
        """Nothing to load: the broker holds the offsets."""

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        self.table.update(mq, offset, increase_only)

    def read_offset(self, mq: MessageQueue, read_type: ReadOffsetType) -> int:
        if read_type is not ReadOffsetType.READ_FROM_STORE:
            offset = self.table.get(mq)
            if offset is not None:
                return offset
            if read_type is ReadOffsetType.READ_FROM_MEMORY:
                return -1
        try:
            offset = self.fetch_from_broker(mq)
        except MQBrokerError:
            return -1  # no offset on the broker (QUERY_NOT_FOUND), or any broker-side refusal
        except MQClientError as exc:
            log.warning("fetchConsumeOffsetFromBroker exception, %s: %s", mq, exc)
            return -2
        self.table.update(mq, offset)
        return offset

    def _addr(self, mq: MessageQueue) -> str:
        addr = self.instance.find_broker_addr_in_subscribe(mq.broker_name, MASTER_ID, True)
        if addr is None:
            self.instance.update_topic_route(mq.topic)
            addr = self.instance.find_broker_addr_in_subscribe(mq.broker_name, MASTER_ID, False)
        if addr is None:
            raise MQClientError(ClientErrorCode.BROKER_NOT_EXIST_EXCEPTION, f"The broker[{mq.broker_name}] not exist")
        return addr

    def fetch_from_broker(self, mq: MessageQueue) -> int:
        addr = self._addr(mq)
        response = self.instance.invoke(addr, protocol.query_consumer_offset_request(self.group, mq),
                                        QUERY_OFFSET_TIMEOUT_S)
        return protocol.offset_from_response(response, addr)

    def update_to_broker(self, mq: MessageQueue, offset: int, oneway: bool = True) -> None:
        """updateConsumeOffsetToBroker."""
        addr = self._addr(mq)
        cmd = protocol.update_consumer_offset_request(self.group, mq, offset)
        if oneway:
            self.instance.invoke_oneway(addr, cmd)
        else:
            response = self.instance.invoke(addr, cmd, QUERY_OFFSET_TIMEOUT_S)
            if response.code != 0:
                raise protocol.broker_error(response, addr)

    def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        """Write the offset of every queue in ``mqs``; forget the offsets of queues no longer held."""
        wanted = set(mqs)
        for mq, offset in self.table.items():
            if mq in wanted:
                try:
                    self.update_to_broker(mq, offset)
                except MQClientError as exc:
                    log.warning("updateConsumeOffsetToBroker %s failed: %s", mq, exc)
            else:
                self.table.remove(mq)
                log.info("remove unused mq, %s, %s", mq, self.group)

    def persist(self, mq: MessageQueue) -> None:
        offset = self.table.get(mq)
        if offset is not None:
            try:
                self.update_to_broker(mq, offset)
            except MQClientError as exc:
                log.warning("updateConsumeOffsetToBroker %s failed: %s", mq, exc)

    def remove_offset(self, mq: MessageQueue) -> None:
        self.table.remove(mq)


class LocalFileOffsetStore:
    def __init__(self, client_id: str, group: str, base_dir: Path | str | None = None) -> None:
        base = Path(base_dir) if base_dir is not None else Path(os.environ.get(
            "ROCKETMQ_CLIENT_LOCAL_OFFSET_STORE_DIR", DEFAULT_LOCAL_DIR))
        self.path = base / client_id.replace(os.sep, "_") / group / "offsets.json"
        self.group = group
        self.table = OffsetTable()
        self._file_lock = threading.Lock()

    def _read_file(self) -> dict[MessageQueue, int] | None:
        for candidate in (self.path, self.path.with_name(self.path.name + ".bak")):
            try:
                raw = json.loads(candidate.read_text(encoding="utf-8"))
                return {MessageQueue(str(e["topic"]), str(e["brokerName"]), int(e["queueId"])): int(e["offset"])
                        for e in raw.get("offsetTable", [])}
            except FileNotFoundError:
                continue
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                log.warning("offset file %s is unreadable (%s); trying the backup", candidate, exc)
        return None

    def load(self) -> None:
        for mq, offset in (self._read_file() or {}).items():
            self.table.update(mq, offset)

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        self.table.update(mq, offset, increase_only)

    def read_offset(self, mq: MessageQueue, read_type: ReadOffsetType) -> int:
        if read_type is not ReadOffsetType.READ_FROM_STORE:
            offset = self.table.get(mq)
            if offset is not None:
                return offset
            if read_type is ReadOffsetType.READ_FROM_MEMORY:
                return -1
        stored = (self._read_file() or {}).get(mq)
        if stored is None:
            return -1
        self.table.update(mq, stored)
        return stored

    def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        wanted = set(mqs)
        if not wanted:
            return
        entries = [{"brokerName": mq.broker_name, "offset": off, "queueId": mq.queue_id, "topic": mq.topic}
                   for mq, off in sorted(self.table.items()) if mq in wanted]
        data = json.dumps({"offsetTable": entries}, indent=1).encode("utf-8")
        with self._file_lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(self.path.name + ".tmp")
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            if self.path.exists():
                os.replace(self.path, self.path.with_name(self.path.name + ".bak"))
            os.replace(tmp, self.path)

    def persist(self, mq: MessageQueue) -> None:
        """LocalFileOffsetStore.persist is a no-op in RocketMQ; persist_all writes the file."""

    def remove_offset(self, mq: MessageQueue) -> None:
        """Kept, as in RocketMQ (a broadcasting consumer owns every queue)."""


class NullOffsetStore:
    """Before start: nothing stored, nothing to persist."""

    def __init__(self) -> None:
        self.table = OffsetTable()

    def load(self) -> None:
        pass

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        pass

    def read_offset(self, mq: MessageQueue, read_type: ReadOffsetType) -> int:
        return -1

    def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        pass

    def persist(self, mq: MessageQueue) -> None:
        pass

    def remove_offset(self, mq: MessageQueue) -> None:
        pass
