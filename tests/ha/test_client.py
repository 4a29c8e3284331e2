"""HAClient (4.9.8 HAService.HAClient) against a master played by a test socket: what the slave reports, and that
a frame at an offset other than its max offset closes the connection."""

from __future__ import annotations

import logging
import socket
import struct
import time

import pytest

from reference_broker.store.ha.protocol import encode_frame
from tests.ha.ha_helpers import log_bytes, open_master, open_slave, wait_replicated
from tests.store.store_helpers import make_msg, put_ok, stores_fixture, wait_until


@pytest.fixture
def stores():
    yield from stores_fixture()


def recv_exact(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def next_report(sock: socket.socket, want: int) -> None:
    """Reports until ``want`` arrives; heartbeat reports repeat the last offset, and none passes ``want``."""
    while True:
        (got,) = struct.unpack(">q", recv_exact(sock, 8))
        assert got <= want
        if got == want:
            return


def test_slave_reports_on_connect_and_after_each_append(stores, tmp_path):
    # A real master supplies the bytes the fake master will send.
    master, _ = open_master(stores, tmp_path / "m")
    for i in range(5):
        put_ok(master, make_msg(f"m{i}"))
    data = log_bytes(master, 0, master.get_max_phy_offset())
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(10)
        slave, _client = open_slave(stores, tmp_path / "s", None,
                                   ha_master_address=f"127.0.0.1:{server.getsockname()[1]}")
        conn, _ = server.accept()
        with conn:
            conn.settimeout(10)
            assert struct.unpack(">q", recv_exact(conn, 8)) == (0,)  # on connect: an empty log
            conn.sendall(encode_frame(0, data[:100]))  # a piece of a record
            next_report(conn, 100)
            conn.sendall(encode_frame(100, data[100:]))
            next_report(conn, len(data))
        wait_until(lambda: slave.dispatch_behind_bytes() == 0, what="dispatch of the pieced records")
        assert slave.get_max_offset_in_queue("FooBar", 0) == 5


def test_frame_at_unexpected_offset_closes_the_connection(stores, tmp_path, caplog):
    master, ha = open_master(stores, tmp_path / "m")
    for i in range(3):
        put_ok(master, make_msg(f"m{i}"))
    slave, client = open_slave(stores, tmp_path / "s", ha)
    wait_replicated(master, slave)
    have = slave.get_max_phy_offset()
    assert have > 0
    master.shutdown()  # the real master goes; a fake one at the address the slave knows sends a bad frame
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(10)
        client.update_master_address(f"127.0.0.1:{server.getsockname()[1]}")
        conn, _ = server.accept()
        with conn, caplog.at_level(logging.ERROR, logger="reference_broker.ha.client"):
            conn.settimeout(10)
            assert struct.unpack(">q", recv_exact(conn, 8)) == (have,)  # on connect
            conn.sendall(encode_frame(have + 8, b"\0" * 16))  # not where the slave's log ends
            # The slave closes: the next read sees the end of the stream (or a reset).
            with pytest.raises((ConnectionError, OSError)):
                while True:
                    if not conn.recv(64):
                        raise ConnectionError("closed by the slave")
        assert "master pushed offset not equal the max phy offset in slave" in caplog.text
    assert slave.get_max_phy_offset() == have  # nothing appended


def test_slave_reconnects_after_a_drop(stores, tmp_path):
    master, ha = open_master(stores, tmp_path / "m")
    put_ok(master, make_msg("a"))
    slave, client = open_slave(stores, tmp_path / "s", ha)
    wait_replicated(master, slave)
    first = client.connects
    for conn in list(ha.connections):
        conn.close()  # the master drops the slave
    put_ok(master, make_msg("b"))
    wait_replicated(master, slave)
    assert client.connects > first


def test_many_frames_in_one_read_across_commit_log_files_are_stored_byte_for_byte(stores, tmp_path):
    """The slave appends the contiguous frames of a read together, straight from its read buffer; a frame
    that starts the next commit-log file starts a new write, and a frame split between reads waits for its
    rest. The result is the master's log, byte for byte and file for file, acknowledged by one report."""
    file_size = 8 * 1024
    master, _ = open_master(stores, tmp_path / "m", mapped_file_size_commit_log=file_size)
    for _ in range(60):
        put_ok(master, make_msg(b"x" * 400))
    end = master.get_max_phy_offset()
    assert end > 2 * file_size  # three files at least
    stream = bytearray()
    offset = 0
    while offset < end:
        stop = min(offset + 1000, end, (offset // file_size + 1) * file_size)
        stream += encode_frame(offset, log_bytes(master, offset, stop))
        offset = stop
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(10)
        slave, _client = open_slave(stores, tmp_path / "s", None, mapped_file_size_commit_log=file_size,
                                   ha_master_address=f"127.0.0.1:{server.getsockname()[1]}")
        conn, _ = server.accept()
        with conn:
            conn.settimeout(10)
            assert struct.unpack(">q", recv_exact(conn, 8)) == (0,)
            cut = len(stream) - 500  # the last frame arrives in two pieces
            conn.sendall(bytes(stream[:cut]))
            time.sleep(0.2)
            conn.sendall(bytes(stream[cut:]))
            next_report(conn, end)
    assert log_bytes(slave, 0, end) == log_bytes(master, 0, end)
    assert [mf.file_from_offset for mf in slave.commit_log.mapped_file_queue.mapped_files] == \
        [mf.file_from_offset for mf in master.commit_log.mapped_file_queue.mapped_files]
    wait_until(lambda: slave.dispatch_behind_bytes() == 0, what="dispatch of the replicated records")
    assert slave.get_max_offset_in_queue("FooBar", 0) == 60
