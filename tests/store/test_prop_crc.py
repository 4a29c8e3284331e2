"""The whole-record CRC (5.x enabledAppendPropCRC / forceVerifyPropCRC; AppendPropCRCTest re-expressed).

The checks here read the stored bytes the way RocketMQ's checker does, not through record.py's own
helpers: the last 20 bytes are ``__CRC32#`` \\x01, ten digits, \\x02, and the digits, read from the last
one to the first (CommitLog.checkMessageAndReturnSize), give ``crc32(record[:-20]) & 0x7FFFFFFF``.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from reference_broker.common import message as mc
from reference_broker.common import record as rec
from reference_broker.common.record import MessageExtBrokerInner
from reference_broker.store.checkpoint import StoreCheckpoint
from reference_broker.store.commit_log import PROP_CRC_SINCE_FILE, CommitLog, MessageExtBatch
from reference_broker.store.config import ROCKETMQ_KEYS, MessageStoreConfig, coerce_value
from reference_broker.store.status import AppendMessageResult, PutMessageStatus
from tests.compiled_paths import put_path  # noqa: F401 - the fixture, used by pytestmark

pytestmark = pytest.mark.usefixtures("put_path")  # pure and compiled (tests/compiled_paths.py)

FILE = 64 * 1024


def logs_fixture() -> Iterator[list[CommitLog]]:
    """Body of each module's ``logs`` fixture: the logs ``open_log`` opens, shut down afterwards."""
    made: list[CommitLog] = []
    yield made
    for cl in made:
        cl.shutdown()
        cl.checkpoint.shutdown()


@pytest.fixture
def logs() -> Iterator[list[CommitLog]]:
    yield from logs_fixture()


def open_log(logs: list[CommitLog], root: Path, load: bool = False, **cfg: object) -> CommitLog:
    config = MessageStoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=FILE, **cfg)  # type: ignore[arg-type]
    cl = CommitLog(config, StoreCheckpoint(root / "checkpoint"))
    if load:
        assert cl.load()
    logs.append(cl)
    return cl


def put(cl: CommitLog, m: MessageExtBrokerInner) -> AppendMessageResult:
    r = cl.put_message(m)
    assert r.status is PutMessageStatus.PUT_OK and r.append is not None, r
    return r.append


def java_checker_crc(raw: bytes) -> int | None:
    """The CRC a record's tail claims, parsed as checkMessageAndReturnSize does; None when it has none."""
    tail = raw[-rec.CRC32_RESERVED_LEN:]
    if tail[:9] != b"__CRC32#\x01" or tail[-1:] != b"\x02":
        return None
    expected = 0
    for ch in reversed(tail[9:19]):  # the last digit is the most significant
        expected = expected * 10 + (ch - ord("0"))
    return expected


def assert_whole_record_crc(raw: bytes) -> None:
    assert java_checker_crc(raw) == zlib.crc32(raw[:-20]) & 0x7FFFFFFF


def test_defaults_and_config_keys() -> None:
    cfg = MessageStoreConfig()
    assert cfg.enabled_append_prop_crc and cfg.force_verify_prop_crc and cfg.verify_prop_crc()
    for key in ("enabledAppendPropCRC", "forceVerifyPropCRC"):  # RocketMQ 5's broker.conf keys
        assert coerce_value(ROCKETMQ_KEYS[key], "false") is False
    # Verifying a CRC that is not written would truncate every record: verification follows the append.
    assert not MessageStoreConfig(enabled_append_prop_crc=False).verify_prop_crc()
    assert not MessageStoreConfig(force_verify_prop_crc=False).verify_prop_crc()


def test_digits_are_written_least_significant_first() -> None:
    assert rec.crc_digits(1234) == b"4321000000"
    assert rec.crc_digits(-1) == b"7463847412"  # masked to 31 bits, as createCrc32's input is
    r = rec.prepare_record(b"T", b"any record bytes", rec.reserve_prop_crc(b"KEYS\x01k"), 0, 0, 0, 1,
                           rec.host_bytes("127.0.0.1"), 2, rec.host_bytes("127.0.0.1"), 3)
    buf = bytearray(r.size)
    rec.write_record(buf, 0, r, 5, 6, 7, True)  # the CRC covers TOTALSIZE, written after it is computed
    crc = zlib.crc32(bytes(buf[:-20])) & 0x7FFFFFFF
    assert bytes(buf[-11:-1]) == str(crc)[::-1].ljust(10, "0").encode()
    assert rec.prop_crc_ok(bytes(buf), 0, len(buf))
    assert_whole_record_crc(bytes(buf))


