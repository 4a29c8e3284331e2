"""This module owns the client message id, the UNIQ_KEY property (MessageClientIDSetter, 4.9.8).

Layout, written as uppercase hex (UtilAll.bytes2string), 32 characters with an IPv4 address:

| field     | bytes  | content                                                                   |
|-----------|--------|---------------------------------------------------------------------------|
| ip        | 4 / 16 | the client's address                                                      |
| pid       | 2      | process id, low 16 bits                                                   |
| salt      | 4      | Java: the class loader's identity hash; here: 4 random bytes per generator |
| time      | 4      | ms since 00:00 of the first day of the current month, local time          |
| counter   | 2      | per-generator counter, wrapping at 2^16                                   |

The first 20 hex digits (ip, pid, salt) are fixed per process; ``java_hash.concat_hash_code`` caches on
exactly that prefix. A clock stepped back by less than 1000 s gives time 0, as Java's NTP guard does.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import itertools
import os
import threading
import time
from typing import Final

_NTP_GUARD_MS: Final = 1_000_000  # Java clamps diffs in (-1000000, 0) to 0


def _month_bounds_ms(now_ms: int) -> tuple[int, int]:
    """Start of the current month and of the next one, local time, in epoch ms."""
    # Naive datetimes are local time, and .timestamp() resolves each one's own UTC offset (DST-safe).
    now = dt.datetime.fromtimestamp(now_ms / 1000)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    nxt = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
    return int(start.timestamp() * 1000), int(nxt.timestamp() * 1000)


class UniqIdGenerator:
    def __init__(self, ip: str = "127.0.0.1", pid: int | None = None, salt: bytes | None = None) -> None:
        ip_bytes = ipaddress.ip_address(ip).packed
        pid_bytes = ((os.getpid() if pid is None else pid) & 0xFFFF).to_bytes(2, "big")
        salt = os.urandom(4) if salt is None else salt
        if len(salt) != 4:
            raise ValueError("salt must be 4 bytes")
        self.prefix = (ip_bytes + pid_bytes + salt).hex().upper()
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._start_ms, self._next_start_ms = _month_bounds_ms(int(time.time() * 1000))

    def create(self, now_ms: int | None = None) -> str:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        if now >= self._next_start_ms or now < self._start_ms - _NTP_GUARD_MS:
            with self._lock:
                self._start_ms, self._next_start_ms = _month_bounds_ms(now)
        diff = now - self._start_ms
        if -_NTP_GUARD_MS < diff < 0:
            diff = 0
        # next() on itertools.count is atomic under the GIL (and under gevent, which never preempts it).
        return f"{self.prefix}{diff & 0xFFFFFFFF:08X}{next(self._counter) & 0xFFFF:04X}"


def parse_uniq_id(uid: str) -> tuple[str, int, int, int]:
    """(ip, pid, ms since month start, counter) from an id; ValueError when it is not one."""
    if len(uid) not in (32, 56):
        raise ValueError(f"a UNIQ_KEY has 32 or 56 hex characters, got {len(uid)}")
    raw = bytes.fromhex(uid)
    ip_len = len(raw) - 12
    ip = str(ipaddress.ip_address(raw[:ip_len]))
    pid = int.from_bytes(raw[ip_len:ip_len + 2], "big")
    diff = int.from_bytes(raw[ip_len + 6:ip_len + 10], "big")
    counter = int.from_bytes(raw[ip_len + 10:], "big")
    return ip, pid, diff, counter


def uniq_id_time_ms(uid: str, now_ms: int | None = None) -> int:
    """MessageClientIDSetter.getNearlyTimeFromID: the creation time, assuming it is at most a month old."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    _ip, _pid, diff, _counter = parse_uniq_id(uid)
    start, _next = _month_bounds_ms(now)
    if start + diff <= now:
        return start + diff
    prev_start, _ = _month_bounds_ms(start - 1)
    return prev_start + diff


_default: UniqIdGenerator | None = None
_default_lock = threading.Lock()


def default_generator(ip: str = "127.0.0.1") -> UniqIdGenerator:
    """The process-wide generator (Java's FIX_STRING is static); the first caller's ip wins."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = UniqIdGenerator(ip)
    return _default
