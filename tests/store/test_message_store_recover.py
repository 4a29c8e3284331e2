"""MessageStore recovery and shutdown: DefaultMessageStoreTest.testRecover and DefaultMessageStoreShutDownTest."""

from __future__ import annotations

import shutil
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from reference_broker.common import record as rec
from reference_broker.store.message_store import MessageStore
from reference_broker.store.quarantine import list_quarantine
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
    # checkpoint calls durable; the checkpoint-offset rule starts after it (see the tests below).
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


# ---- the same damage and abort file, default configuration (recoverFromCheckpointOffset) -----------------
# README "Deliberate differences": abnormal recovery starts at the checkpoint's recover offset (bytes 40/48 of
# its page: the commit-log offset known flushed, the offset below which consume-queue units are flushed) when
# it is a record boundary; "the offset rule trusts flushed data". Damage at or past that offset is scanned
# and truncated as in 4.9.8; damage before it, in data the checkpoint calls flushed, is not scanned and stays.

def set_checkpoint_commit_log_offset(root: Path, offset: int) -> None:
    """The checkpoint's flushed commit-log offset (byte 40), as if no flush past ``offset`` had been noted."""
    with open(root / "checkpoint", "r+b") as f:
        f.seek(40)
        f.write(struct.pack(">q", offset))


def checkpoint_offsets(root: Path) -> tuple[int, int]:
    """(flushed commit-log offset, consume-queue flushed offset): bytes 40 and 48 of the checkpoint."""
    physic, logics = struct.unpack_from(">qq", (root / "checkpoint").read_bytes(), 40)
    return physic, logics


def record_on_disk(root: Path, file_size: int, offset: int, size: int) -> bytes:
    data = (root / "commitlog" / f"{offset - offset % file_size:020d}").read_bytes()
    return data[offset % file_size : offset % file_size + size]


def open_recording_dispatch(stores: Stores, root: Path) -> tuple[MessageStore, list[int]]:
    """Open with the default configuration; the commit-log offset of every record dispatched is recorded."""
    cfg = make_config(root)
    assert cfg.recover_from_checkpoint_offset  # the default
    store = stores.new(cfg)
    dispatched: list[int] = []
    store.add_dispatch_hook(lambda reqs: dispatched.extend(r.commit_log_offset for r in reqs), during_recovery=True)
    assert store.load()
    store.start()
    return store, dispatched


def test_recover_damaged_last_message_with_abort_default_config_damage_before_checkpoint(
        tmp_path: Path, stores: Stores) -> None:
    """testRecover's step 3 with recoverFromCheckpointOffset on (the default) as it stands: the damaged record
    lies before the checkpoint's flushed offset (a clean shutdown flushed it), so it is trusted and kept."""
    store = stores.open(make_config(tmp_path))
    put_recover_msgs(store, 30)
    second_last_phy, second_last_cq = damage_last_message(store)
    file_size = store.config.mapped_file_size_commit_log
    end, cq_flushed = checkpoint_offsets(tmp_path)
    assert end == cq_flushed > second_last_phy  # the damaged record [second_last_phy, end) is before the offset
    damaged = record_on_disk(tmp_path, file_size, second_last_phy, end - second_last_phy)
    (tmp_path / "abort").touch()

    store, dispatched = open_recording_dispatch(stores, tmp_path)
    assert not store.last_exit_ok
    assert dispatched == []  # recovery started at the end of the flushed data: nothing re-scanned
    assert store.get_max_phy_offset() == end  # not truncated
    assert store.get_max_offset_in_queue(RECOVER_TOPIC, 0) == second_last_cq + 1
    # Its consume-queue unit stays, but the damaged bytes (they do not decode) are never served: the pull
    # skips them like a missing message and moves past (record_check.py; 4.9.8 serves them as stored).
    with pytest.raises(rec.RecordError):
        rec.decode_message(damaged)
    res = store.get_message("G", RECOVER_TOPIC, 0, second_last_cq, 32)
    assert res.status is GetMessageStatus.MESSAGE_WAS_REMOVING and res.messages == []
    assert res.next_begin_offset == second_last_cq + 1
    assert store.look_message_by_offset(second_last_phy) is None
    # New records follow it.
    nxt = put_ok(store, make_msg("next", topic=RECOVER_TOPIC))
    assert nxt.append is not None
    assert (nxt.append.wrote_offset, nxt.append.logics_offset) == (end, second_last_cq + 1)


@pytest.mark.parametrize("checkpoint_at", ["second_last_record", "damaged_record"])
def test_recover_damaged_last_message_with_abort_default_config_damage_past_checkpoint(
        tmp_path: Path, stores: Stores, checkpoint_at: str) -> None:
    """The same damage past the checkpoint's flushed offset is truncated, and writes go on, as in 4.9.8.

    ``second_last_record``: the offset is a record boundary before the damage; recovery re-scans from there.
    ``damaged_record``: the offset is where the damaged record starts, which is not a valid record, so
    4.9.8's time rule is used instead (re-dispatch from the log's start: every record is within the
    checkpoint's last 3 s)."""
    store = stores.open(make_config(tmp_path))
    results = put_recover_msgs(store, 30)
    record_size = results[0].append.wrote_bytes if results[0].append else 0
    second_last_phy, second_last_cq = damage_last_message(store)
    second_last_start = second_last_phy - record_size  # both records are in the same file
    flushed_offset = second_last_start if checkpoint_at == "second_last_record" else second_last_phy
    set_checkpoint_commit_log_offset(tmp_path, flushed_offset)
    (tmp_path / "abort").touch()

    store, dispatched = open_recording_dispatch(stores, tmp_path)
    assert not store.last_exit_ok
    assert store.get_max_phy_offset() == second_last_phy
    assert store.get_max_offset_in_queue(RECOVER_TOPIC, 0) == second_last_cq
    if checkpoint_at == "second_last_record":
        assert dispatched == [second_last_start]  # from the checkpoint's offset to the damage
    else:
        assert dispatched[0] == store.get_min_phy_offset() == 0 and dispatched[-1] == second_last_start
    assert checkpoint_offsets(tmp_path)[0] <= second_last_phy

    again = put_ok(store, make_msg("written again", topic=RECOVER_TOPIC))
    assert again.append is not None
    assert (again.append.wrote_offset, again.append.logics_offset) == (second_last_phy, second_last_cq)
    wait_dispatched(store)
    res = store.get_message("G", RECOVER_TOPIC, 0, second_last_cq - 1, 2)
    assert [rec.decode_message(m, check_crc=True).body for m in res.messages] == [
        f"r{second_last_cq - 1:04d}".encode(), b"written again"]


