"""The consume queue's extension (reference_broker/store/consume_queue_ext.py) and the SQL92 filter bits
(broker/consumer_filter.py's bit_map_calculator and consume_queue_filter): 4.9.8's unit format and addresses,
file rolling, recovery; a store with enableConsumeQueueExt keeps serving tags and delays; and with the bits
on, every pull returns exactly what it returns with them off (hypothesis over random properties and
selectors), while records a group's bits rule out are skipped without being read."""

from __future__ import annotations

import struct
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference_broker.broker.consumer_filter import (
    ConsumerFilterManager,
    bit_map_calculator,
    commit_log_filter,
    consume_queue_filter,
)
from reference_broker.common.java_hash import tags_hash_code as tags_string2tags_code
from reference_broker.store.consume_queue_ext import (
    MAX_ADDR,
    MIN_EXT_UNIT_SIZE,
    ConsumeQueueExt,
    CqExtUnit,
    decorate,
    encode_unit,
    is_ext_addr,
    undecorate,
)
from reference_broker.store.message_store import MessageStore
from reference_broker.store.status import GetMessageStatus
from tests.store.store_helpers import TOPIC, Stores, make_config, make_msg, put_ok, stores_fixture, wait_dispatched


@pytest.fixture
def stores() -> Iterator[Stores]:
    yield from stores_fixture()


def test_a_unit_is_4_9_8s_cq_ext_unit() -> None:
    unit = encode_unit(-123, 1_700_000_000_000, b"\x01\x02\x03")
    # size (short), tagsCode (long), msgStoreTime (long), bitMapSize (short), bit map: big-endian
    assert unit == struct.pack(">hqqh", 23, -123, 1_700_000_000_000, 3) + b"\x01\x02\x03"
    assert len(encode_unit(5, 6, None)) == MIN_EXT_UNIT_SIZE == 20


def test_addresses_are_below_every_tags_code() -> None:
    assert decorate(0) == -(1 << 63) and undecorate(decorate(12345)) == 12345
    assert is_ext_addr(decorate(0)) and is_ext_addr(MAX_ADDR)
    assert not is_ext_addr(-(1 << 31))  # the smallest tags hash (a Java int) is not an address
    assert not is_ext_addr(0) and not is_ext_addr(1_700_000_000_000)


def test_units_round_trip_roll_over_files_and_survive_a_reopen(tmp_path: Path) -> None:
    ext = ConsumeQueueExt("T", 0, tmp_path, 256)
    assert ext.load()
    addrs = [ext.put(i, 1000 + i, bytes([i]) * 14) for i in range(20)]  # 34-byte units, 7 per 256-byte file
    assert all(is_ext_addr(a) for a in addrs)
    assert [ext.get(a) for a in addrs] == [CqExtUnit(i, 1000 + i, bytes([i]) * 14) for i in range(20)]
    files = sorted(p.name for p in (tmp_path / "T" / "0").iterdir())
    assert files == ["00000000000000000000", "00000000000000000256", "00000000000000000512"]
    # a full file ends with size -1 where the next unit did not fit (fullFillToEnd)
    first = (tmp_path / "T" / "0" / files[0]).read_bytes()
    assert struct.unpack_from(">h", first, 7 * 34)[0] == -1
    assert undecorate(addrs[7]) == 256
    ext.shutdown()
    again = ConsumeQueueExt("T", 0, tmp_path, 256)
    assert again.load()
    again.recover()
    assert again.get(addrs[19]) == CqExtUnit(19, 1019, bytes([19]) * 14)
    assert again.get_max_address() == decorate(512 + 6 * 34)
    again.truncate_by_max_address(addrs[10])  # the consume queue's last unit points here
    assert again.get(addrs[10]) is not None and again.get(addrs[11]) is None
    assert again.get(decorate(1 << 40)) is None and again.get(17) is None
    again.shutdown()


def _open_ext_store(stores: Stores, root: Path) -> MessageStore:
    return stores.open(make_config(root, mapped_file_size_commit_log=1 << 20, enable_consume_queue_ext=True,
                                   mapped_file_size_consume_queue_ext=1 << 16))