def test_a_stored_record_ends_with_its_crc_and_keeps_the_users_properties(logs: list[CommitLog],
                                                                          tmp_path: Path) -> None:
    cl = open_log(logs, tmp_path)
    props = {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "7F0000010000"}
    for m in (MessageExtBrokerInner("T", b"body", properties=dict(props)), MessageExtBrokerInner("T", b"")):
        a = put(cl, m)
        raw = cl.read_bytes(a.wrote_offset, a.wrote_bytes)
        assert raw is not None
        assert_whole_record_crc(raw)
        decoded = rec.decode_message(raw, check_crc=True, verify_prop_crc=True)
        crc_value = decoded.properties.pop(mc.PROPERTY_CRC32)
        assert len(crc_value) == 10 and crc_value.isdigit()
        assert decoded.properties == m.properties
        assert a.wrote_bytes == rec.record_length(len(m.body), 1, rec.stored_props_length(m.encoded_properties()))


def test_an_old_crc_property_is_replaced_not_repeated(logs: list[CommitLog], tmp_path: Path) -> None:
    """A message re-put from a stored record (retry, delay delivery) or sent with one carries a stale CRC."""
    cl = open_log(logs, tmp_path)
    stale = {"TAGS": "a", mc.PROPERTY_CRC32: "1234567890", "KEYS": "k"}
    for m in (MessageExtBrokerInner("T", b"x", properties=dict(stale)),
              MessageExtBrokerInner("T", b"x", properties_bytes=b"TAGS\x01a\x02__CRC32#\x011234567890\x02KEYS\x01k")):
        a = put(cl, m)
        raw = cl.read_bytes(a.wrote_offset, a.wrote_bytes)
        assert raw is not None and raw.count(b"__CRC32#") == 1
        assert_whole_record_crc(raw)
        assert rec.decode_message(raw).properties.keys() == {"TAGS", "KEYS", mc.PROPERTY_CRC32}


def test_without_append_a_stale_crc_property_is_dropped(logs: list[CommitLog], tmp_path: Path) -> None:
    """CommitLog.asyncPutMessage deletes PROPERTY_CRC32 when enabledAppendPropCRC is off."""
    cl = open_log(logs, tmp_path, enabled_append_prop_crc=False)
    a = put(cl, MessageExtBrokerInner("T", b"x", properties={"TAGS": "a", mc.PROPERTY_CRC32: "1234567890"}))
    raw = cl.read_bytes(a.wrote_offset, a.wrote_bytes)
    assert raw is not None and b"__CRC32#" not in raw
    assert rec.decode_message(raw).properties == {"TAGS": "a"}


def test_every_record_of_a_batch_carries_its_own_crc(logs: list[CommitLog], tmp_path: Path) -> None:
    cl = open_log(logs, tmp_path)
    batch = MessageExtBatch("B", 1, [MessageExtBrokerInner("B", f"m{i}".encode(), properties={"KEYS": f"k{i}"})
                                     for i in range(4)])
    r = cl.put_messages(batch)
    assert r.status is PutMessageStatus.PUT_OK and r.append is not None
    raw = cl.read_bytes(r.append.wrote_offset, r.append.wrote_bytes)
    assert raw is not None
    msgs = rec.decode_messages(raw)
    assert [m.keys for m in msgs] == ["k0", "k1", "k2", "k3"]
    pos = 0
    for m in msgs:
        assert_whole_record_crc(raw[pos : pos + m.store_size])
        pos += m.store_size


def test_the_properties_limit_counts_the_reserved_tail(logs: list[CommitLog], tmp_path: Path) -> None:
    """Short.MAX_VALUE bounds the properties as stored: 32,747 bytes fit alone but not with the 21 more."""
    n = rec.MAX_PROPERTIES_LENGTH - 2 - 20  # "K" \x01 value = n + 2 bytes
    big = {"K": "v" * n}
    assert len(mc.properties_to_bytes(big)) == 32_747
    on = open_log(logs, tmp_path / "on")
    assert on.put_message(MessageExtBrokerInner("T", b"", properties=dict(big))).status is \
        PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
    assert on.get_max_offset() == 0
    off = open_log(logs, tmp_path / "off", enabled_append_prop_crc=False)
    put(off, MessageExtBrokerInner("T", b"", properties=dict(big)))


def written_log(logs: list[CommitLog], root: Path, n: int = 6, **cfg: object) -> list[AppendMessageResult]:
    cl = open_log(logs, root, **cfg)
    out = [put(cl, MessageExtBrokerInner("Topic", f"body-{i}".encode(), properties={"KEYS": f"k{i}", "TAGS": "t"}))
           for i in range(n)]
    cl.shutdown()
    return out


def tear_tail(root: Path, result: AppendMessageResult, n: int = 3) -> None:
    """The record's last ``n`` bytes read back as zeros (a torn page)."""
    path = root / "commitlog" / f"{result.wrote_offset - result.wrote_offset % FILE:020d}"
    data = bytearray(path.read_bytes())
    end = result.wrote_offset % FILE + result.wrote_bytes
    data[end - n : end] = bytes(n)
    path.write_bytes(data)


