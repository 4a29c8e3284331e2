"""Quarantine: recovery keeps what it cuts from the commit log, and a record whose CRC fails is never served.

Store-level, on real files: a cleanly stopped (or "crashed": abort file left) store whose commit log gets 64
random bytes in the middle of a file, restarted.
"""

from __future__ import annotations

import json
import logging
import random
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from reference_broker.common import quarantine_names as qn
from reference_broker.common import record as rec
from reference_broker.store.config import MessageStoreConfig
from reference_broker.store.message_store import MessageStore
from reference_broker.store.quarantine import QuarantineError, count_intact, list_quarantine
from reference_broker.store.record_check import record_intact
from reference_broker.store.status import GetMessageStatus
from tests.store.store_helpers import Stores, make_config, make_msg, put_ok, stores_fixture, wait_dispatched

TOPIC = "QuarantineTopic"
FILE_SIZE = 64 * 1024
N = 800  # ~130 KB of records: two full 64 KiB files and part of a third
DAMAGE_LEN = 64


@pytest.fixture
def stores() -> Iterator[Stores]:
    yield from stores_fixture()


@dataclass(frozen=True)
class Put:
    key: str
    offset: int
    size: int
    queue_offset: int


def config(root: Path, **kw: object) -> MessageStoreConfig:
    return make_config(root, mapped_file_size_commit_log=FILE_SIZE, mapped_file_size_consume_queue=20 * 1024,
                       max_hash_slot_num=1000, max_index_num=4000, **kw)


def fill(stores: Stores, root: Path, **kw: object) -> tuple[list[Put], int]:
    """A cleanly stopped store holding N keyed messages in one queue; (puts, end of data)."""
    store = stores.open(config(root, **kw))
    puts = []
    for i in range(N):
        key = f"k{i:05d}"
        r = put_ok(store, make_msg(f"body-{i:05d}-" + "x" * 60, topic=TOPIC, keys=key))
        assert r.append is not None
        puts.append(Put(key, r.append.wrote_offset, r.append.wrote_bytes, r.append.logics_offset))
    wait_dispatched(store)
    end = store.get_max_phy_offset()
    store.shutdown()
    assert store.shutdown_normally
    return puts, end


def damage_middle(root: Path, file_index: int = 1) -> tuple[int, int]:
    """64 random bytes in the middle of commit-log file ``file_index``; (first, end) absolute offsets."""
    path = root / "commitlog" / f"{file_index * FILE_SIZE:020d}"
    pos = FILE_SIZE // 2
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(random.Random(64).randbytes(DAMAGE_LEN))
    return file_index * FILE_SIZE + pos, file_index * FILE_SIZE + pos + DAMAGE_LEN


def snapshot(root: Path) -> dict[int, bytes]:
    return {int(p.name): p.read_bytes() for p in (root / "commitlog").iterdir()}


def log_bytes(snap: dict[int, bytes], offset: int, n: int) -> bytes:
    start = offset - offset % FILE_SIZE
    pos = offset - start
    return snap[start][pos:pos + n]


def hit(puts: list[Put], first: int, end: int) -> list[Put]:
    return [p for p in puts if p.offset < end and p.offset + p.size > first]


def expected_cuts(snap: dict[int, bytes], cut: int) -> list[tuple[int, int]]:
    """(offset, bytes) of every non-zero stretch recovery removes when it cuts at ``cut``: in each file from
    the cut (or its start) to its last non-zero byte."""
    out = []
    for start in sorted(snap):
        if start + FILE_SIZE <= cut:
            continue
        lo = max(0, cut - start)
        n = len(snap[start][lo:].rstrip(b"\x00"))
        if n:
            out.append((start + lo, n))
    return out


