"""FilterServerManager (broker/.../filtersrv/FilterServerManager.java, 4.2.0): the broker's filter servers.

4.2.0 started ``filterServerNums`` filter servers through a shell command every 30 s when fewer had registered,
and kept the registered ones by channel, dropping one idle for 30 s (FILTER_SERVER_MAX_IDLE_TIME_MILLS). Here
the broker supervises its filter servers as child processes, by PID:

- each runs ``python -m reference_broker filtersrv --broker <this broker> --parent-pid <broker pid>
  --hide-path <storePathRootDir>`` (its workers cannot read the store); its
  stdout and stderr go to ``{storePathRootDir}/logs/filtersrv-<i>.log``;
- ``supervise()`` (every second on the loop) restarts one that has exited (at most once per
  ``RESTART_BACKOFF_S``); shutdown sends SIGTERM, then SIGKILL after ``STOP_TIMEOUT_S``, and reaps;
- a broker killed with -9 leaves no orphan: the filter server asked for PR_SET_PDEATHSIG and also watches its
  parent's PID, and its sandboxed workers die with it the same way;
- the registration table (REGISTER_FILTER_SERVER 301, a filter server's address by its connection) is what
  REGISTER_BROKER's filterServerList carries to the name servers; a filter server whose connection closes or
  that has not re-registered for 30 s leaves it.

With filterServerNums=0 (the default) nothing here runs: no process, no periodic task.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

from reference_broker.remoting.server import ConnectionContext

log = logging.getLogger(__name__)

FILTER_SERVER_MAX_IDLE_S: Final = 30.0  # FilterServerManager.FILTER_SERVER_MAX_IDLE_TIME_MILLS
SUPERVISE_INTERVAL_S: Final = 1.0  # ours: 4.2.0 looked every 30 s (createFilterServer)
RESTART_BACKOFF_S: Final = 1.0
STOP_TIMEOUT_S: Final = 5.0
# Ours (4.2.0 takes any address, any number): a client keeping its connection open cannot grow the table,
# nor REGISTER_BROKER's body, without bound.
MAX_REGISTERED: Final = 64
MAX_ADDR_CHARS: Final = 255


class FilterServerRefused(ValueError):
    """A REGISTER_FILTER_SERVER refused; the message is the remark."""


@dataclass
class _Child:
    index: int
    proc: subprocess.Popen[bytes] | None = None
    log_file: IO[bytes] | None = None
    started_at: float = 0.0
    starts: int = 0


@dataclass
class FilterServerInfo:
    addr: str
    ctx: ConnectionContext | None
    last_update: float


class FilterServerManager:
    def __init__(self, count: int, broker_addr: str, log_dir: Path, on_change: Callable[[], None],
                 extra_args: list[str] | None = None) -> None:
        self.count = count
        self.broker_addr = broker_addr
        self.log_dir = log_dir
        self.on_change = on_change  # re-register with the name servers soon
        self.extra_args = list(extra_args or [])
        self.children = [_Child(i) for i in range(count)]
        self.table: dict[str, FilterServerInfo] = {}  # filter server address -> its registration
        self.stopped = False

    # ---- processes ------------------------------------------------------------------------------------
    def command(self) -> list[str]:
        return [sys.executable, "-m", "reference_broker", "filtersrv", "--broker", self.broker_addr,
                "--parent-pid", str(os.getpid()), *self.extra_args]

    def _spawn(self, child: _Child) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        if child.log_file is None:
            child.log_file = open(self.log_dir / f"filtersrv-{child.index}.log", "ab")  # noqa: SIM115
        child.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=child.log_file,
                                      stderr=subprocess.STDOUT, close_fds=True)
        child.started_at = time.monotonic()
        child.starts += 1
        log.info("filter server %d started, pid %d", child.index, child.proc.pid)

    def pids(self) -> list[int]:
        return [c.proc.pid for c in self.children if c.proc is not None and c.proc.poll() is None]

    def start(self) -> None:
        for child in self.children:
            self._spawn(child)

    def supervise(self) -> None:
        """Restart the filter servers that have exited (on the broker's loop: Popen costs a few ms)."""
        if self.stopped:
            return
        now = time.monotonic()
        for child in self.children:
            proc = child.proc
            if proc is None or proc.poll() is None:
                continue
            if now - child.started_at < RESTART_BACKOFF_S:
                continue
            log.warning("filter server %d (pid %d) exited with %s: restarting it", child.index, proc.pid,
                        proc.returncode)
            self._spawn(child)

    def shutdown(self) -> None:
        """SIGTERM each by PID, SIGKILL the ones still running after STOP_TIMEOUT_S, reap all (blocking)."""
        self.stopped = True
        procs = [c.proc for c in self.children if c.proc is not None]
        for proc in procs:
            if proc.poll() is None:
                try:
                    os.kill(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for proc in procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        for child in self.children:
            if child.log_file is not None:
                child.log_file.close()
                child.log_file = None

    # ---- registrations --------------------------------------------------------------------------------
    def register(self, ctx: ConnectionContext | None, addr: str) -> None:
        """REGISTER_FILTER_SERVER (registerFilterServer): a new address makes the broker re-register soon;
        FilterServerRefused for an address that is not ``host:port`` or past the table's bound."""
        host, _, port = addr.rpartition(":")
        if not host or len(addr) > MAX_ADDR_CHARS or not port.isdigit() or not 0 < int(port) < 65536:
            raise FilterServerRefused(f"the filter server address {addr[:64]!r} is not host:port")
        info = self.table.get(addr)
        if info is None:
            if len(self.table) >= max(MAX_REGISTERED, 2 * self.count):
                raise FilterServerRefused(f"this broker already has {len(self.table)} filter servers")
            self.table[addr] = FilterServerInfo(addr, ctx, time.monotonic())
            log.info("Receive a New Filter Server %s", addr)
            self.on_change()
        else:
            info.ctx = ctx
            info.last_update = time.monotonic()

    def on_channel_close(self, ctx: ConnectionContext) -> None:
        gone = [a for a, info in self.table.items() if info.ctx is ctx]
        for addr in gone:
            del self.table[addr]
            log.info("The Filter Server %s connection closed, remove it", addr)
        if gone:
            self.on_change()

    def scan_not_active(self) -> None:
        now = time.monotonic()
        idle = [a for a, info in self.table.items() if now - info.last_update > FILTER_SERVER_MAX_IDLE_S]
        for addr in idle:
            del self.table[addr]
            log.warning("The Filter Server %s expired, remove it", addr)
        if idle:
            self.on_change()

    def build_new_filter_server_list(self) -> list[str]:
        return sorted(self.table.copy())  # a C-level copy: called from the registration thread
