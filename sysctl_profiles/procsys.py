"""The I/O edge: reading and writing /proc/sys, and reading MemTotal.

Writing /proc/sys/<path> directly is what sysctl(8) does, without spawning a process per key.
A value is written with one write(2): proc handlers parse each write on its own.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from pathlib import Path

from sysctl_profiles.errors import SysctlProfileError
from sysctl_profiles.plan import Reading, Unavailable
from sysctl_profiles.profile import is_valid_key, normalise

PROC_SYS = Path("/proc/sys")
MEMINFO = Path("/proc/meminfo")


def key_path(key: str) -> Path:
    if not is_valid_key(key):
        raise SysctlProfileError(f"bad sysctl key {key!r}")
    return PROC_SYS.joinpath(*key.split("."))


def read_one(key: str) -> Reading:
    try:
        return normalise(key_path(key).read_text())
    except FileNotFoundError:
        return Unavailable.MISSING
    except IsADirectoryError:
        return Unavailable.MISSING
    except OSError as e:
        if e.errno in (errno.EACCES, errno.EPERM, errno.EINVAL):
            return Unavailable.UNREADABLE
        raise


def probe(keys: Iterable[str]) -> dict[str, Reading]:
    """Values in force (normalised), or why a key has none."""
    return {key: read_one(key) for key in keys}


def read_values(keys: Iterable[str]) -> dict[str, str]:
    """Values in force, whitespace-normalised; raises SysctlProfileError for a missing/unreadable key."""
    out: dict[str, str] = {}
    for key, reading in probe(keys).items():
        if isinstance(reading, Unavailable):
            raise SysctlProfileError(f"{key}: {reading.value}")
        out[key] = reading
    return out


def write_value(key: str, value: str) -> None:
    """Write one value; raises OSError as the kernel reports it (EINVAL, EACCES, EROFS, ...)."""
    fd = os.open(key_path(key), os.O_WRONLY)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def is_writable(key: str) -> bool:
    # access(2) asks the proc_sys permission hook (mode bits apply to root there) and the mount.
    return os.access(key_path(key), os.W_OK)


def parse_mem_total(meminfo_text: str) -> int:
    """MemTotal in bytes from /proc/meminfo text."""
    for line in meminfo_text.splitlines():
        if line.startswith("MemTotal:"):
            fields = line.split()
            return int(fields[1]) * (1024 if fields[2:] == ["kB"] else 1)
    raise SysctlProfileError("no MemTotal line in /proc/meminfo")


def mem_total_bytes() -> int:
    return parse_mem_total(MEMINFO.read_text())