def test_turning_the_crc_on_keeps_an_older_log_and_checks_what_follows(logs: list[CommitLog],
                                                                        tmp_path: Path) -> None:
    """Records from before the CRC was on are checked by BODYCRC (never truncated for lacking it); from the
    first record with the CRC on (``propCrcSince``), a record must carry it. RocketMQ 5 instead accepts any
    record without it, and so a tear that zeroes a record's end."""
    old = written_log(logs, tmp_path, enabled_append_prop_crc=False)
    old_end = old[-1].wrote_offset + old[-1].wrote_bytes
    cl = open_log(logs, tmp_path, load=True)
    assert cl.prop_crc_since is None and not (tmp_path / PROP_CRC_SINCE_FILE).exists()
    assert cl.recover_normally(-1, lambda _o: None) == old_end  # nothing truncated
    new = [put(cl, MessageExtBrokerInner("Topic", f"new-{i}".encode(), properties={"KEYS": f"n{i}"}))
           for i in range(2)]
    assert new[0].wrote_offset == old_end
    assert (tmp_path / PROP_CRC_SINCE_FILE).read_text().strip() == str(old_end) == str(cl.prop_crc_since)
    cl.shutdown()
    tear_tail(tmp_path, new[-1])
    cl = open_log(logs, tmp_path, load=True)
    assert cl.prop_crc_since == old_end
    assert cl.recover_normally(-1, lambda _o: None) == new[-1].wrote_offset  # the torn new record goes


def test_a_start_with_the_append_off_forgets_the_marker(logs: list[CommitLog], tmp_path: Path) -> None:
    results = written_log(logs, tmp_path)
    assert (tmp_path / PROP_CRC_SINCE_FILE).read_text().strip() == "0"
    off = open_log(logs, tmp_path, load=True, enabled_append_prop_crc=False)
    assert not (tmp_path / PROP_CRC_SINCE_FILE).exists()
    end = results[-1].wrote_offset + results[-1].wrote_bytes
    assert off.recover_normally(-1, lambda _o: None) == end
    later = put(off, MessageExtBrokerInner("Topic", b"no crc"))
    off.shutdown()
    on = open_log(logs, tmp_path, load=True)  # the record without the CRC lies before any new marker
    assert on.recover_normally(-1, lambda _o: None) == later.wrote_offset + later.wrote_bytes


@pytest.mark.parametrize("marker", ["garbage", "17"])
def test_a_bad_marker_never_truncates_good_records(logs: list[CommitLog], tmp_path: Path, marker: str) -> None:
    """Unreadable: as if absent (no record needs the CRC). Off a record boundary (17 lies inside the first
    record): the record across it is checked the old way, the rest strictly."""
    results = written_log(logs, tmp_path)
    (tmp_path / PROP_CRC_SINCE_FILE).write_text(marker)
    cl = open_log(logs, tmp_path, load=True)
    end = results[-1].wrote_offset + results[-1].wrote_bytes
    assert cl.recover_normally(-1, lambda _o: None) == end


def test_append_without_force_verify_reads_an_older_log(logs: list[CommitLog], tmp_path: Path) -> None:
    """The way to turn the CRC on for a log written without it: append first, verify once the old files
    are past the recovery window."""
    results = written_log(logs, tmp_path, enabled_append_prop_crc=False)
    cl = open_log(logs, tmp_path, load=True, force_verify_prop_crc=False)
    end = results[-1].wrote_offset + results[-1].wrote_bytes
    assert cl.recover_normally(-1, lambda _o: None) == end
    a = put(cl, MessageExtBrokerInner("Topic", b"new", properties={"KEYS": "new"}))
    assert a.wrote_offset == end
    raw = cl.read_bytes(a.wrote_offset, a.wrote_bytes)
    assert raw is not None
    assert_whole_record_crc(raw)


@pytest.mark.parametrize("offset_from_end", [1, 5, 11, 15, 20, 21])
def test_recovery_truncates_at_a_record_whose_tail_was_zeroed(logs: list[CommitLog], tmp_path: Path,
                                                               offset_from_end: int) -> None:
    """A torn page: the last record's final bytes (digits, the CRC's name, the user's properties) read as
    zeros. Every byte of that record is covered; the records before it stay."""
    results = written_log(logs, tmp_path)
    last = results[-1]
    path = tmp_path / "commitlog" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    end = last.wrote_offset + last.wrote_bytes
    data[end - offset_from_end : end] = bytes(offset_from_end)
    path.write_bytes(data)
    cl = open_log(logs, tmp_path, load=True)
    truncated: list[int] = []
    assert cl.recover_normally(end, truncated.append) == last.wrote_offset == cl.get_max_offset()
    assert truncated == [last.wrote_offset]

