"""ResetOffsetBody / ResetOffsetBodyForC (reference_broker/common/reset_offset_body.py): fastjson's object-keyed
map written and read back, the C++ list form, and bad bodies refused with one error type."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reference_broker.common import reset_offset_body as body

TABLE = {("T", "broker-a", 0): 5, ("T", "broker-a", 1): 0, ("T", "broker-b", 0): 123456789012}


def test_the_map_form_is_fastjsons_object_keyed_map() -> None:
    assert body.encode({("T", "b", 1): 7}) == b'{"offsetTable":{{"brokerName":"b","queueId":1,"topic":"T"}:7}}'
    assert body.decode(body.encode(TABLE)) == TABLE


def test_the_c_form_is_a_list_of_queues_with_offsets() -> None:
    assert body.encode_for_c({("T", "b", 1): 7}) == \
        b'{"offsetTable":[{"brokerName":"b","offset":7,"queueId":1,"topic":"T"}]}'
    assert body.decode(body.encode_for_c(TABLE)) == TABLE


def test_what_rocketmq_writes_with_spaces_and_other_key_orders_reads_too() -> None:
    raw = b'{ "offsetTable" : { {"topic":"T","queueId":2,"brokerName":"b"} : 9 , "{\\"brokerName\\":\\"b\\",' \
          b'\\"queueId\\":3,\\"topic\\":\\"T\\"}": 4 } }'
    assert body.decode(raw) == {("T", "b", 2): 9, ("T", "b", 3): 4}
    assert body.decode(b'{"offsetTable":{}}') == {}
    assert body.decode(b"{}") == {}


@pytest.mark.parametrize("raw", [b"", b"{", b"[]", b'{"offsetTable":{{"topic":"T"}:1}}', b'{"offsetTable":5}',
                                 b'{"offsetTable":{}} x', b"\xff", b'{"offsetTable":[{"topic":"T"}]}'])
def test_bad_bodies_raise_body_error(raw: bytes) -> None:
    with pytest.raises(body.BodyError):
        body.decode(raw)


names = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


@given(st.dictionaries(st.tuples(names, names, st.integers(0, 1 << 20)), st.integers(0, 1 << 62), max_size=8))
def test_any_table_round_trips_in_both_forms(table: dict[tuple[str, str, int], int]) -> None:
    assert body.decode(body.encode(table)) == table
    assert body.decode(body.encode_for_c(table)) == table
