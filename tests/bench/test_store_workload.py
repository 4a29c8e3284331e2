"""store_workload: messages as a producer sends them, and a store that runs them."""

from __future__ import annotations

from pathlib import Path

from reference_broker.bench.store_workload import (
    BODY_BYTES,
    OK,
    PRODUCER_QUEUES,
    TOPIC,
    MessageFactory,
    queued_messages,
    running_store,
    timed_puts,
    warm_up,
)
from reference_broker.common.message import bytes_to_properties


def test_messages_carry_their_properties_in_wire_form_too() -> None:
    keyed, plain = MessageFactory(True), MessageFactory(False)
    a, b = keyed.make(1, 2), keyed.make(2, 3)
    assert (a.topic, a.queue_id, len(a.body)) == (TOPIC, 2, BODY_BYTES)
    assert bytes_to_properties(a.properties_bytes) == a.properties
    uniq = a.properties["UNIQ_KEY"]
    assert len(uniq) == 32 and uniq != b.properties["UNIQ_KEY"]  # MessageClientIDSetter's 32 hex digits
    c = plain.make(7, 0)
    assert c.properties == {"TAGS": "TagA"} and bytes_to_properties(c.properties_bytes) == c.properties


def test_timed_puts_are_all_accepted_and_dispatched(tmp_path: Path) -> None:
    with running_store(tmp_path / "store", mapped_file_size_commit_log=4 << 20, max_hash_slot_num=1000,
                       max_index_num=4000) as store:
        warm_up(store)
        ok, put_s, dispatched_s = timed_puts(store, MessageFactory(True).make, 200, PRODUCER_QUEUES)
        assert ok == 200 and 0 < put_s <= dispatched_s
        assert queued_messages(store) == 200 + PRODUCER_QUEUES  # the warm-up's one per queue as well
        assert store.put_message(MessageFactory(False).make(0, 0)).status is OK
