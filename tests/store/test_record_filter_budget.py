"""A pull's record filter has a time budget (message_store_reads.RECORD_FILTER_BUDGET_S): a costly filter that
matches nothing ends the scan early with NO_MATCHED_MESSAGE and a next begin offset that moved on, instead of
holding the broker's loop for every record of the window."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reference_broker.store import message_store_reads
from reference_broker.store.status import GetMessageStatus
from tests.store.store_helpers import TOPIC, Stores, make_config, make_msg, put_ok, stores_fixture, wait_dispatched


@pytest.fixture
def stores() -> Iterator[Stores]:
    yield from stores_fixture()


def test_a_costly_filter_stops_at_its_budget_and_the_next_offset_moves_on(stores: Stores, tmp_path: Path) -> None:
    store = stores.open(make_config(tmp_path, mapped_file_size_commit_log=1 << 20))
    for i in range(60):
        put_ok(store, make_msg(b"m%d" % i))
    wait_dispatched(store)
    calls = []

    def slow_no_match(raw: bytes) -> bool:
        calls.append(raw)
        time.sleep(message_store_reads.RECORD_FILTER_BUDGET_S / 3)
        return False

    r = store.get_message("G", TOPIC, 0, 0, 32, record_filter=slow_no_match)
    assert r.status is GetMessageStatus.NO_MATCHED_MESSAGE
    assert 1 <= len(calls) < 60 and r.next_begin_offset == len(calls)
    # the next pull goes on from there; a filter that matches still returns messages within the same bound
    r2 = store.get_message("G", TOPIC, 0, r.next_begin_offset, 32, record_filter=lambda raw: True)
    assert r2.status is GetMessageStatus.FOUND and r2.queue_offsets[0] == r.next_begin_offset
    # without a filter nothing is cut short
    assert len(store.get_message("G", TOPIC, 0, 0, 32).messages) == 32