def test_a_store_with_the_extension_points_units_at_ext_units_and_still_filters_tags(stores: Stores,
                                                                                    tmp_path: Path) -> None:
    store = _open_ext_store(stores, tmp_path)
    for i in range(10):
        put_ok(store, make_msg(b"m%d" % i, tags="A" if i % 2 else "B"))
    wait_dispatched(store)
    cq = store.find_consume_queue(TOPIC, 0)
    assert cq is not None and cq.ext is not None
    unit = cq.get_unit(3)
    assert unit is not None and is_ext_addr(unit[2])
    ext_unit = cq.get_ext(unit[2])
    assert ext_unit is not None and ext_unit.tags_code == tags_string2tags_code("A")
    assert ext_unit.filter_bit_map is None  # no bit-map calculator: no bit map
    assert abs(ext_unit.msg_store_time - time.time() * 1000) < 60_000
    code_a = tags_string2tags_code("A")
    r = store.get_message("G", TOPIC, 0, 0, 32, tags_filter=lambda c: c == code_a)
    assert r.status is GetMessageStatus.FOUND and r.queue_offsets == [1, 3, 5, 7, 9]
    assert (tmp_path / "consumequeue_ext" / TOPIC / "0").is_dir()


def test_the_extension_is_recovered_with_its_queue_after_a_restart(stores: Stores, tmp_path: Path) -> None:
    store = _open_ext_store(stores, tmp_path)
    for i in range(5):
        put_ok(store, make_msg(b"m%d" % i, tags="A"))
    wait_dispatched(store)
    store.shutdown()
    stores.opened.remove(store)
    store = _open_ext_store(stores, tmp_path)
    put_ok(store, make_msg(b"m5", tags="B"))
    wait_dispatched(store)
    code_b = tags_string2tags_code("B")
    r = store.get_message("G", TOPIC, 0, 0, 32, tags_filter=lambda c: c == code_b)
    assert r.queue_offsets == [5]
    cq = store.find_consume_queue(TOPIC, 0)
    assert cq is not None
    units = [cq.get_unit(i) for i in range(6)]
    exts = [cq.get_ext(u[2]) for u in units if u is not None]
    assert [e.tags_code if e else None for e in exts] == [tags_string2tags_code("A")] * 5 + [code_b]


# ---- the filter bits -----------------------------------------------------------------------------------------

def _bits_store(stores: Stores, root: Path, manager: ConsumerFilterManager) -> MessageStore:
    store = _open_ext_store(stores, root)
    store.dispatcher.bit_map_calc = bit_map_calculator(manager)
    return store


def _drain(store: MessageStore, queue_id: int, record_filter: object, ext_filter: object) -> tuple[list[int], int]:
    """Every pull from offset 0 to the end: the offsets delivered, and the records the record filter read."""
    reads = 0
    assert callable(record_filter)

    def counting(raw: bytes) -> bool:
        nonlocal reads
        reads += 1
        return bool(record_filter(raw))

    got: list[int] = []
    offset = 0
    for _ in range(1000):
        r = store.get_message("G", TOPIC, queue_id, offset, 4, record_filter=counting,
                              ext_filter=ext_filter)  # type: ignore[arg-type]
        got.extend(r.queue_offsets)
        if r.next_begin_offset == offset:
            break
        offset = r.next_begin_offset
    return got, reads


def test_records_the_bits_rule_out_are_skipped_unread_and_the_result_is_the_same(stores: Stores,
                                                                                   tmp_path: Path) -> None:
    manager = ConsumerFilterManager()
    born = int(time.time() * 1000) - 1000
    manager.register(TOPIC, "G", "a > 5", "SQL92", 1, now_ms=born)
    manager.register(TOPIC, "H", "color = 'red'", "SQL92", 1, now_ms=born)
    store = _bits_store(stores, tmp_path, manager)
    for i in range(40):
        put_ok(store, make_msg(b"m%d" % i, props={"a": str(i % 10), **({"color": "red"} if i % 4 == 0 else {})}))
    wait_dispatched(store)
    data = manager.get(TOPIC, "G")
    on = consume_queue_filter(data, manager.bloom, True)
    assert on is not None and consume_queue_filter(data, manager.bloom, False) is None
    with_bits, reads_on = _drain(store, 0, commit_log_filter(data), on)
    without, reads_off = _drain(store, 0, commit_log_filter(data), None)
    assert with_bits == without == [i for i in range(40) if i % 10 > 5]
    assert reads_off == 40
    # G's bits (29-ish of 112) are set only where G matched, or where H's bits cover them by chance
    assert len(with_bits) <= reads_on < reads_off
    cq = store.find_consume_queue(TOPIC, 0)
    assert cq is not None
    unit = cq.get_unit(6)
    assert unit is not None
    ext_unit = cq.get_ext(unit[2])
    assert ext_unit is not None and ext_unit.filter_bit_map is not None
    assert len(ext_unit.filter_bit_map) == manager.bloom.byte_length
    assert data is not None and data.bloom_filter_data is not None
    assert manager.bloom.is_hit(data.bloom_filter_data, ext_unit.filter_bit_map)


