"""message: RocketMQ's properties string codec and the single-property lookup used by dispatch."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_broker.common import message as mc
from reference_broker.common.message import properties_to_bytes, property_from_bytes
from tests.compiled_paths import put_path  # noqa: F401 - the fixture, used by pytestmark

pytestmark = pytest.mark.usefixtures("put_path")  # pure and compiled (tests/compiled_paths.py)


def test_properties_round_trip_without_trailing_separator() -> None:
    props = {"KEYS": "order-1 order-2 order-3", "TAGS": "TagA", "UNIQ_KEY": "7F0000010001", "WAIT": "true"}
    raw = properties_to_bytes(props)
    assert raw == b"KEYS\x01order-1 order-2 order-3\x02TAGS\x01TagA\x02UNIQ_KEY\x017F0000010001\x02WAIT\x01true"
    assert not raw.endswith(b"\x02")  # 4.9.8 messageProperties2String strips the trailing separator
    assert mc.bytes_to_properties(raw) == props


def test_properties_round_trip_non_ascii_and_empty() -> None:
    props = {"KEYS": "ключ 键", "note": "  leading and trailing spaces  "}
    assert mc.bytes_to_properties(properties_to_bytes(props)) == props
    # string2messageProperties drops a pair with an empty value or an empty name (seen on RocketMQ 4.9.8: a
    # sent "x\x01\x02\x01y" is stored as CLUSTER alone)
    assert mc.bytes_to_properties(properties_to_bytes({**props, "EMPTY": "", "": "v"})) == props
    assert properties_to_bytes({}) == b""
    assert properties_to_bytes(None) == b""
    assert mc.bytes_to_properties(b"") == {}


def test_decode_tolerates_trailing_separator_and_memoryview() -> None:
    raw = b"TAGS\x01TagA\x02KEYS\x01a b\x02"  # pre-4.9.8 clients end with \x02
    assert mc.bytes_to_properties(raw) == {"TAGS": "TagA", "KEYS": "a b"}
    assert mc.bytes_to_properties(memoryview(raw)) == {"TAGS": "TagA", "KEYS": "a b"}


def test_decode_skips_pairs_without_separator() -> None:
    assert mc.bytes_to_properties(b"garbage\x02TAGS\x01t\x02\x02") == {"TAGS": "t"}


RAW = properties_to_bytes({"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ABCDEF"})


@pytest.mark.parametrize(("name", "value"), [(b"TAGS", b"TagA"), (b"KEYS", b"k1 k2"), (b"UNIQ_KEY", b"ABCDEF")])
def test_property_from_bytes_first_middle_last(name: bytes, value: bytes) -> None:
    assert property_from_bytes(RAW, name) == value


def test_property_from_bytes_missing_or_empty() -> None:
    assert property_from_bytes(RAW, b"DELAY") is None
    assert property_from_bytes(b"", b"TAGS") is None
    assert property_from_bytes(b"TAGS\x01\x02KEYS\x01k", b"TAGS") == b""
    assert property_from_bytes(b"TAGS\x01t\x02", b"TAGS") == b"t"  # trailing separator


@pytest.mark.parametrize(
    "raw",
    [
        b"XKEYS\x01wrong",
        b"TAGS\x01t\x02XKEYS\x01wrong",
        b"XKEYS\x01wrong\x02TAGS\x01t",
    ],
)
def test_property_from_bytes_does_not_match_a_key_suffix(raw: bytes) -> None:
    assert property_from_bytes(raw, b"KEYS") is None


def test_property_from_bytes_finds_key_after_a_suffix_lookalike() -> None:
    raw = b"XKEYS\x01wrong\x02KEYS\x01right"
    assert property_from_bytes(raw, b"KEYS") == b"right"
    assert property_from_bytes(b"KEYSX\x01wrong\x02KEYS\x01right", b"KEYS") == b"right"


def test_transaction_value_masks_type_bits() -> None:
    assert mc.transaction_value(mc.TRANSACTION_PREPARED_TYPE | mc.BORNHOST_V6_FLAG) == mc.TRANSACTION_PREPARED_TYPE
    assert mc.transaction_value(mc.TRANSACTION_ROLLBACK_TYPE | mc.COMPRESSED_FLAG) == mc.TRANSACTION_ROLLBACK_TYPE
    assert mc.transaction_value(mc.MULTI_TAGS_FLAG) == mc.TRANSACTION_NOT_TYPE


def _pairwise_reference(raw: bytes) -> dict[str, str]:
    """Each pair split from the bytes and decoded alone (how bytes_to_properties once worked)."""
    out: dict[str, str] = {}
    for item in raw.split(b"\x02"):
        k, _, v = item.partition(b"\x01")
        if k and v:
            out[k.decode("utf-8", "replace")] = v.decode("utf-8", "replace")
    return out


_PIECES = st.sampled_from([b"\x01", b"\x02", b"a", b"KEYS", b"\xe4", b"\xb8", b"\xad", b"\xff", b"\xc0\x80",
                           b"\xed\xa0\x80", "中".encode(), b"\xf0\x9f", b"\x98\x80"])


@settings(max_examples=500)
@given(st.lists(_PIECES, max_size=24).map(b"".join))
def test_decoding_the_blob_once_equals_decoding_each_pair(raw: bytes) -> None:
    """bytes_to_properties decodes once and splits; broken UTF-8 next to a separator must not change a pair."""
    assert mc.bytes_to_properties(raw) == _pairwise_reference(raw)
    assert mc.bytes_to_properties(memoryview(raw)) == _pairwise_reference(raw)


@pytest.mark.parametrize("text,canonical", [
    ("KEYS\x01k1\x02TAGS\x01t", True), ("k\x01v", True), ("KEYS\x01k1\x02TAGS\x01t\x02", False),
    ("a\x01b\x02a\x01c", False), ("noseparator", False), ("x\x01\x02\x01y", False), ("\x02", False),
    ("k\x01v\x01w", False)])
def test_is_canonical_says_whether_the_text_is_the_maps_encoding(text: str, canonical: bool) -> None:
    props = mc.string_to_properties(text)
    assert mc.is_canonical(text, props) is canonical
    if canonical:
        assert properties_to_bytes(props) == text.encode()


def test_invalid_utf8_decodes_to_replacement_characters() -> None:
    assert mc.bytes_to_properties(b"KEYS\x01k\xff\xfe1\x02TAGS\x01t\xc3") == {"KEYS": "k\ufffd\ufffd1",
                                                                          "TAGS": "t\ufffd"}


def test_without_pair_drops_one_pair_wherever_it_stands():
    from reference_broker.common.message import without_pair

    assert without_pair("WAIT\x01true", "WAIT", "true") == ""
    assert without_pair("WAIT\x01true\x02KEYS\x01k", "WAIT", "true") == "KEYS\x01k"
    assert without_pair("KEYS\x01k\x02WAIT\x01true", "WAIT", "true") == "KEYS\x01k"
    assert without_pair("KEYS\x01k\x02WAIT\x01true\x02TAGS\x01t", "WAIT", "true") == "KEYS\x01k\x02TAGS\x01t"
    # only the whole pair: a value that merely starts with it, or a name that ends with it, stays
    assert without_pair("KEYS\x01k\x02WAIT\x01truex", "WAIT", "true") == "KEYS\x01k\x02WAIT\x01truex"
    assert without_pair("XWAIT\x01true\x02KEYS\x01k", "WAIT", "true") == "XWAIT\x01true\x02KEYS\x01k"