def check_quarantine(root: Path, snap: dict[int, bytes], puts: list[Put], first_bad: Put) -> None:
    """The quarantine holds, byte for byte, every non-zero byte from the damaged record on, and counts the
    intact records in it (those wholly after the damage)."""
    entries = sorted(list_quarantine(root), key=lambda e: e.offset)
    assert [(e.offset, e.bytes) for e in entries] == expected_cuts(snap, first_bad.offset)
    for e in entries:
        data = (root / qn.QUARANTINE_DIR / (e.name + qn.BIN_SUFFIX)).read_bytes()
        assert data == log_bytes(snap, e.offset, e.bytes)
        assert e.name.startswith(f"commitlog-{e.offset - e.offset % FILE_SIZE:020d}-{e.offset:020d}-")
    damaged_end = first_bad.offset + DAMAGE_LEN + first_bad.size
    intact_after = [p for p in puts if p.offset >= damaged_end]
    total = sum(e.intact_records for e in entries)
    assert len(intact_after) <= total <= len([p for p in puts if p.offset > first_bad.offset])
    assert len(intact_after) > 0


def damaged_puts(puts: list[Put], first: int, end: int) -> list[Put]:
    bad = hit(puts, first, end)
    assert bad
    return bad


# ---- recovery ---------------------------------------------------------------------------------------------

