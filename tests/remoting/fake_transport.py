"""A fake asyncio transport for driving the remoting server's protocol object without sockets.

It keeps what the protocol writes (and in how many calls), whether reading is paused, and closes as asyncio's
transports do: ``connection_lost`` runs on a later pass of the event loop.
"""

from __future__ import annotations

import asyncio
from typing import Any

from reference_broker.remoting.codec import FrameDecoder
from reference_broker.remoting.command import RemotingCommand


class FakeTransport(asyncio.Transport):
    def __init__(self, protocol: asyncio.Protocol, peer: tuple[str, int] = ("10.0.0.7", 40123)) -> None:
        super().__init__()
        self.protocol = protocol
        self.peer = peer
        self.chunks: list[bytes] = []
        self.write_calls = 0  # write / writelines calls: one per event-loop pass that had answers
        self.reading = True
        self.closing = False
        self.limits: tuple[int | None, int | None] = (None, None)
        self._decoder = FrameDecoder()

    # -- what the protocol calls
    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.peer if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.limits = (high, low)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        assert not self.closing, "write after close"
        self.write_calls += 1
        self.chunks.append(bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        assert not self.closing, "write after close"
        self.write_calls += 1
        self.chunks.extend(bytes(d) for d in list_of_data)

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_reading(self) -> bool:
        return self.reading

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    # -- what the tests read
    def frames(self) -> list[RemotingCommand]:
        """Every frame written since the last call, decoded."""
        self._decoder.feed(b"".join(self.chunks))
        self.chunks.clear()
        out = []
        while (cmd := self._decoder.next_frame()) is not None:
            out.append(cmd)
        return out
