"""MessageStore recovery and shutdown: DefaultMessageStoreTest.testRecover and DefaultMessageStoreShutDownTest."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from reference_broker.store import record as rec
from reference_broker.store.message_store import MessageStore
from reference_broker.store.status import GetMessageStatus, PutMessageResult
from tests.store.store_helpers import (
    TOPIC,
    Stores,
    cq_units,
    make_config,
    make_msg,
    new_store,
    put_ok,
    stores_fixture,
    wait_dispatched,
)

RECOVER_TOPIC = "testRecover"


@pytest.fixture
def stores() -> Iterator[Stores]:
    yield from stores_fixture()


def damage_commit_log(root: Path, file_size: int, offset: int) -> None:
    """DefaultMessageStoreTest.damageCommitlog: 16 zero bytes at the record's topic-length position."""
    path = root / "commitlog" / f"{offset - offset % file_size:020d}"
    pos = offset % file_size
    with open(path, "r+b") as f:
        f.seek(pos + 84)
        body_len = int.from_bytes(f.read(4), "big")
        f.seek(pos + 88 + body_len)
        f.write(bytes(16))


def put_recover_msgs(store: MessageStore, n: int) -> list[PutMessageResult]:
    """``n`` messages whose bodies name their queue offset."""
    out = []
    for _ in range(n):
        q = store.commit_log.topic_queue_table.get(f"{RECOVER_TOPIC}-0", 0)
        out.append(put_ok(store, make_msg(f"r{q:04d}", topic=RECOVER_TOPIC)))
    wait_dispatched(store)
    return out


def damage_last_message(store: MessageStore) -> tuple[int, int]:
    """Put a few messages, then one more whose record is damaged after shutdown; (its offset, its queue offset)."""
    results = put_recover_msgs(store, 5)
    size = results[0].append.wrote_bytes if results[0].append else 0
    file_size = store.config.mapped_file_size_commit_log
    while file_size - store.get_max_phy_offset() % file_size < size + 8:  # keep the last one in the same file
        put_recover_msgs(store, 1)
    second_last_phy = store.get_max_phy_offset()
    second_last_cq = store.get_max_offset_in_queue(RECOVER_TOPIC, 0)
    (last,) = put_recover_msgs(store, 1)
    assert last.append is not None
    assert last.append.wrote_offset == second_last_phy  # no roll-over in between: previous end = its start
    assert last.append.logics_offset == second_last_cq
    assert store.get_max_offset_in_queue(RECOVER_TOPIC, 0) == second_last_cq + 1
    store.shutdown()
    assert store.shutdown_normally
    damage_commit_log(store.store_root, store.config.mapped_file_size_commit_log, last.append.wrote_offset)
    return second_last_phy, second_last_cq