# ---- normal recovery scans the last three files (CommitLog.recoverNormally) ------------------------------

def multi_file_log(stores: Stores, root: Path) -> tuple[list[PutMessageResult], int]:
    """A cleanly shut-down store whose 40 messages fill 5 or more 1 KiB commit-log files; (put results, files)."""
    store = stores.open(make_config(root))
    results = put_recover_msgs(store, 40)
    files = len(store.commit_log.mapped_file_queue.mapped_files)
    assert files >= 5
    store.shutdown()
    assert store.shutdown_normally
    return results, files


def damage_record(root: Path, result: PutMessageResult) -> bytes:
    """damageCommitlog on this record; returns the whole damaged file."""
    assert result.append is not None
    damage_commit_log(root, 1024, result.append.wrote_offset)
    return (root / "commitlog" / f"{result.append.wrote_offset - result.append.wrote_offset % 1024:020d}").read_bytes()


def test_normal_recovery_leaves_damage_before_the_last_three_files(tmp_path: Path, stores: Stores) -> None:
    """recoverNormally starts at file size - 3: a damaged record in file 0 is never scanned and stays."""
    results, files = multi_file_log(stores, tmp_path)
    in_file_0 = [r for r in results if r.append and r.append.wrote_offset < 1024]
    victim = in_file_0[2]
    damaged_file = damage_record(tmp_path, victim)
    end = results[-1].append.wrote_offset + results[-1].append.wrote_bytes if results[-1].append else 0

    store = stores.open(make_config(tmp_path))
    assert store.last_exit_ok
    assert len(store.commit_log.mapped_file_queue.mapped_files) == files
    assert store.get_max_phy_offset() == end
    assert store.get_max_offset_in_queue(RECOVER_TOPIC, 0) == 40
    assert (tmp_path / "commitlog" / f"{0:020d}").read_bytes() == damaged_file  # untouched
    assert victim.append is not None
    res = store.get_message("G", RECOVER_TOPIC, 0, victim.append.logics_offset, 1)
    # Not served (4.9.8 serves it as stored): the pull skips it and gives the next record.
    assert res.queue_offsets == [victim.append.logics_offset + 1]
    assert [rec.decode_message(m, check_crc=True).body for m in res.messages] == [
        f"r{victim.append.logics_offset + 1:04d}".encode()]
    res = store.get_message("G", RECOVER_TOPIC, 0, 39, 1)
    assert [rec.decode_message(m, check_crc=True).body for m in res.messages] == [b"r0039"]


def test_normal_recovery_truncates_damage_in_the_third_file_from_the_end(tmp_path: Path, stores: Stores) -> None:
    results, files = multi_file_log(stores, tmp_path)
    first_scanned = (files - 3) * 1024
    in_file = [r for r in results if r.append and first_scanned <= r.append.wrote_offset < first_scanned + 1024]
    victim = in_file[1]  # a record in the middle of the file
    assert victim.append is not None
    damage_record(tmp_path, victim)

    store = stores.open(make_config(tmp_path))
    assert store.last_exit_ok
    assert store.get_max_phy_offset() == victim.append.wrote_offset
    assert store.get_max_offset_in_queue(RECOVER_TOPIC, 0) == victim.append.logics_offset
    assert len(store.commit_log.mapped_file_queue.mapped_files) == files - 2  # the later files are gone
    # ... after their bytes were copied into the quarantine (quarantine.py): the damaged record's file from
    # the record on, and the two later files.
    cut = list_quarantine(tmp_path)
    assert [e.offset for e in sorted(cut, key=lambda e: e.offset)] == [
        victim.append.wrote_offset, (files - 2) * 1024, (files - 1) * 1024]
    assert sum(e.intact_records for e in cut) >= 40 - victim.append.logics_offset - 1
    assert sorted(p.name for p in (tmp_path / "commitlog").iterdir()) == [f"{i * 1024:020d}" for i in range(files - 2)]
    kept = store.get_message("G", RECOVER_TOPIC, 0, victim.append.logics_offset - 1, 32)
    assert [rec.decode_message(m, check_crc=True).body for m in kept.messages] == [
        f"r{victim.append.logics_offset - 1:04d}".encode()]


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
    store.add_dispatch_hook(lambda reqs: redispatched.extend(r.commit_log_offset for r in reqs), during_recovery=True)
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
    store.add_dispatch_hook(lambda reqs: redispatched.extend(r.commit_log_offset for r in reqs), during_recovery=True)
    assert store.load()
    store.start()
    try:
        assert len(redispatched) == 30
        assert store.get_max_offset_in_queue(RECOVER_TOPIC, 0) == 30
    finally:
        store.shutdown()
