"""The classic HA wire formats and the master's start-offset rule (RocketMQ 4.9.8 HAConnection, HAService.HAClient).

Plain TCP to the master's haListenPort. Big-endian, as every RocketMQ integer.

Slave → master, a report (HAClient.reportSlaveMaxOffset):

    offset  size  field
    0       8     maxPhyOffset   the slave's commit-log max offset: everything below it is stored there

    Sent on connect, after each appended frame that moved the offset (reportSlaveMaxOffsetPlus) and at least every
    haSendHeartbeatInterval. The master acts on the last complete report of what one read returned
    (HAConnection.ReadSocketService.processReadEvent): reports are cumulative, so older ones say nothing new.

Master → slave, a frame (HAConnection.WriteSocketService):

    offset  size      field
    0       8         phyOffset   commit-log offset of the body's first byte (for a heartbeat: the next offset)
    8       4         bodySize    0..haTransferBatchSize; 0 = a heartbeat after haSendHeartbeatInterval idle
    12      bodySize  body        raw commit-log bytes, never across a commit-log file

The body is bytes, not records: a record may be split between frames (the slave's dispatch waits for the rest).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Final

REPORT: Final = struct.Struct(">q")
FRAME_HEADER: Final = struct.Struct(">qi")
REPORT_SIZE: Final = REPORT.size  # 8
FRAME_HEADER_SIZE: Final = FRAME_HEADER.size  # 12
# HAClient reads into a 4 MiB buffer (READ_MAX_BUFFER_SIZE): a frame must fit in it.
MAX_FRAME_BODY: Final = 4 * 1024 * 1024 - FRAME_HEADER_SIZE


class HAProtocolError(ValueError):
    """Bytes from the peer that are no HA frame or report; the connection is closed."""


def encode_report(max_phy_offset: int) -> bytes:
    return REPORT.pack(max_phy_offset)


def encode_frame_header(phy_offset: int, body_size: int) -> bytes:
    return FRAME_HEADER.pack(phy_offset, body_size)


def encode_frame(phy_offset: int, body: bytes) -> bytes:
    return FRAME_HEADER.pack(phy_offset, len(body)) + body


def heartbeat(next_offset: int) -> bytes:
    return FRAME_HEADER.pack(next_offset, 0)


def transfer_start_offset(slave_offset: int, master_max_offset: int, mapped_file_size: int) -> int:
    """Where the master starts sending (HAConnection.WriteSocketService.run): a slave with an empty log (it
    reports 0) gets the master's last commit-log file from its start, not the whole history; any other slave
    continues from its own offset."""
    if slave_offset != 0:
        return slave_offset
    return max(0, master_max_offset - master_max_offset % mapped_file_size)


class FrameCheck(enum.Enum):
    """What the slave does with a frame (HAClient.dispatchReadRequest)."""

    APPEND = "append"
    OFFSET_MISMATCH = "offset mismatch"  # "master pushed offset not equal the max phy offset in slave": close


def check_frame(frame_offset: int, slave_max_offset: int) -> FrameCheck:
    """A frame continues the slave's log exactly; a slave with an empty log takes any start."""
    if slave_max_offset != 0 and frame_offset != slave_max_offset:
        return FrameCheck.OFFSET_MISMATCH
    return FrameCheck.APPEND


class ReportDecoder:
    """The master's side: bytes from the slave in, the latest complete report out."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, data: bytes) -> int | None:
        """The last complete report in what was fed so far and not yet returned, or None; a partial report is
        kept for the next call."""
        buf = self._pending + data
        whole = len(buf) - len(buf) % REPORT_SIZE
        self._pending = buf[whole:]
        if whole == 0:
            return None
        offset: int = REPORT.unpack_from(buf, whole - REPORT_SIZE)[0]
        if offset < 0:
            raise HAProtocolError(f"slave reported a negative offset {offset}")
        return offset


def scan_frames(buf: bytearray | memoryview, pos: int, end: int,
                max_body: int = MAX_FRAME_BODY) -> tuple[list[tuple[int, int, int]], int]:
    """The whole frames in ``buf[pos:end]``, without copying: ``(phy_offset, body_start, body_size)`` each,
    and the position after the last one (where a partial frame, kept for the next read, begins). The slave's
    read path (HAClient.dispatchReadRequest's loop over one read buffer); HAProtocolError for a bad header."""
    frames: list[tuple[int, int, int]] = []
    unpack = FRAME_HEADER.unpack_from
    while end - pos >= FRAME_HEADER_SIZE:
        phy_offset, size = unpack(buf, pos)
        if size < 0 or size > max_body:
            raise HAProtocolError(f"frame body size {size} at offset {phy_offset} is not 0..{max_body}")
        if phy_offset < 0:
            raise HAProtocolError(f"frame at negative offset {phy_offset}")
        start = pos + FRAME_HEADER_SIZE
        if end - start < size:
            break
        frames.append((phy_offset, start, size))
        pos = start + size
    return frames, pos


@dataclass(frozen=True, slots=True)
class Frame:
    phy_offset: int
    body: bytes

    @property
    def is_heartbeat(self) -> bool:
        return not self.body


class FrameDecoder:
    """The slave's side: bytes from the master in (``feed``), whole frames out (``next_frame``).

    Frames are consumed by moving a read position; the buffer is compacted once the consumed part is the
    larger one, so a read carrying many frames costs one copy of its bytes, not one per frame."""

    __slots__ = ("_buf", "_max_body", "_pos")

    def __init__(self, max_body: int = MAX_FRAME_BODY) -> None:
        self._buf = bytearray()
        self._pos = 0
        self._max_body = max_body

    def feed(self, data: bytes | memoryview) -> None:
        if self._pos and self._pos * 2 >= len(self._buf):
            del self._buf[:self._pos]
            self._pos = 0
        self._buf += data

    def next_frame(self) -> Frame | None:
        buf, pos = self._buf, self._pos
        if len(buf) - pos < FRAME_HEADER_SIZE:
            return None
        phy_offset, size = FRAME_HEADER.unpack_from(buf, pos)
        if size < 0 or size > self._max_body:
            raise HAProtocolError(f"frame body size {size} at offset {phy_offset} is not 0..{self._max_body}")
        if phy_offset < 0:
            raise HAProtocolError(f"frame at negative offset {phy_offset}")
        start = pos + FRAME_HEADER_SIZE
        end = start + size
        if len(buf) < end:
            return None
        body = bytes(buf[start:end])
        if end == len(buf):
            buf.clear()
            self._pos = 0
        else:
            self._pos = end
        return Frame(phy_offset, body)

    @property
    def buffered(self) -> int:
        return len(self._buf) - self._pos
