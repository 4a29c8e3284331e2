"""Offset tables and the local-file store (BROADCASTING)."""

from __future__ import annotations

import json

from reference_broker.client.message import MessageQueue
from reference_broker.client.offset_store import LocalFileOffsetStore, OffsetTable, ReadOffsetType

A = MessageQueue("T", "broker-a", 0)
B = MessageQueue("T", "broker-a", 1)
C = MessageQueue("U", "broker-b", 0)


def test_increase_only_never_moves_back() -> None:
    table = OffsetTable()
    table.update(A, 10, increase_only=True)
    table.update(A, 5, increase_only=True)
    assert table.get(A) == 10
    table.update(A, 5)  # an explicit set may move back (e.g. a reset)
    assert table.get(A) == 5
    table.update(C, 1)
    assert table.for_topic("T") == {A: 5}
    table.remove(A)
    assert table.get(A) is None


def test_local_store_round_trip_through_the_file(tmp_path) -> None:
    store = LocalFileOffsetStore("127.0.0.1@x", "G", tmp_path)
    store.update_offset(A, 7, False)
    store.update_offset(B, 9, False)
    store.update_offset(C, 3, False)
    store.persist_all([A, B])  # only the held queues are written
    assert store.path == tmp_path / "127.0.0.1@x" / "G" / "offsets.json"
    written = json.loads(store.path.read_text())
    assert written == {"offsetTable": [
        {"brokerName": "broker-a", "offset": 7, "queueId": 0, "topic": "T"},
        {"brokerName": "broker-a", "offset": 9, "queueId": 1, "topic": "T"},
    ]}
    fresh = LocalFileOffsetStore("127.0.0.1@x", "G", tmp_path)
    assert fresh.read_offset(A, ReadOffsetType.READ_FROM_MEMORY) == -1
    assert fresh.read_offset(A, ReadOffsetType.READ_FROM_STORE) == 7
    assert fresh.read_offset(A, ReadOffsetType.READ_FROM_MEMORY) == 7  # cached after the read
    assert fresh.read_offset(C, ReadOffsetType.READ_FROM_STORE) == -1
    fresh.load()
    assert fresh.read_offset(B, ReadOffsetType.MEMORY_FIRST_THEN_STORE) == 9


def test_local_store_keeps_a_backup_and_falls_back_to_it(tmp_path) -> None:
    store = LocalFileOffsetStore("cid", "G", tmp_path)
    store.update_offset(A, 1, False)
    store.persist_all([A])
    store.update_offset(A, 2, False)
    store.persist_all([A])
    bak = store.path.with_name("offsets.json.bak")
    assert json.loads(bak.read_text())["offsetTable"][0]["offset"] == 1
    store.path.write_text("{ torn")  # a damaged current file
    fresh = LocalFileOffsetStore("cid", "G", tmp_path)
    fresh.load()
    assert fresh.read_offset(A, ReadOffsetType.READ_FROM_MEMORY) == 1


def test_local_store_without_a_file_reads_minus_one(tmp_path) -> None:
    store = LocalFileOffsetStore("cid", "G", tmp_path)
    store.load()
    assert store.read_offset(A, ReadOffsetType.READ_FROM_STORE) == -1
    store.persist_all([])  # nothing held: no file
    assert not store.path.exists()
