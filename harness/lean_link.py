"""What the lean publishers (harness/nats_lean.py, amqp_lean.py, rocketmq_lean.py) share about one connection:
closing its socket so that a writer blocked on it wakes, and taking the pending sends past their deadline."""

from __future__ import annotations

import socket
import threading
from typing import Protocol, TypeVar


class _HasDeadline(Protocol):
    @property
    def deadline(self) -> float: ...


P = TypeVar("P", bound=_HasDeadline)


def shut(sock: socket.socket) -> None:
    """Shut down before closing: a writer blocked in ``sendall`` on another thread wakes with an error."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # not connected any more
    sock.close()


def pop_expired(pending: dict[int, P], lock: threading.Lock, now: float) -> list[P]:
    """The pending sends whose deadline has passed, removed from ``pending``. Sends are inserted in order with
    one timeout, so deadlines grow with insertion order and only the oldest entries are looked at."""
    expired: list[P] = []
    with lock:
        while pending:
            first = next(iter(pending))
            if pending[first].deadline >= now:
                break
            expired.append(pending.pop(first))
    return expired
