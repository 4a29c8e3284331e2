"""HAClient: the slave's side of replication (RocketMQ 4.9.8 HAService.HAClient).

One thread connects to the master's HA address — haMasterAddress, or the one the broker learns from the name
server (``update_master_address``) — and then:

- reports its commit-log max offset on connect, after each read whose frames moved it, and every
  haSendHeartbeatInterval (the report is the acknowledgement SYNC_MASTER puts wait for);
- takes frames (store/ha/protocol.py): a frame must start at the slave's max offset unless the slave's log is
  empty, else the connection is closed ("master pushed offset not equal the max phy offset in slave"); a body
  is appended at its offset (MessageStore.append_to_commit_log: the contiguous bodies of one read in one write,
  straight from the read buffer) and the store's reput dispatches it;
- closes a connection that brought nothing for haHousekeepingInterval (the master heartbeats every 5 s), and
  connects again: at once after a drop, after ``reconnect_interval_s`` when the master cannot be reached.

Three deliberate differences from 4.9.8: it reports once per read rather than once per frame (the master
acts on the last report of what it reads at once, so this says the same with fewer writes); its first report
waits one haSendHeartbeatInterval after connecting (connectMaster sets lastWriteTimestamp), here it is sent at
once, so a fresh slave starts syncing at once; and its housekeeping counts from the slave's last write, which
the slave's own reports keep fresh, so a silent master is never noticed — here it counts from the last read.
"""

from __future__ import annotations

import logging
import socket
import threading
import time

from reference_broker.store.ha.protocol import FrameCheck, HAProtocolError, check_frame, encode_report, scan_frames
from reference_broker.store.message_store import MessageStore
from reference_broker.store.service_thread import ServiceThread

log = logging.getLogger(__name__)

READ_MAX_BUFFER_SIZE = 4 * 1024 * 1024  # HAClient.READ_MAX_BUFFER_SIZE
POLL_S = 1.0  # 4.9.8 selects for 1 s between looks at its timers
CONNECT_TIMEOUT_S = 3.0


def _split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.strip().rpartition(":")
    return host.strip("[]"), int(port)


