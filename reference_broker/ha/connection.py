"""HAConnection: the master's end of one slave's connection (RocketMQ 4.9.8 HAConnection).

Two threads per slave, as RocketMQ's ReadSocketService and WriteSocketService:

- the reader takes the slave's reports (store/ha/protocol.py): the first one fixes where sending starts
  (slaveRequestOffset), each one is the slave's acknowledgement (slaveAckOffset → push2SlaveMaxOffset, which
  releases SYNC_MASTER puts); a connection that sent nothing for haHousekeepingInterval is closed;
- the writer sends nothing until that first report, then commit-log bytes from the start offset in frames of
  at most haTransferBatchSize within one commit-log file, and a heartbeat (a frame with no body) after
  haSendHeartbeatInterval without a write. With nothing new it waits up to 100 ms or until a SYNC_MASTER put
  wakes it.

Either thread ending ends the connection: the socket is shut down (which wakes the other) and the connection
leaves the service's list.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import TYPE_CHECKING

from reference_broker.store.ha.protocol import (
    HAProtocolError,
    ReportDecoder,
    encode_frame_header,
    heartbeat,
    transfer_start_offset,
)
from reference_broker.store.service_thread import ServiceThread

if TYPE_CHECKING:
    from reference_broker.ha.service import HAService

log = logging.getLogger(__name__)

READ_MAX_BUFFER_SIZE = 1024 * 1024  # ReadSocketService.READ_MAX_BUFFER_SIZE
POLL_S = 1.0  # socket timeout: how often a blocked thread looks at the stop flag (4.9.8 selects for 1 s)
NO_DATA_WAIT_S = 0.1  # WriteSocketService: allWaitForRunning(100) when nothing is new


class HAConnection:
    def __init__(self, service: HAService, sock: socket.socket, client_addr: str) -> None:
        self.service = service
        self.sock = sock
        self.client_addr = client_addr
        self.slave_request_offset = -1  # the slave's first report: where sending starts
        self.slave_ack_offset = -1  # the slave's last report
        sock.settimeout(POLL_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = _Reader(self)
        self.writer = _Writer(self)
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._threads_left = 2

    def start(self) -> None:
        self.reader.start()
        self.writer.start()

    def close(self) -> None:
        """End the connection from any thread: both threads stop; the socket closes once both have."""
        with self._lock:
            if self._closed.is_set():
                return
            self._closed.set()
        self.reader.make_stop()
        self.writer.make_stop()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in recv or send
        except OSError:
            pass
        self.service.remove_connection(self)

    def _thread_done(self) -> None:
        self.close()
        with self._lock:
            self._threads_left -= 1
            last = self._threads_left == 0
        if last:
            self.sock.close()

    def shutdown(self) -> None:
        self.close()
        self.reader.join()
        self.writer.join()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()


class _Reader(ServiceThread):
    """HAConnection.ReadSocketService."""

    def __init__(self, conn: HAConnection) -> None:
        super().__init__(f"HAConnection-Read-{conn.client_addr}")
        self.conn = conn

    def run(self) -> None:
        conn = self.conn
        state = conn.service.state
        housekeeping_s = conn.service.config.ha_housekeeping_interval_ms / 1000
        decoder = ReportDecoder()
        read_buf = bytearray(READ_MAX_BUFFER_SIZE)
        last_read = time.monotonic()
        try:
            while not self.is_stopped:
                try:
                    n = conn.sock.recv_into(read_buf)
                except TimeoutError:
                    if time.monotonic() - last_read > housekeeping_s:
                        log.warning("ha housekeeping: slave %s sent nothing for %.1f s, closing", conn.client_addr,
                                    time.monotonic() - last_read)
                        return
                    continue
                if not n:
                    log.info("slave %s closed the HA connection", conn.client_addr)
                    return
                last_read = time.monotonic()
                offset = decoder.feed(bytes(read_buf[:n]))
                if offset is None:
                    continue
                conn.slave_ack_offset = offset
                if conn.slave_request_offset < 0:
                    conn.slave_request_offset = offset
                    log.info("slave %s requests offset %d", conn.client_addr, offset)
                state.notify_transfer_some(offset)
        except HAProtocolError as e:
            log.error("slave %s: %s; closing", conn.client_addr, e)
        except OSError as e:
            if not self.is_stopped:
                log.info("slave %s: HA read failed: %s", conn.client_addr, e)
        finally:
            conn._thread_done()


class _Writer(ServiceThread):
    """HAConnection.WriteSocketService."""

    def __init__(self, conn: HAConnection) -> None:
        super().__init__(f"HAConnection-Write-{conn.client_addr}")
        self.conn = conn
        self.next_transfer_from_where = -1

    def _send_all(self, data: bytes) -> None:
        """sendall that notices the stop flag, and gives up on a slave that took nothing for haHousekeepingInterval."""
        sock = self.conn.sock
        view = memoryview(data)
        limit_s = self.conn.service.config.ha_housekeeping_interval_ms / 1000
        stalled_since = time.monotonic()
        while view and not self.is_stopped:
            try:
                n = sock.send(view)
            except TimeoutError:
                if time.monotonic() - stalled_since > limit_s:
                    raise OSError(f"slave took nothing for {limit_s:.1f} s") from None
                continue
            view = view[n:]
            stalled_since = time.monotonic()

    def run(self) -> None:
        conn = self.conn
        service = conn.service
        cfg = service.config
        store = service.store
        last_write = time.monotonic()
        try:
            while not self.is_stopped:
                if conn.slave_request_offset < 0:
                    self.sleep(0.01)  # nothing is sent before the slave said where it stands
                    continue
                if self.next_transfer_from_where < 0:
                    self.next_transfer_from_where = transfer_start_offset(
                        conn.slave_request_offset, store.get_max_phy_offset(), cfg.mapped_file_size_commit_log)
                    log.info("master transfers data to slave %s from %d (slave requested %d)", conn.client_addr,
                             self.next_transfer_from_where, conn.slave_request_offset)
                    last_write = time.monotonic()
                if time.monotonic() - last_write > cfg.ha_send_heartbeat_interval_ms / 1000:
                    self._send_all(heartbeat(self.next_transfer_from_where))
                    last_write = time.monotonic()
                # Bytes within one commit-log file from this offset: a frame never spans files.
                body = store.commit_log.get_bulk_data(self.next_transfer_from_where, cfg.ha_transfer_batch_size)
                if not body:
                    service.state.senders.wait(NO_DATA_WAIT_S)
                    continue
                self._send_all(encode_frame_header(self.next_transfer_from_where, len(body)) + body)
                self.next_transfer_from_where += len(body)
                last_write = time.monotonic()
        except OSError as e:
            if not self.is_stopped:
                log.info("slave %s: HA write failed: %s", conn.client_addr, e)
        finally:
            conn._thread_done()
