"""HAConnection: the master's end of one slave's connection (RocketMQ 4.9.8 HAConnection).

A reader and a writer per slave, as RocketMQ's ReadSocketService and WriteSocketService:

- the reader takes the slave's reports (store/ha/protocol.py): the first one fixes where sending starts
  (slaveRequestOffset), each one is the slave's acknowledgement (slaveAckOffset → push2SlaveMaxOffset, which
  releases SYNC_MASTER puts); a connection that sent nothing for haHousekeepingInterval is closed. In a broker
  the reader is the event loop watching the socket (_LoopReader: the released sends are answered there, with
  no thread hand-off; a deliberate difference from 4.9.8's reader thread); a store on its own has a thread;
- the writer sends nothing until that first report, then commit-log bytes from the start offset in frames of
  at most haTransferBatchSize within one commit-log file, and a heartbeat (a frame with no body) after
  haSendHeartbeatInterval without a write. With nothing new it waits up to 100 ms or until a SYNC_MASTER put
  wakes it. In a broker, the event loop sends the frames of its SYNC_MASTER puts itself at the end of its
  turn when it can without blocking (_Writer.send_from_loop), so a replication round trip wakes no thread of
  the master; the writer thread does the rest (a catch-up, a full socket buffer, heartbeats).

Either side ending ends the connection: the socket is shut down (which wakes the other) and the connection
leaves the service's list.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
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
READ_BUFFER_SIZE_ON_LOOP = 64 * 1024  # reports are 8 bytes: a read holds thousands
NO_DATA_WAIT_S = 0.1  # WriteSocketService: allWaitForRunning(100) when nothing is new
LOOP_FRAMES_MAX = 8  # frames the event loop sends at the end of one turn before leaving the rest to the writer


class HAConnection:
    def __init__(self, service: HAService, sock: socket.socket, client_addr: str,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.service = service
        self.sock = sock
        self.client_addr = client_addr
        self.slave_request_offset = -1  # the slave's first report: where sending starts
        self.slave_ack_offset = -1  # the slave's last report
        self.last_read = time.monotonic()
        sock.settimeout(POLL_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # With the broker's event loop the reports are read on it (_LoopReader): the acknowledgement releases
        # the waiting sends where their answers are written, with no thread between. Without one (a store on
        # its own, in tests), a reader thread as 4.9.8's.
        self.reader: _Reader | _LoopReader = _Reader(self) if loop is None else _LoopReader(self, loop)
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
            with self.writer._send_lock:  # not while the loop writes to the descriptor (it could be reused)
                self.sock.close()

    def shutdown(self) -> None:
        self.close()
        self.reader.join()
        self.writer.join()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def on_report_bytes(self, decoder: ReportDecoder, data: bytes | memoryview) -> None:
        """Bytes from the slave (ReadSocketService.processReadEvent): the last whole report is its acknowledgement;
        the first one fixes where sending starts. HAProtocolError for a bad report."""
        self.last_read = time.monotonic()
        offset = decoder.feed(bytes(data))
        if offset is None:
            return
        self.slave_ack_offset = offset
        if self.slave_request_offset < 0:
            self.slave_request_offset = offset
            log.info("slave %s requests offset %d", self.client_addr, offset)
        self.service.state.notify_transfer_some(offset)


class _Reader(ServiceThread):
    """HAConnection.ReadSocketService."""

    def __init__(self, conn: HAConnection) -> None:
        super().__init__(f"HAConnection-Read-{conn.client_addr}")
        self.conn = conn

    def run(self) -> None:
        conn = self.conn
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
                conn.on_report_bytes(decoder, memoryview(read_buf)[:n])
        except HAProtocolError as e:
            log.error("slave %s: %s; closing", conn.client_addr, e)
        except OSError as e:
            if not self.is_stopped:
                log.info("slave %s: HA read failed: %s", conn.client_addr, e)
        finally:
            conn._thread_done()


class _LoopReader:
    """ReadSocketService on the broker's event loop: the socket is watched by the loop (add_reader) and each
    readable event reads what is there without blocking. The writer thread does the housekeeping (a slave
    silent for haHousekeepingInterval), which the reader thread does in 4.9.8."""

    def __init__(self, conn: HAConnection, loop: asyncio.AbstractEventLoop) -> None:
        self.conn = conn
        self.loop = loop
        self._decoder = ReportDecoder()
        self._buf = bytearray(READ_BUFFER_SIZE_ON_LOOP)
        self._fd = -1
        self._done = threading.Event()
        self._unregistered = False

    def start(self) -> None:
        self._on_loop(self._register)

    def _on_loop(self, fn: Callable[[], None]) -> None:
        try:
            self.loop.call_soon_threadsafe(fn)
        except RuntimeError:  # the loop is closed: nothing watches the socket, so there is nothing to undo
            self._unregister()

    def _register(self) -> None:
        if self.conn.closed:
            self._unregister()
            return
        self._fd = self.conn.sock.fileno()
        self.loop.add_reader(self._fd, self._on_readable)

    def _on_readable(self) -> None:
        conn = self.conn
        try:
            # os.readv, not recv_into: a socket with a timeout polls before every recv, and the loop has
            # already said that this one is readable (the descriptor is non-blocking in timeout mode).
            n = os.readv(self._fd, [self._buf])
        except BlockingIOError:
            return
        except OSError as e:
            if not conn.closed:
                log.info("slave %s: HA read failed: %s", conn.client_addr, e)
            conn.close()
            return
        if not n:
            if not conn.closed:
                log.info("slave %s closed the HA connection", conn.client_addr)
            conn.close()
            return
        try:
            conn.on_report_bytes(self._decoder, memoryview(self._buf)[:n])
        except HAProtocolError as e:
            log.error("slave %s: %s; closing", conn.client_addr, e)
            conn.close()

    def make_stop(self) -> None:
        """Called by close(): stop watching the socket (on the loop), then count this reader done."""
        if threading.get_ident() == getattr(self.loop, "_thread_id", None):
            self._unregister()
        else:
            self._on_loop(self._unregister)

    def _unregister(self) -> None:
        if self._unregistered:
            return
        self._unregistered = True
        if self._fd >= 0 and not self.loop.is_closed():
            self.loop.remove_reader(self._fd)
        self._done.set()
        self.conn._thread_done()  # the socket closes once the writer is done too

    def join(self, timeout_s: float = 10.0) -> None:
        if not self._done.wait(timeout_s) and not self.loop.is_running():
            self._unregister()  # the loop no longer runs to do it


class _Writer(ServiceThread):
    """HAConnection.WriteSocketService.

    In a broker, the event loop sends too (``send_from_loop``): at the end of a turn that put SYNC_MASTER messages
    it writes the new bytes as one frame without blocking, so the round trip to the slave wakes no thread of
    the master. Whatever it cannot finish (a full socket buffer, more than one frame of bytes) is left to this
    thread, which it then wakes. One lock orders the two: a frame is only ever written by one of them."""

    def __init__(self, conn: HAConnection) -> None:
        super().__init__(f"HAConnection-Write-{conn.client_addr}")
        self.conn = conn
        self.next_transfer_from_where = -1
        self.last_write = time.monotonic()
        self._send_lock = threading.Lock()
        self._pending: memoryview | None = None  # the rest of a frame the loop began: the thread finishes it

    def _send_all(self, data: bytes | memoryview) -> None:
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

    def send_from_loop(self, batch_size: int) -> bool:
        """Write the bytes new since the last frame as one frame (at most ``batch_size``), without blocking; True
        when nothing is left for the thread to do. Called on the event loop."""
        if self.next_transfer_from_where < 0 or self.is_stopped or not self._send_lock.acquire(blocking=False):
            return False
        try:
            if self._pending is not None:
                return False
            for _ in range(LOOP_FRAMES_MAX):
                start = self.next_transfer_from_where
                body = self.conn.service.store.commit_log.get_bulk_data(start, batch_size)
                if not body:
                    return True
                data = encode_frame_header(start, len(body)) + body
                try:
                    n = os.write(self.conn.sock.fileno(), data)  # the descriptor is non-blocking (timeout mode)
                except BlockingIOError:
                    n = 0
                except OSError:
                    return False  # the thread meets the error too, and ends the connection
                self.next_transfer_from_where = start + len(body)
                self.last_write = time.monotonic()
                if n < len(data):
                    self._pending = memoryview(data)[n:]
                    return False
            return False  # more than the loop sends in one turn: the thread goes on
        finally:
            self._send_lock.release()

    def run(self) -> None:
        conn = self.conn
        service = conn.service
        cfg = service.config
        store = service.store
        senders = service.state.senders
        self.last_write = time.monotonic()
        housekeeping_s = cfg.ha_housekeeping_interval_ms / 1000
        on_loop = isinstance(conn.reader, _LoopReader)
        try:
            while not self.is_stopped:
                if on_loop and time.monotonic() - conn.last_read > housekeeping_s:
                    log.warning("ha housekeeping: slave %s sent nothing for %.1f s, closing", conn.client_addr,
                                time.monotonic() - conn.last_read)
                    return
                if conn.slave_request_offset < 0:
                    self.sleep(0.01)  # nothing is sent before the slave said where it stands
                    continue
                with self._send_lock:
                    if self.next_transfer_from_where < 0:
                        self.next_transfer_from_where = transfer_start_offset(
                            conn.slave_request_offset, store.get_max_phy_offset(), cfg.mapped_file_size_commit_log)
                        log.info("master transfers data to slave %s from %d (slave requested %d)", conn.client_addr,
                                 self.next_transfer_from_where, conn.slave_request_offset)
                        self.last_write = time.monotonic()
                    if self._pending is not None:  # a frame the loop could not finish
                        self._send_all(self._pending)
                        self._pending = None
                        self.last_write = time.monotonic()
                        continue
                    if time.monotonic() - self.last_write > cfg.ha_send_heartbeat_interval_ms / 1000:
                        self._send_all(heartbeat(self.next_transfer_from_where))
                        self.last_write = time.monotonic()
                    # Bytes within one commit-log file from this offset: a frame never spans files. The generation
                    # is taken first, so a put that lands between the look and the wait is not slept through.
                    seen = senders.generation()
                    start = self.next_transfer_from_where
                    body = store.commit_log.get_bulk_data(start, cfg.ha_transfer_batch_size)
                    if body:
                        self._send_all(encode_frame_header(start, len(body)) + body)
                        self.next_transfer_from_where = start + len(body)
                        self.last_write = time.monotonic()
                        continue
                senders.wait(NO_DATA_WAIT_S, seen)
        except OSError as e:
            if not self.is_stopped:
                log.info("slave %s: HA write failed: %s", conn.client_addr, e)
        finally:
            conn._thread_done()
