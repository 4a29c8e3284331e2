"""A pipelined burst of requests ending in a malformed frame, and the answers read until the peer closes."""

from __future__ import annotations

import socket

from reference_broker.remoting.codec import FrameDecoder
from reference_broker.remoting.command import RemotingCommand, encode

MALFORMED: bytes = b"\x00\x00\x00\x01"  # a frame length < 4


def burst_then_garbage(port: int, requests: list[RemotingCommand], timeout_s: float = 10.0) -> list[RemotingCommand]:
    """Send ``requests`` and a malformed frame in one write; every answer read before the connection closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(b"".join(encode(r) for r in requests) + MALFORMED)
        received = b""
        while chunk := s.recv(1 << 16):
            received += chunk
    decoder = FrameDecoder()
    decoder.feed(received)
    answers = []
    while (frame := decoder.next_frame()) is not None:
        answers.append(frame)
    return answers
