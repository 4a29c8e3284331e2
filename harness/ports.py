"""Ports for the name servers and brokers the lab starts as local processes.

A port found by binding port 0 and closing the socket is free at that moment only: until the server binds
it, an outgoing connection may take it as its local port (bind(0) hands out the same ephemeral range that
connect() uses), and another process asking at the same time — a parallel test worker under pytest-xdist,
a second run on the machine — may be handed the same one. So a port is taken here

- below the kernel's ephemeral range (net.ipv4.ip_local_port_range), where connect() never goes;
- with ``port + 1`` free too (a broker's HA port, as RocketMQ's haListenPort = listenPort + 1);
- claimed by a file created with O_EXCL in a directory every process of the lab shares, so no other
  process is handed it again for ``CLAIM_TTL_S``: long enough for a server to start and bind it, and to be
  killed and started again on the same port (chaos cycles, the fuzzer's restarts), when it is free for a
  moment.

Where none of that is possible (no ephemeral range to read, an unwritable temp directory) it falls back to
the plain bind check.
"""

from __future__ import annotations

import os
import random
import socket
import tempfile
import time
from pathlib import Path
from typing import Final

CLAIM_TTL_S: Final = 1800.0  # a full test run takes a few hundred of the ~22,000 ports below the range
CLAIM_DIR_NAME: Final = "rmq-lab-ports"
LOWEST: Final = 10_000  # below this, well-known and registered services
RANGE_FILE: Final = Path("/proc/sys/net/ipv4/ip_local_port_range")
_ATTEMPTS: Final = 200


class NoFreePort(RuntimeError):
    """No port pair could be found (every candidate is bound or claimed)."""


def candidate_range(range_file: Path = RANGE_FILE) -> range:
    """The ports below the ephemeral range, from LOWEST; empty when the range cannot be read or leaves none."""
    try:
        ephemeral_low = int(range_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return range(0)
    return range(LOWEST, ephemeral_low - 1)  # port + 1 must stay below it too


def port_pair_free(host: str, port: int) -> bool:
    return 0 < port < 65535 and bindable(host, port) and bindable(host, port + 1)


def bindable(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def claim_dir() -> Path:
    return Path(tempfile.gettempdir()) / CLAIM_DIR_NAME


def claim(directory: Path, port: int, now: float | None = None, ttl_s: float = CLAIM_TTL_S) -> bool:
    """Claim ``port`` for this process: False when a claim younger than ``ttl_s`` exists. An older claim is
    taken over (its server has bound the port long ago, or never will). Raises OSError when the directory
    cannot hold claims."""
    now = time.time() if now is None else now
    path = directory / str(port)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except FileExistsError:
        try:
            if now - path.stat().st_mtime < ttl_s:
                return False
            os.utime(path, (now, now))  # taken over; a racing taker may do the same: the bind check decides
        except FileNotFoundError:
            return claim(directory, port, now, ttl_s)
        return True
    try:
        os.write(fd, str(os.getpid()).encode())
    finally:
        os.close(fd)
    return True


def _claims_usable(directory: Path) -> bool:
    try:
        directory.mkdir(mode=0o1777, exist_ok=True)
        if directory.stat().st_uid == os.geteuid():
            directory.chmod(0o1777)  # every user of the machine may claim (mkdir's mode is cut by the umask)
    except OSError:
        return False
    return os.access(directory, os.W_OK | os.X_OK)


def free_port(host: str = "127.0.0.1", *, rng: random.Random | None = None) -> int:
    """A port whose pair (port, port + 1) is free now and claimed for this process (see the module doc)."""
    ports = candidate_range()
    directory = claim_dir()
    if len(ports) < _ATTEMPTS or not _claims_usable(directory):
        return _ephemeral_pair(host)
    pick = rng or random.SystemRandom()
    for _ in range(_ATTEMPTS):
        port = ports[pick.randrange(len(ports))]
        if not port_pair_free(host, port):
            continue
        try:
            if claim(directory, port):
                return port
        except OSError:
            return _ephemeral_pair(host)
    raise NoFreePort(f"no free port pair in {ports.start}..{ports.stop} after {_ATTEMPTS} tries")


def _ephemeral_pair(host: str) -> int:
    """The plain way: a port the kernel hands out for bind(0), with port + 1 free too."""
    for _ in range(_ATTEMPTS):
        with socket.socket() as s:
            s.bind((host, 0))
            port = int(s.getsockname()[1])
        if port_pair_free(host, port):
            return port
    raise NoFreePort("no free port pair found")
