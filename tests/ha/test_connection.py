"""HAConnection (4.9.8) seen from a slave played by a test socket: nothing before the first report, frames of at
most haTransferBatchSize that never cross a commit-log file, heartbeats when idle, and housekeeping."""

from __future__ import annotations

import itertools
import socket
import struct
import time

import pytest

from reference_broker.store.ha.protocol import Frame, FrameDecoder
from tests.ha.ha_helpers import log_bytes, open_master
from tests.store.store_helpers import make_msg, put_ok, stores_fixture, wait_until


@pytest.fixture
def stores():
    yield from stores_fixture()


def read_frames(sock: socket.socket, decoder: FrameDecoder, until) -> list[Frame]:
    frames: list[Frame] = []
    while not until(frames):
        data = sock.recv(65536)
        assert data, "master closed"
        decoder.feed(data)
        while (f := decoder.next_frame()) is not None:
            frames.append(f)
    return frames


def test_frames_are_batched_within_one_file(stores, tmp_path):
    master, ha = open_master(stores, tmp_path / "m", mapped_file_size_commit_log=4096, ha_transfer_batch_size=1000)
    for i in range(60):
        put_ok(master, make_msg(f"m{i}" * 10))
    end = master.get_max_phy_offset()
    assert end > 2 * 4096
    with socket.create_connection(("127.0.0.1", ha.port), timeout=10) as sock:
        time.sleep(0.3)
        sock.setblocking(False)
        with pytest.raises(BlockingIOError):
            sock.recv(1)  # nothing is sent before the slave's first report
        sock.settimeout(10)
        sock.sendall(struct.pack(">q", 5))  # a slave that has the first 5 bytes (any non-zero offset is taken)
        frames = read_frames(sock, FrameDecoder(),
                             lambda fs: sum(len(f.body) for f in fs) >= end - 5)
    data = [f for f in frames if f.body]
    assert data[0].phy_offset == 5
    for prev, f in itertools.pairwise(data):
        assert f.phy_offset == prev.phy_offset + len(prev.body)  # contiguous
    for f in data:
        assert len(f.body) <= 1000
        assert f.phy_offset // 4096 == (f.phy_offset + len(f.body) - 1) // 4096  # within one file
    assert b"".join(f.body for f in data) == log_bytes(master, 5, end)


def test_idle_master_sends_heartbeats(stores, tmp_path):
    master, ha = open_master(stores, tmp_path / "m", ha_send_heartbeat_interval_ms=200)
    put_ok(master, make_msg("a"))
    end = master.get_max_phy_offset()
    with socket.create_connection(("127.0.0.1", ha.port), timeout=10) as sock:
        sock.sendall(struct.pack(">q", end))  # caught up: nothing to send but heartbeats
        frames = read_frames(sock, FrameDecoder(), lambda fs: len(fs) >= 2)
    assert frames[:2] == [Frame(end, b""), Frame(end, b"")]


def test_master_closes_a_silent_slave_after_housekeeping(stores, tmp_path):
    _master, ha = open_master(stores, tmp_path / "m", ha_housekeeping_interval_ms=500)
    with socket.create_connection(("127.0.0.1", ha.port), timeout=10) as sock:
        wait_until(lambda: ha.connection_count() == 1, what="the connection")
        sock.sendall(struct.pack(">q", 0))
        wait_until(lambda: ha.connection_count() == 0, timeout_s=10, what="housekeeping to close it")
        assert ha.connections == []