def test_recover(tmp_path: Path, stores: Stores) -> None:
    cfg = make_config(tmp_path)
    store = stores.open(cfg)
    put_recover_msgs(store, 30)
    max_phy = store.get_max_phy_offset()
    max_cq = store.get_max_offset_in_queue(RECOVER_TOPIC, 0)
    assert max_cq == 30
    store.shutdown()

    # 1. A clean restart keeps the commit log's and the queue's max offsets.
    store = stores.open(make_config(tmp_path))
    assert store.last_exit_ok
    assert store.get_max_phy_offset() == max_phy
    assert store.get_max_offset_in_queue(RECOVER_TOPIC, 0) == max_cq

    # 2. The last record damaged, normal restart: both truncate to the record before it.
    second_last_phy, second_last_cq = damage_last_message(store)
    store = stores.open(make_config(tmp_path))
    assert store.last_exit_ok
    assert store.get_max_phy_offset() == second_last_phy
    assert store.get_max_offset_in_queue(RECOVER_TOPIC, 0) == second_last_cq
    assert store.get_message("G", RECOVER_TOPIC, 0, second_last_cq, 32).status is GetMessageStatus.OFFSET_OVERFLOW_ONE
    res = store.get_message("G", RECOVER_TOPIC, 0, second_last_cq - 1, 32)
    assert [rec.decode_message(m).body for m in res.messages] == [f"r{second_last_cq - 1:04d}".encode()]

    # 3. The same damage plus an abort file: abnormal recovery truncates to the same place; writes go on.
    # RocketMQ's time rule rescans the file holding the checkpoint's time, so it finds damage in data the
    # checkpoint calls durable; the checkpoint-offset rule starts after it (see the next test).
    second_last_phy, second_last_cq = damage_last_message(store)
    (tmp_path / "abort").touch()
    store = stores.open(make_config(tmp_path, recover_from_checkpoint_offset=False))
    assert not store.last_exit_ok
    assert store.get_max_phy_offset() == second_last_phy
    assert store.get_max_offset_in_queue(RECOVER_TOPIC, 0) == second_last_cq

    again = put_ok(store, make_msg("written again", topic=RECOVER_TOPIC))
    assert again.append is not None
    assert again.append.logics_offset == second_last_cq
    assert again.append.wrote_offset == second_last_phy
    more = put_recover_msgs(store, 20)
    assert [r.append.logics_offset for r in more if r.append] == list(range(second_last_cq + 1, second_last_cq + 21))
    res = store.get_message("G", RECOVER_TOPIC, 0, second_last_cq, 1)
    assert res.status is GetMessageStatus.FOUND
    assert rec.decode_message(res.messages[0], check_crc=True).body == b"written again"


def test_abnormal_recovery_rebuilds_a_deleted_consume_queue(tmp_path: Path, stores: Stores) -> None:
    store = stores.open(make_config(tmp_path))
    for i in range(40):
        put_ok(store, make_msg(f"m{i}", queue_id=i % 2, keys=f"key-{i}"))
    wait_dispatched(store)
    before = {q: cq_units(store, TOPIC, q) for q in range(2)}
    assert len(before[0]) == len(before[1]) == 20
    store.shutdown()

    shutil.rmtree(tmp_path / "consumequeue" / TOPIC / "0")
    (tmp_path / "checkpoint").unlink()  # no checkpoint: recovery re-dispatches from the first file
    (tmp_path / "abort").touch()

    store = stores.open(make_config(tmp_path))
    assert not store.last_exit_ok
    assert {q: cq_units(store, TOPIC, q) for q in range(2)} == before
    res = store.get_message("G", TOPIC, 0, 0, 32)
    assert res.status is GetMessageStatus.FOUND
    assert [rec.decode_message(m).body for m in res.messages] == [f"m{i}".encode() for i in range(0, 40, 2)]
    found = store.query_message(TOPIC, "key-6", 32, 0, 2**62)
    assert [m.body for m in found] == [b"m6"]

    nxt = put_ok(store, make_msg("next", queue_id=0))
    assert nxt.append is not None and nxt.append.logics_offset == 20


def test_abnormal_recovery_with_zeroed_checkpoint(tmp_path: Path, stores: Stores) -> None:
    store = stores.open(make_config(tmp_path))
    for i in range(12):
        put_ok(store, make_msg(f"z{i}"))
    wait_dispatched(store)
    before = cq_units(store, TOPIC, 0)
    store.shutdown()

    shutil.rmtree(tmp_path / "consumequeue" / TOPIC)
    (tmp_path / "checkpoint").write_bytes(bytes(4096))
    (tmp_path / "abort").touch()
    store = stores.open(make_config(tmp_path))
    assert not store.last_exit_ok
    assert cq_units(store, TOPIC, 0) == before


# ---- shutdown and the abort file (DefaultMessageStoreShutDownTest) ---------------------------------

def test_normal_shutdown_removes_abort(tmp_path: Path, stores: Stores) -> None:
    store = stores.open(make_config(tmp_path))
    assert (tmp_path / "abort").exists()
    put_ok(store, make_msg("x"))
    wait_dispatched(store)
    store.shutdown()
    assert store.shutdown_normally is True
    assert not (tmp_path / "abort").exists()
    assert stores.open(make_config(tmp_path)).last_exit_ok


