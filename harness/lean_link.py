"""What the lean publishers (harness/nats_lean.py, amqp_lean.py, rocketmq_lean.py) share about one connection:
closing its socket so that a writer blocked on it wakes, answering a send whose write failed, and taking the
pending sends past their deadline."""

from __future__ import annotations

import socket
import threading
from typing import Protocol, TypeVar

from harness.driver import SendCallback, SendOutcome
from harness.records.schema import Outcome


class _HasDeadline(Protocol):
    @property
    def deadline(self) -> float: ...


class _Answerable(Protocol):
    @property
    def callback(self) -> SendCallback: ...


P = TypeVar("P", bound=_HasDeadline)
A = TypeVar("A", bound=_Answerable)




def shut(sock: socket.socket) -> None:
    """Shut down before closing: a writer blocked in ``sendall`` on another thread wakes with an error."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # not connected any more
    sock.close()


def write_failed(pending: dict[int, A], lock: threading.Lock, key: int, queue: int,
                 exc: OSError) -> None:
    """A send registered as pending whose write failed: part of it may have gone out, so it is unknown (unless
    the reader already answered it)."""
    with lock:
        p = pending.pop(key, None)
    if p is not None:
        p.callback(SendOutcome(Outcome.UNKNOWN, -1, queue, error=f"write failed: {exc}"[:200]))


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