class HAClient(ServiceThread):
    def __init__(self, store: MessageStore) -> None:
        super().__init__("HAClient")
        self.store = store
        self.config = store.config
        self._master_address: str | None = store.config.ha_master_address
        self._addr_lock = threading.Lock()
        self._sock: socket.socket | None = None
        # One buffer for every read, as HAClient's byteBufferRead: bytes are received at _write_pos, frames are
        # appended from _dispatch_pos (dispatchPosition) straight out of it, and a partial frame moves to the
        # front only when the buffer is full (reallocateByteBuffer).
        self._read_buf = bytearray(READ_MAX_BUFFER_SIZE)
        self._read_view = memoryview(self._read_buf)
        self._write_pos = 0
        self._dispatch_pos = 0
        self.current_reported_offset = 0
        self._last_write = 0.0
        self._last_read = 0.0
        self.reconnect_interval_s = 5.0  # HAClient.run: waitForRunning(5000) when the master is unreachable
        self.connects = 0  # connections made (not a RocketMQ counter: tests and runtime info read it)

    @property
    def master_address(self) -> str | None:
        return self._master_address

    def update_master_address(self, addr: str | None) -> None:
        """HAClient.updateMasterAddress: a new address takes effect at the next connect."""
        with self._addr_lock:
            if addr != self._master_address:
                log.info("update master address, OLD: %s NEW: %s", self._master_address, addr)
                self._master_address = addr
        self.wakeup()

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def runtime_info(self) -> dict[str, str]:
        """The slave's replication in GET_BROKER_RUNTIME_INFO (not keys of 4.9.8's table): the master's HA
        address, whether it is connected, and the offset it last reported to the master (its acknowledged
        offset, HAClient.currentReportedOffset)."""
        return {
            "haMasterAddress": self._master_address or "",
            "haMasterConnected": str(self.connected).lower(),
            "haReportedOffset": str(self.current_reported_offset),
        }

    # ---- connection ------------------------------------------------------------------------------------
    def _connect(self) -> bool:
        if self._sock is not None:
            return True
        addr = self._master_address
        if not addr:
            return False
        try:
            host, port = _split_addr(addr)
            sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
        except (OSError, ValueError) as e:
            log.warning("HAClient: connect to master %s failed: %s", addr, e)
            return False
        sock.settimeout(POLL_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        self._write_pos = self._dispatch_pos = 0
        self.current_reported_offset = self.store.get_max_phy_offset()
        self._last_read = time.monotonic()
        self.connects += 1
        log.info("HAClient: connected to master %s, slave max offset %d", addr, self.current_reported_offset)
        return self._report(self.current_reported_offset)

    def _close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            log.info("HAClient: closing the connection to master %s", self._master_address)
            try:
                sock.close()
            except OSError:
                pass

    def _report(self, offset: int) -> bool:
        sock = self._sock
        if sock is None:
            return False
        try:
            sock.sendall(encode_report(offset))
        except OSError as e:
            log.error("HAClient: reportSlaveMaxOffset %d failed: %s", offset, e)
            self._close()
            return False
        self._last_write = time.monotonic()
        return True

    def _report_plus(self) -> bool:
        """reportSlaveMaxOffsetPlus: report when the log grew since the last report."""
        current = self.store.get_max_phy_offset()
        if current > self.current_reported_offset:
            self.current_reported_offset = current
            return self._report(current)
        return True

    # ---- frames ----------------------------------------------------------------------------------------
    def _append_frames(self, frames: list[tuple[int, int, int]]) -> bool:
        """Append the frames of one read; False when the connection must close.

        Each frame must continue the log (check_frame). Contiguous bodies within one commit-log file go to the
        store as one write of views into the read buffer: no copy in Python, one pwritev per run."""
        view = self._read_view
        file_size = self.config.mapped_file_size_commit_log
        expected = self.store.get_max_phy_offset()
        run: list[memoryview] = []
        run_start = 0
        for phy_offset, start, size in frames:
            if check_frame(phy_offset, expected) is FrameCheck.OFFSET_MISMATCH:
                if run and not self.store.append_to_commit_log(run_start, run):
                    return False
                log.error("master pushed offset not equal the max phy offset in slave, SLAVE: %d MASTER: %d",
                          expected, phy_offset)
                return False
            if not size:
                continue  # a heartbeat
            if run and phy_offset % file_size == 0:  # the next file: a write never spans two
                if not self.store.append_to_commit_log(run_start, run):
                    return False
                run = []
            if not run:
                run_start = phy_offset
            run.append(view[start:start + size])
            expected = phy_offset + size
        return not run or self.store.append_to_commit_log(run_start, run)

    def _process_read(self) -> bool:
        sock = self._sock
        assert sock is not None
        buf = self._read_buf
        if self._write_pos == len(buf):  # full: the partial frame at the end moves to the front
            keep = bytes(self._read_view[self._dispatch_pos:self._write_pos])
            buf[:len(keep)] = keep
            self._dispatch_pos, self._write_pos = 0, len(keep)
        try:
            n = sock.recv_into(self._read_view[self._write_pos:])
        except TimeoutError:
            return True
        except OSError as e:
            log.info("HAClient: read from master failed: %s", e)
            return False
        if not n:
            log.info("HAClient: master closed the connection")
            return False
        self._last_read = time.monotonic()
        self._write_pos += n
        try:
            frames, self._dispatch_pos = scan_frames(buf, self._dispatch_pos, self._write_pos)
        except HAProtocolError as e:
            log.error("HAClient: %s", e)
            return False
        if frames and not self._append_frames(frames):
            return False
        if self._dispatch_pos == self._write_pos:
            self._dispatch_pos = self._write_pos = 0
        # Once per read, after every frame in it (4.9.8 reports after each frame; the master acts on the last
        # report of what it reads at once, so per read says the same with fewer writes).
        return self._report_plus()

    def run(self) -> None:
        cfg = self.config
        while not self.is_stopped:
            try:
                if not self._connect():
                    self.wait_for_running(self.reconnect_interval_s)
                    continue
                now = time.monotonic()
                if now - self._last_write > cfg.ha_send_heartbeat_interval_ms / 1000 and not self._report(
                        self.current_reported_offset):
                    continue
                if not self._process_read():
                    self._close()
                    continue
                if time.monotonic() - self._last_read > cfg.ha_housekeeping_interval_ms / 1000:
                    log.warning("HAClient, master not response some time, so close connection")
                    self._close()
            except Exception:  # boundary: the client outlives any one failure and connects again
                log.exception("HAClient: unexpected failure")
                self._close()
                self.wait_for_running(self.reconnect_interval_s)
        self._close()

    def shutdown(self, timeout_s: float = 10.0) -> None:
        super().shutdown(timeout_s)
        self._close()
