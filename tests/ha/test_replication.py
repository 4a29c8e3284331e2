"""A master and a slave store replicating over loopback (HAService, HAConnection, HAClient, 4.9.8): the slave's
commit log becomes the master's byte for byte and its own dispatch serves every message."""

from __future__ import annotations

import threading

import pytest

from reference_broker.common import record as rec
from reference_broker.store.status import GetMessageStatus, PutMessageStatus
from tests.ha.ha_helpers import log_bytes, open_master, open_slave, wait_replicated
from tests.store.store_helpers import TOPIC, make_msg, put_ok, stores_fixture


@pytest.fixture
def stores():
    yield from stores_fixture()


def put_many(store, n, start=0, queues=4):
    return [put_ok(store, make_msg(f"body-{i}-" + "x" * (i % 97), queue_id=i % queues, keys=f"k{i}"))
            for i in range(start, start + n)]


def served(store, queues=4):
    """Every message's body by key, read back through the store's consume queues (get_message)."""
    bodies = {}
    for q in range(queues):
        offset = 0
        while offset < store.get_max_offset_in_queue(TOPIC, q):
            res = store.get_message("g", TOPIC, q, offset, 32)
            assert res.status is GetMessageStatus.FOUND, (q, offset, res.status)
            for raw in res.messages:
                m = rec.decode_message(raw)
                bodies[m.properties["KEYS"]] = m.body
            offset = res.next_begin_offset
    return bodies


def test_empty_slave_becomes_byte_identical_and_serves_every_message(stores, tmp_path):
    # Frames of at most 1000 bytes: records split across frames, so the slave dispatches records it
    # received in pieces.
    master, ha = open_master(stores, tmp_path / "m", ha_transfer_batch_size=1000)
    put_many(master, 300)  # about 3 files of 64 KiB would be far more: everything is in the first file
    slave, _client = open_slave(stores, tmp_path / "s", ha)
    wait_replicated(master, slave)
    end = master.get_max_phy_offset()
    assert slave.get_min_phy_offset() == 0
    assert log_bytes(slave, 0, end) == log_bytes(master, 0, end)
    assert served(slave) == served(master)
    assert len(served(slave)) == 300
    for q in range(4):
        assert slave.get_max_offset_in_queue(TOPIC, q) == master.get_max_offset_in_queue(TOPIC, q)
    assert [m.body for m in slave.query_message(TOPIC, "k7", 4, 0, 1 << 62)] == [b"body-7-" + b"x" * 7]  # the index
    # Messages put while connected follow.
    put_many(master, 50, start=300)
    wait_replicated(master, slave)
    assert len(served(slave)) == 350
    assert slave.put_message(make_msg("no")).status is PutMessageStatus.SERVICE_NOT_AVAILABLE  # a slave refuses puts


def test_records_spanning_files_replicate_file_by_file(stores, tmp_path):
    """Files of 4 KiB: frames stop at each file's end (its blank record included) and the slave rolls with it."""
    master, ha = open_master(stores, tmp_path / "m", mapped_file_size_commit_log=4096)
    put_many(master, 120)
    assert master.get_max_phy_offset() < 4096 * 6  # the master's log spans several files...
    slave, _ = open_slave(stores, tmp_path / "s", ha, mapped_file_size_commit_log=4096)
    slave_start = master.get_max_phy_offset() - master.get_max_phy_offset() % 4096
    wait_replicated(master, slave)
    # ...and an empty slave starts at the beginning of the master's last file.
    assert slave.get_min_phy_offset() == slave_start
    end = master.get_max_phy_offset()
    assert log_bytes(slave, slave_start, end) == log_bytes(master, slave_start, end)
    put_many(master, 60, start=120)  # crosses into new files while connected
    wait_replicated(master, slave)
    end2 = master.get_max_phy_offset()
    assert end2 >= slave_start + 2 * 4096
    assert log_bytes(slave, slave_start, end2) == log_bytes(master, slave_start, end2)
    # The slave's consume queues begin with the first record it has, at that record's queue offset.
    for q in range(4):
        assert slave.get_max_offset_in_queue(TOPIC, q) == master.get_max_offset_in_queue(TOPIC, q)
        first = slave.get_min_offset_in_queue(TOPIC, q)
        assert first > 0
        res = slave.get_message("g", TOPIC, q, first, 1)
        assert res.status is GetMessageStatus.FOUND
        assert res.messages[0] == master.get_message("g", TOPIC, q, first, 1).messages[0]


def test_slave_with_a_prefix_resumes_from_its_offset(stores, tmp_path):
    master, ha = open_master(stores, tmp_path / "m")
    put_many(master, 100)
    slave, _client = open_slave(stores, tmp_path / "s", ha)
    wait_replicated(master, slave)
    prefix_end = slave.get_max_phy_offset()
    slave.shutdown()
    put_many(master, 100, start=100)  # written while the slave is down
    slave2, _client2 = open_slave(stores, tmp_path / "s", ha)  # same directory: the prefix is there
    wait_replicated(master, slave2)
    end = master.get_max_phy_offset()
    assert log_bytes(slave2, 0, end) == log_bytes(master, 0, end)
    assert len(served(slave2)) == 200
    # The restarted slave asked for its own offset, and the master sent from there.
    assert [c.slave_request_offset for c in ha.connections if not c.closed] == [prefix_end]


HA_THREADS = ("AcceptSocketService", "HAConnection-", "HAClient", "GroupTransferService")


def test_shutdown_leaves_no_thread_or_socket(tmp_path):
    from reference_broker.store.config import BrokerRole
    from tests.store.store_helpers import Stores
    s = Stores()
    master, ha = open_master(s, tmp_path / "m", broker_role=BrokerRole.SYNC_MASTER)
    _slave, client = open_slave(s, tmp_path / "s", ha)
    assert master.put_message(make_msg("x")).status is PutMessageStatus.PUT_OK
    conns = list(ha.connections)
    assert conns
    s.close_all()  # the slave first (reversed order), then the master
    alive = [t.name for t in threading.enumerate() if t.name.startswith(HA_THREADS)]
    assert alive == []
    assert all(c.sock.fileno() == -1 for c in conns)
    assert ha._server is not None and ha._server.fileno() == -1
    assert not client.connected


def test_master_whose_ha_port_is_taken_fails_to_start_and_stops_its_threads(tmp_path):
    import socket

    from tests.store.store_helpers import Stores
    s = Stores()
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        before = {t.name for t in threading.enumerate()}
        with pytest.raises(OSError):
            open_master(s, tmp_path / "m", ha_listen_port=port)
        s.close_all()
    assert s.opened[0].shutdown_normally is True
    assert {t.name for t in threading.enumerate()} <= before