def test_messages_stored_before_the_filter_was_born_are_never_skipped(stores: Stores, tmp_path: Path) -> None:
    manager = ConsumerFilterManager()
    store = _bits_store(stores, tmp_path, manager)
    for i in range(10):
        put_ok(store, make_msg(b"m%d" % i, props={"a": str(i)}))
    wait_dispatched(store)
    manager.register(TOPIC, "G", "a > 5", "SQL92", 1, now_ms=int(time.time() * 1000) + 10)
    data = manager.get(TOPIC, "G")
    got, reads = _drain(store, 0, commit_log_filter(data), consume_queue_filter(data, manager.bloom, True))
    assert got == [6, 7, 8, 9] and reads == 10  # no bit maps then: every record is read


def test_the_bits_agree_with_a_store_without_the_extension(stores: Stores, tmp_path: Path) -> None:
    manager = ConsumerFilterManager()
    manager.register(TOPIC, "G", "b IN ('x', 'y') AND NOT (a BETWEEN 2 AND 4)", "SQL92", 1,
                     now_ms=int(time.time() * 1000) - 1000)
    on = _bits_store(stores, tmp_path / "on", manager)
    off = stores.open(make_config(tmp_path / "off", mapped_file_size_commit_log=1 << 20))
    for i in range(30):
        props = {"a": str(i % 7), "b": "xyz"[i % 3]}
        put_ok(on, make_msg(b"m%d" % i, props=props))
        put_ok(off, make_msg(b"m%d" % i, props=props))
    wait_dispatched(on)
    wait_dispatched(off)
    data = manager.get(TOPIC, "G")
    assert _drain(on, 0, commit_log_filter(data), consume_queue_filter(data, manager.bloom, True))[0] == \
        _drain(off, 0, commit_log_filter(data), None)[0]


_VALUES = st.sampled_from(["0", "1", "5", "10", "-3", "2.5", "x", "y", "", "abc"])
_PROPS = st.dictionaries(st.sampled_from(["a", "b", "c"]), _VALUES, max_size=3)
_ATOMS = st.one_of(
    st.builds(lambda k, op, v: f"{k} {op} {v}", st.sampled_from(["a", "b", "c"]),
              st.sampled_from(["=", "<>", ">", ">=", "<", "<="]), st.sampled_from(["0", "1", "5", "2.5"])),
    st.builds(lambda k, op: f"{k} {op} 'x'", st.sampled_from(["a", "b", "c"]), st.sampled_from(["=", "<>"])),
    st.builds(lambda k, n: f"{k} IS {n}NULL", st.sampled_from(["a", "b", "c"]), st.sampled_from(["", "NOT "])),
    st.builds(lambda k, lo, hi: f"{k} BETWEEN {lo} AND {hi}", st.sampled_from(["a", "b"]), st.integers(-5, 3),
              st.integers(3, 12)),
    st.builds(lambda k: f"{k} IN ('x', 'y')", st.sampled_from(["a", "b", "c"])),
)
_SELECTORS = st.recursive(_ATOMS, lambda inner: st.one_of(
    st.builds(lambda x, y, op: f"({x}) {op} ({y})", inner, inner, st.sampled_from(["AND", "OR"])),
    st.builds(lambda x: f"NOT ({x})", inner)), max_leaves=4)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(props=st.lists(_PROPS, min_size=1, max_size=30), selectors=st.lists(_SELECTORS, min_size=1, max_size=4))
def test_with_the_bits_every_pull_returns_what_it_returns_without(props: list[dict[str, str]],
                                                                  selectors: list[str]) -> None:
    manager = ConsumerFilterManager()
    born = int(time.time() * 1000) - 1000
    for n, sel in enumerate(selectors):
        manager.register(TOPIC, f"G{n}", sel, "SQL92", 1, now_ms=born)
    with tempfile.TemporaryDirectory(prefix="cqext-") as root:
        s = Stores()
        try:
            store = _bits_store(s, Path(root), manager)
            for i, p in enumerate(props):
                put_ok(store, make_msg(b"m%d" % i, props=p))
            wait_dispatched(store)
            for n in range(len(selectors)):
                data = manager.get(TOPIC, f"G{n}")
                assert data is not None
                on = consume_queue_filter(data, manager.bloom, True)
                record = commit_log_filter(data)
                offset = 0
                while True:  # pull by pull, from the same offsets: the same answer each time
                    a = store.get_message("G", TOPIC, 0, offset, 3, record_filter=record, ext_filter=on)
                    b = store.get_message("G", TOPIC, 0, offset, 3, record_filter=record)
                    assert (a.status, a.queue_offsets, a.messages, a.next_begin_offset) == \
                        (b.status, b.queue_offsets, b.messages, b.next_begin_offset)
                    if a.next_begin_offset == offset:
                        break
                    offset = a.next_begin_offset
        finally:
            s.close_all()