def test_normal_recovery_quarantines_the_intact_records_it_cuts(tmp_path: Path, stores: Stores,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    puts, _end = fill(stores, tmp_path)
    first, dend = damage_middle(tmp_path)
    bad = damaged_puts(puts, first, dend)
    snap = snapshot(tmp_path)

    with caplog.at_level(logging.ERROR, logger="reference_broker.store.quarantine"):
        store = stores.open(config(tmp_path))
    assert store.last_exit_ok
    assert store.get_max_phy_offset() == bad[0].offset  # cut at the damaged record, as RocketMQ does
    check_quarantine(tmp_path, snap, puts, bad[0])
    errors = [r for r in caplog.records if r.levelno == logging.ERROR and "recovery cut" in r.getMessage()]
    assert errors and "intact records" in errors[0].getMessage()
    info = store.get_runtime_info()
    assert int(info["quarantinedFiles"]) == len(list_quarantine(tmp_path)) >= 2
    assert int(info["quarantinedBytes"]) == sum(n for _, n in expected_cuts(snap, bad[0].offset))
    assert int(info["quarantinedIntactRecords"]) > 0


def test_abnormal_recovery_quarantines_the_intact_records_it_cuts(tmp_path: Path, stores: Stores,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    """With the abort file left and no checkpoint, abnormal recovery scans from the first file and cuts at
    the damage: the cut bytes are quarantined the same way."""
    puts, _end = fill(stores, tmp_path)
    first, dend = damage_middle(tmp_path, file_index=0)
    bad = damaged_puts(puts, first, dend)
    (tmp_path / "checkpoint").unlink()
    (tmp_path / "abort").touch()
    snap = snapshot(tmp_path)

    with caplog.at_level(logging.ERROR, logger="reference_broker.store.quarantine"):
        store = stores.open(config(tmp_path))
    assert not store.last_exit_ok
    assert store.get_max_phy_offset() == bad[0].offset
    check_quarantine(tmp_path, snap, puts, bad[0])
    assert list_quarantine(tmp_path)[0].reason == "abnormal recovery"
    assert any("recovery cut" in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)


def test_an_all_zero_tail_is_not_quarantined(tmp_path: Path, stores: Stores) -> None:
    _puts, end = fill(stores, tmp_path)
    store = stores.open(config(tmp_path))
    assert store.get_max_phy_offset() == end
    store.shutdown()
    (tmp_path / "abort").touch()
    store = stores.open(config(tmp_path))
    assert store.get_max_phy_offset() == end
    assert list_quarantine(tmp_path) == []
    assert not (tmp_path / qn.QUARANTINE_DIR).exists()


def test_a_failed_quarantine_refuses_to_cut(tmp_path: Path, stores: Stores) -> None:
    """The copy cannot be made (here: ``quarantine`` is a file, so the directory cannot be created): the
    store refuses to load and the commit log is left exactly as it was; once the obstacle is gone the next
    load quarantines and cuts."""
    puts, _end = fill(stores, tmp_path)
    first, dend = damage_middle(tmp_path)
    bad = damaged_puts(puts, first, dend)
    snap = snapshot(tmp_path)
    (tmp_path / qn.QUARANTINE_DIR).write_bytes(b"in the way")

    store = stores.new(config(tmp_path))
    with pytest.raises(QuarantineError, match="refuses to cut"):
        store.load()
    store.shutdown()
    assert snapshot(tmp_path) == snap  # nothing cut, nothing zeroed

    (tmp_path / qn.QUARANTINE_DIR).unlink()
    store = stores.open(config(tmp_path))
    assert store.get_max_phy_offset() == bad[0].offset
    check_quarantine(tmp_path, snap, puts, bad[0])


# ---- reads --------------------------------------------------------------------------------------------

def read_queue(store: MessageStore) -> tuple[list[bytes], list[int]]:
    """Every record a consumer pulling queue 0 from its start gets, and the next-begin offsets it moved to."""
    out: list[bytes] = []
    nexts: list[int] = []
    offset = store.get_min_offset_in_queue(TOPIC, 0)
    high = store.get_max_offset_in_queue(TOPIC, 0)
    while offset < high:
        res = store.get_message("G", TOPIC, 0, offset, 32)
        out += res.messages
        assert res.next_begin_offset > offset, res
        nexts.append(res.next_begin_offset)
        offset = res.next_begin_offset
    return out, nexts


def test_a_record_with_a_bad_crc_is_never_served(tmp_path: Path, stores: Stores) -> None:
    """Damage the abnormal recovery does not scan (it starts at the checkpoint's offset, past the damage):
    the damaged records stay in the log and their units in the queue, but no read hands them out. Pulls skip
    them and move on; lookups by offset, id and key find nothing; the runtime stats count them."""
    puts, end = fill(stores, tmp_path)
    first, dend = damage_middle(tmp_path)
    bad = damaged_puts(puts, first, dend)
    (tmp_path / "abort").touch()

    store = stores.open(config(tmp_path))
    assert not store.last_exit_ok
    assert store.get_max_phy_offset() == end  # not scanned, not cut
    assert list_quarantine(tmp_path) == []

    served, _ = read_queue(store)
    assert all(record_intact(r, False) for r in served)
    for r in served:
        rec.decode_message(r, check_crc=True)
    keys = [rec.decode_message(r).keys for r in served]
    assert keys == [p.key for p in puts if p not in bad]
    for p in bad:
        assert store.look_message_by_offset(p.offset) is None
        assert store.select_one_message_by_offset(p.offset, p.size) is None
    # A pull that starts at a damaged record skips it and serves the next intact one.
    res = store.get_message("G", TOPIC, 0, bad[0].queue_offset, 1)
    nxt = bad[-1].queue_offset + 1
    assert res.status is GetMessageStatus.FOUND and res.queue_offsets == [nxt]
    assert res.next_begin_offset == nxt + 1
    assert int(store.get_runtime_info()["badRecordsSkipped"]) >= len(bad)

    # The next clean restart scans the damage (recoverNormally) and cuts there: the records already served
    # from behind it are in the quarantine, byte for byte.
    snap = snapshot(tmp_path)
    store.shutdown()
    assert store.shutdown_normally
    store = stores.open(config(tmp_path))
    assert store.get_max_phy_offset() == bad[0].offset
    check_quarantine(tmp_path, snap, puts, bad[0])


def test_lookups_never_return_a_damaged_record(tmp_path: Path, stores: Stores) -> None:
    """Damage that reaches a running store's file after dispatch (its consume-queue and index entries are
    in place): lookups by offset, offsetMsgId and key find nothing for the damaged records, their intact
    neighbours are found, and a pull never hands one out."""
    fill(stores, tmp_path)
    store = stores.open(config(tmp_path))
    puts = []
    for i in range(300):
        key = f"live{i:05d}"
        r = put_ok(store, make_msg(f"live-{i:05d}-" + "y" * 60, topic=TOPIC, keys=key))
        assert r.append is not None
        puts.append(Put(key, r.append.wrote_offset, r.append.wrote_bytes, r.append.logics_offset))
    wait_dispatched(store)
    target = puts[150]
    first = target.offset + target.size // 2
    path = tmp_path / "commitlog" / f"{first - first % FILE_SIZE:020d}"
    with open(path, "r+b") as f:  # through the page cache: the store's mapping sees it at once
        f.seek(first % FILE_SIZE)
        f.write(random.Random(65).randbytes(DAMAGE_LEN))
    bad = damaged_puts(puts, first, first + DAMAGE_LEN)
    cl = store.commit_log
    for p in bad:
        assert store.look_message_by_offset(p.offset) is None
        assert store.look_message_by_offset(p.offset, p.size) is None
        assert store.select_one_message_by_offset(p.offset, p.size) is None
        assert store.look_message_by_msg_id(rec.create_message_id(cl.store_ip, cl.store_port, p.offset)) is None
        assert store.query_message(TOPIC, p.key, 32, 0, 2**62) == []
    ok = puts[bad[-1].queue_offset - puts[0].queue_offset + 1]
    assert [m.keys for m in store.query_message(TOPIC, ok.key, 32, 0, 2**62)] == [ok.key]
    assert store.look_message_by_offset(ok.offset) is not None
    served, _ = read_queue(store)
    assert all(record_intact(r, False) for r in served)
    assert {p.queue_offset for p in bad}.isdisjoint(rec.decode_message(r).queue_offset for r in served)
    assert len(served) == N + len(puts) - len(bad)


# ---- sans-IO --------------------------------------------------------------------------------------------

def test_count_intact_finds_records_after_damage(tmp_path: Path, stores: Stores) -> None:
    puts, _end = fill(stores, tmp_path)
    data = snapshot(tmp_path)[0][:FILE_SIZE // 2]
    assert count_intact(data, 0).records == len([p for p in puts if p.offset + p.size <= FILE_SIZE // 2])
    hurt = bytearray(data)
    hurt[100:164] = random.Random(1).randbytes(64)
    after = [p for p in puts if p.offset >= 164 and p.offset + p.size <= FILE_SIZE // 2]
    got = count_intact(bytes(hurt), 0)
    assert got.records == len(after) and got.first_offset == after[0].offset
    assert count_intact(bytes(hurt), 7).records == 0  # records at the wrong offset are not intact


def test_record_intact_checks_body_and_whole_record_crc(tmp_path: Path, stores: Stores) -> None:
    puts, _ = fill(stores, tmp_path)
    raw = log_bytes(snapshot(tmp_path), puts[3].offset, puts[3].size)
    assert record_intact(raw, True)
    for pos in (8, 40, 100, len(raw) - 25, len(raw) - 3):  # BODYCRC, born time, body, properties, CRC digits
        bad = bytearray(raw)
        bad[pos] ^= 0x40
        assert not record_intact(bytes(bad), False), pos
    assert not record_intact(raw[:-1], False)
    no_crc = rec.strip_prop_crc(raw)  # not a record any more: its length no longer matches
    assert not record_intact(no_crc, False)


# ---- the operator's view ----------------------------------------------------------------------------------

def test_admin_quarantine_list_shows_the_cuts(tmp_path: Path, stores: Stores) -> None:
    """``python -m reference_broker admin quarantineList -s <storePathRootDir>`` lists each cut (offline)."""
    fill(stores, tmp_path)
    damage_middle(tmp_path)
    stores.open(config(tmp_path))
    entries = list_quarantine(tmp_path)
    assert entries
    cmd = [sys.executable, "-m", "reference_broker", "admin", "quarantineList", "-s", str(tmp_path)]
    rows = json.loads(subprocess.run([*cmd, "--json"], check=True, capture_output=True, text=True).stdout)
    assert [(r["offset"], r["bytes"], r["intact_records"]) for r in rows] == [
        (e.offset, e.bytes, e.intact_records) for e in entries]
    assert all(Path(r["path"]).is_file() for r in rows)
    table = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    assert all(e.name in table for e in entries)
    empty = subprocess.run([*cmd[:-1], str(tmp_path / "nowhere")], check=True, capture_output=True, text=True)
    assert "no quarantined files" in empty.stdout