def test_shutdown_keeps_abort_when_dispatch_is_behind(tmp_path: Path, stores: Stores,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    store = stores.open(make_config(tmp_path))
    for i in range(3):
        put_ok(store, make_msg(f"s{i}"))
    wait_dispatched(store)
    monkeypatch.setattr(store, "dispatch_behind_bytes", lambda: 100)
    store.shutdown()
    assert store.shutdown_normally is False
    assert (tmp_path / "abort").exists()

    again = stores.open(make_config(tmp_path))
    assert not again.last_exit_ok
    assert again.get_message("G", TOPIC, 0, 0, 32).message_count == 3


def test_shutdown_with_reput_stopped_keeps_abort_and_recovery_dispatches(tmp_path: Path, stores: Stores) -> None:
    store = stores.open(make_config(tmp_path))
    put_ok(store, make_msg("dispatched"))
    wait_dispatched(store)
    store.reput.shutdown()
    put_ok(store, make_msg("not yet dispatched"))
    assert store.dispatch_behind_bytes() > 0
    store.shutdown()
    assert store.shutdown_normally is False
    assert (tmp_path / "abort").exists()

    again = stores.open(make_config(tmp_path))
    assert not again.last_exit_ok
    res = again.get_message("G", TOPIC, 0, 0, 32)
    assert [rec.decode_message(m).body for m in res.messages] == [b"dispatched", b"not yet dispatched"]


def test_normal_restart_dispatches_what_was_not_dispatched_before_serving(tmp_path: Path, stores: Stores) -> None:
    """start() sets the reput offset from the consume queues and waits for dispatch to catch up."""
    store = stores.open(make_config(tmp_path))
    put_ok(store, make_msg("dispatched"))
    wait_dispatched(store)
    store.reput.shutdown()
    for i in range(5):
        put_ok(store, make_msg(f"late-{i}", queue_id=1))
    store.shutdown()
    (tmp_path / "abort").unlink()  # as if the exit had been clean

    again = stores.open(make_config(tmp_path))
    assert again.last_exit_ok
    assert again.dispatch_behind_bytes() == 0
    res = again.get_message("G", TOPIC, 1, 0, 32)
    assert [rec.decode_message(m).body for m in res.messages] == [f"late-{i}".encode() for i in range(5)]


def test_abnormal_recovery_starts_at_the_checkpoint_offset(tmp_path: Path, stores: Stores) -> None:
    """Our checkpoint extension: re-dispatch begins at the recorded durable offset, not at a file start."""
    store = stores.open(make_config(tmp_path, mapped_file_size_commit_log=64 * 1024))
    put_recover_msgs(store, 30)
    durable = store.get_max_phy_offset()
    store.shutdown()
    (tmp_path / "abort").touch()  # a crash right after everything was flushed and checkpointed

    redispatched: list[int] = []
    store = new_store(make_config(tmp_path, mapped_file_size_commit_log=64 * 1024))
    store.dispatch_listeners.append(lambda req: redispatched.append(req.commit_log_offset))
    assert store.checkpoint.get_recover_offset() == durable
    assert store.load()
    store.start()
    try:
        assert not store.last_exit_ok
        assert redispatched == []  # nothing past the checkpoint: nothing re-dispatched
        assert store.get_max_offset_in_queue(RECOVER_TOPIC, 0) == 30
    finally:
        store.shutdown()

    # The 4.9.8 rule re-dispatches the whole file that holds the checkpoint's time.
    (tmp_path / "abort").touch()
    redispatched.clear()
    store = new_store(make_config(tmp_path, mapped_file_size_commit_log=64 * 1024,
                                  recover_from_checkpoint_offset=False))
    store.dispatch_listeners.append(lambda req: redispatched.append(req.commit_log_offset))
    assert store.load()
    store.start()
    try:
        assert len(redispatched) == 30
        assert store.get_max_offset_in_queue(RECOVER_TOPIC, 0) == 30
    finally:
        store.shutdown()
