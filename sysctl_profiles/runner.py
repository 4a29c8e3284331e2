"""Running the command under a profile: signal forwarding and exit codes.

The child runs in its own process group, so a terminal Ctrl-C reaches only this process, which
forwards SIGINT (and SIGTERM, SIGHUP) to the child's whole group exactly once per signal received,
waits for it, and only then lets the caller restore. The child also gets SIGTERM if this process
dies without that chance (PR_SET_PDEATHSIG): a run must not go on after its settings were undone
by `restore`, nor under settings nobody will restore.

Being outside the terminal's foreground group, the command gets SIGTTIN if it reads the terminal;
workloads read no stdin. A command that ignores the forwarded signal is waited for, not killed:
send the signal again, or SIGKILL this process and run `restore`.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
from collections.abc import Callable, Sequence
from types import FrameType, TracebackType
from typing import Any

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def shell_exit_code(returncode: int) -> int:
    """Popen's returncode in the shell's convention: killed by signal N -> 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


class SignalForwarder:
    """While active: remember INT/TERM/HUP and forward each to the child's process group, if any."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.child_pgid: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> SignalForwarder:
        for sig in FORWARDED_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.received.append(signum)
        self._forward(signum)

    def _forward(self, signum: int) -> None:
        if self.child_pgid is not None:
            try:
                os.killpg(self.child_pgid, signum)
            except ProcessLookupError:
                pass

    def exit_code(self) -> int | None:
        """128 + the first signal received, or None."""
        return 128 + self.received[0] if self.received else None


def _die_with_parent(parent_pid: int) -> Callable[[], None]:
    libc = ctypes.CDLL(None, use_errno=True)

    def preexec() -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED_SIGNALS)  # blocked by run_child around the fork
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def run_child(command: Sequence[str], forwarder: SignalForwarder) -> int:
    """Run the command to its end; returns its exit code (128 + N when killed by signal N)."""
    # Signals are held while the child starts, so none falls between "started" and "known to the forwarder".
    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED_SIGNALS)
    try:
        proc = subprocess.Popen(list(command), process_group=0, preexec_fn=_die_with_parent(os.getpid()))
        forwarder.child_pgid = proc.pid
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED_SIGNALS)
    try:
        returncode = proc.wait()
    finally:
        forwarder.child_pgid = None
    return shell_exit_code(returncode)
