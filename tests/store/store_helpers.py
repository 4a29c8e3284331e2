"""Shared helpers for the MessageStore facade tests: tiny-file configs, messages, polling."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from reference_broker.common import message as mc
from reference_broker.common import record as rec
from reference_broker.store.config import MessageStoreConfig
from reference_broker.store.message_store import MessageStore
from reference_broker.store.status import PutMessageResult, PutMessageStatus

TOPIC = "FooBar"
CQ_UNITS_PER_FILE = 64


def make_config(root: Path, **overrides: Any) -> MessageStoreConfig:
    """1 KiB commit-log files, 64-unit consume-queue files, a 100-slot / 400-entry index."""
    values: dict[str, Any] = {
        "store_path_root_dir": root,
        "mapped_file_size_commit_log": 1024,
        "mapped_file_size_consume_queue": 20 * CQ_UNITS_PER_FILE,
        "max_hash_slot_num": 100,
        "max_index_num": 400,
        "delete_commit_log_files_interval_ms": 0,
        "delete_consume_queue_files_interval_ms": 0,
    }
    values.update(overrides)
    return MessageStoreConfig(**values)


def new_store(config: MessageStoreConfig) -> MessageStore:
    """A store whose background cleaner and disk check never run during a test."""
    store = MessageStore(config)
    store.clean_initial_delay_s = 3600.0
    store.disk_check_interval_s = 3600.0
    return store


class Stores:
    """Opens stores for a test and shuts every one of them down afterwards."""

    def __init__(self) -> None:
        self.opened: list[MessageStore] = []

    def new(self, config: MessageStoreConfig) -> MessageStore:
        store = new_store(config)
        self.opened.append(store)
        return store

    def open(self, config: MessageStoreConfig) -> MessageStore:
        store = self.new(config)
        assert store.load()
        store.start()
        return store

    def close_all(self) -> None:
        for store in reversed(self.opened):
            store.shutdown()


def stores_fixture() -> Iterator[Stores]:
    """Body of each test module's ``stores`` fixture."""
    s = Stores()
    try:
        yield s
    finally:
        s.close_all()


def make_msg(body: bytes | str = b"hello", topic: str = TOPIC, queue_id: int = 0, tags: str | None = "TagA",
             keys: str | None = None, uniq_key: str | None = None,
             props: dict[str, str] | None = None) -> rec.MessageExtBrokerInner:
    if isinstance(body, str):
        body = body.encode()
    properties: dict[str, str] = {}
    if tags is not None:
        properties[mc.PROPERTY_TAGS] = tags
    if keys is not None:
        properties[mc.PROPERTY_KEYS] = keys
    if uniq_key is not None:
        properties[mc.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uniq_key
    properties.update(props or {})
    return rec.MessageExtBrokerInner(topic=topic, body=body, queue_id=queue_id, properties=properties,
                                     born_timestamp=int(time.time() * 1000), born_host=("127.0.0.1", 50000))


def put_ok(store: MessageStore, msg: rec.MessageExtBrokerInner) -> PutMessageResult:
    result = store.put_message(msg)
    assert result.status is PutMessageStatus.PUT_OK, result
    assert result.append is not None
    return result


def wait_until(cond: Callable[[], bool], timeout_s: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def wait_dispatched(store: MessageStore) -> None:
    wait_until(lambda: store.dispatch_behind_bytes() == 0, what="dispatch to catch up")


def cq_units(store: MessageStore, topic: str, queue_id: int) -> list[tuple[int, int, int]]:
    cq = store.find_consume_queue(topic, queue_id, create=False)
    assert cq is not None
    units = []
    for i in range(cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()):
        unit = cq.get_unit(i)
        assert unit is not None
        units.append(unit)
    return units
