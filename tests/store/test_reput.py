"""ReputMessageService on a slave: the log grows by replicated chunks that may end inside a record, and dispatch
waits for the rest of it instead of skipping to the next file (4.9.8 stops without moving on when brokerId != 0)."""

from __future__ import annotations

import time

import pytest

from reference_broker.store.config import BrokerRole
from tests.store.store_helpers import TOPIC, Stores, make_config, make_msg, put_ok, stores_fixture, wait_until


@pytest.fixture
def stores():
    yield from stores_fixture()


def test_slave_dispatch_waits_for_a_record_split_across_appends(stores: Stores, tmp_path) -> None:
    master = stores.open(make_config(tmp_path / "m", mapped_file_size_commit_log=64 * 1024))
    for i in range(3):
        put_ok(master, make_msg(f"m{i}"))
    end = master.get_max_phy_offset()
    data = master.commit_log.get_bulk_data(0, end)
    slave = stores.open(make_config(tmp_path / "s", mapped_file_size_commit_log=64 * 1024,
                                    broker_role=BrokerRole.SLAVE))
    cuts = [2, 7, end // 3 + 5, end - 1]  # inside TOTALSIZE, inside the header, inside later records
    prev = 0
    for cut in cuts:
        assert slave.append_to_commit_log(prev, data[prev:cut])
        prev = cut
        time.sleep(0.05)  # the dispatch thread looks at the partial record (every 1 ms)...
        assert slave.reput.reput_from_offset <= cut  # ...and does not skip past it
    assert slave.append_to_commit_log(prev, data[prev:])
    wait_until(lambda: slave.dispatch_behind_bytes() == 0, what="dispatch")
    assert slave.get_max_offset_in_queue(TOPIC, 0) == 3
    assert slave.reput.reput_from_offset == end


def test_only_a_slave_waits_for_whole_records(stores: Stores, tmp_path) -> None:
    """On a master the writer publishes whole records only, so a record that does not parse is damage and
    dispatch moves on to the next file (test_dispatch_errors.py)."""
    master = stores.open(make_config(tmp_path / "m", mapped_file_size_commit_log=64 * 1024))
    assert master.reput.wait_for_whole_records is False
    slave = stores.new(make_config(tmp_path / "s", broker_role=BrokerRole.SLAVE))
    assert slave.reput.wait_for_whole_records is True
