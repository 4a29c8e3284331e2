"""This module owns the filter server's handle on one sandboxed worker (sandbox.py): start it, hand it the
source, send it batches with a hard deadline, and kill it — by its PID — when it breaks the protocol, runs past
the deadline or dies. Everything the worker says is parsed strictly: it runs hostile code.

Blocking (pipes and ``poll``): the filter server calls it from its executor, one batch at a time per worker.
"""

from __future__ import annotations

import enum
import json
import logging
import marshal
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Final

from reference_broker.filtersrv.sandbox import FRAME_LEN, MAX_ERROR_BYTES

log = logging.getLogger(__name__)

# Our defaults (4.2.0 ran the class in the filter server's JVM without any limit).
DEFAULT_CPU_S: Final = 60  # RLIMIT_CPU over a worker's life; a worker that reaches it is replaced
DEFAULT_MEMORY_MIB: Final = 256  # RLIMIT_AS
DEFAULT_BUDGET_MS: Final = 100  # per message
START_TIMEOUT_S: Final = 10.0  # interpreter start and confinement
DEADLINE_SLACK_S: Final = 1.0  # on top of the batch's budgets, before the worker is killed
MAX_SOURCE_BYTES: Final = 256 * 1024


class Outcome(enum.Enum):
    OK = "ok"
    FILTER_ERROR = "filter error"  # match raised (the worker lives on)
    KILLED = "killed"  # past the deadline, broke the protocol or died; the next call starts a new worker


@dataclass(frozen=True)
class Verdicts:
    outcome: Outcome
    matched: tuple[bool, ...] = ()
    error: str = ""


@dataclass(frozen=True)
class SandboxLimits:
    cpu_s: int = DEFAULT_CPU_S
    memory_mib: int = DEFAULT_MEMORY_MIB
    budget_ms: int = DEFAULT_BUDGET_MS
    # Directories the worker must not even read (the broker's store: every group's messages), covered in its
    # mount namespace by an empty read-only tmpfs (as root; else left to the files' permissions).
    hidden_paths: tuple[str, ...] = ()


class WorkerError(Exception):
    """The worker could not be started or refused the source (the message says why)."""


class FilterWorker:
    """One worker process for one filter source; restarted on demand after it is killed."""

    def __init__(self, source: str, limits: SandboxLimits, label: str = "") -> None:
        self.source = source
        self.limits = limits
        self.label = label
        self.proc: subprocess.Popen[bytes] | None = None
        self.layers: list[str] = []
        self.starts = 0  # workers started for this source (a killed one is replaced at the next call)
        self._lock = threading.Lock()

    # ---- life cycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        """Start a worker and compile the source in it; WorkerError (the worker is gone) when it fails."""
        argv = [sys.executable, "-m", "reference_broker.filtersrv.sandbox", str(self.limits.cpu_s),
                str(self.limits.memory_mib), str(os.getpid()), *self.limits.hidden_paths]
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True)
        except OSError as exc:  # out of processes or memory: this group's error, not the filter server's
            raise WorkerError(f"the filter worker cannot be started: {exc}") from None
        self.proc = proc
        self.starts += 1
        try:
            hello = self._read(START_TIMEOUT_S)
            layers = json.loads(hello[1:]) if hello.startswith(b"H") else None
            self.layers = [str(x) for x in layers] if isinstance(layers, list) else []
            self._write(marshal.dumps((self.source, self.limits.budget_ms)))
            reply = self._read(self.limits.budget_ms * 10 / 1000 + START_TIMEOUT_S)
        except (OSError, EOFError, TimeoutError, ValueError, WorkerError) as exc:
            self.kill()
            raise WorkerError(f"the filter worker failed to start: {exc}") from None
        if reply == b"R":
            return
        self.kill()
        if reply.startswith(b"E"):
            raise WorkerError("the filter source is refused: " + _text(reply[1:]))
        raise WorkerError("the filter worker broke the protocol at start")

    def kill(self) -> None:
        """SIGKILL by PID, then reap (the worker may be nobody's, in its own namespaces: only we can end it)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()
        proc.wait()

    close = kill

    # ---- calls --------------------------------------------------------------------------------------
    def match(self, messages: Sequence[tuple[str, str | None, str, bytes, dict[str, str]]]) -> Verdicts:
        """The worker's verdicts on a batch; starts a worker first if there is none."""
        with self._lock:
            if self.proc is None or self.proc.poll() is not None:
                self.kill()  # reaps one that died between calls
                try:
                    self.start()
                except WorkerError as exc:
                    return Verdicts(Outcome.KILLED, error=str(exc))
            deadline_s = len(messages) * self.limits.budget_ms / 1000 + DEADLINE_SLACK_S
            try:
                self._write(marshal.dumps(list(messages)))
                reply = self._read(deadline_s)
            except TimeoutError:
                self.kill()
                return Verdicts(Outcome.KILLED, error=f"the filter ran past its deadline of {deadline_s:.1f} s "
                                                      "and its worker was killed")
            except (OSError, EOFError, ValueError) as exc:
                code = _exit_code(self.proc)
                self.kill()
                return Verdicts(Outcome.KILLED, error=f"the filter worker died ({_exit_text(code)}): {exc}")
            if reply.startswith(b"E"):
                return Verdicts(Outcome.FILTER_ERROR, error=_text(reply[1:]))
            body = reply[1:]
            if reply[:1] != b"R" or len(body) != len(messages) or body.strip(b"01"):
                self.kill()
                return Verdicts(Outcome.KILLED, error="the filter worker broke the protocol and was killed")
            return Verdicts(Outcome.OK, tuple(b == 0x31 for b in body))

    # ---- pipes --------------------------------------------------------------------------------------
    def _write(self, payload: bytes) -> None:
        proc = self.proc
        assert proc is not None and proc.stdin is not None
        stream: IO[bytes] = proc.stdin
        stream.write(FRAME_LEN.pack(len(payload)) + payload)
        stream.flush()

    def _read(self, timeout_s: float) -> bytes:
        """One frame from the worker within ``timeout_s``: TimeoutError, EOFError, or ValueError (too long)."""
        proc = self.proc
        assert proc is not None and proc.stdout is not None
        fd = proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        head = self._read_n(fd, FRAME_LEN.size, deadline)
        (n,) = FRAME_LEN.unpack(head)
        if n > 1 + max(MAX_ERROR_BYTES, 64 * 1024):  # verdicts of a batch, an error text or the hello
            raise ValueError(f"a frame of {n} bytes from the worker")
        return self._read_n(fd, n, deadline)

    @staticmethod
    def _read_n(fd: int, n: int, deadline: float) -> bytes:
        out = bytearray()
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        while len(out) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not poller.poll(left * 1000):
                raise TimeoutError("no answer in time")
            chunk = os.read(fd, n - len(out))
            if not chunk:
                raise EOFError("the worker closed its pipe")
            out += chunk
        return bytes(out)


def _exit_code(proc: subprocess.Popen[bytes] | None) -> int | None:
    """The exit status of a worker whose pipe just closed (it is exiting: wait a moment for it)."""
    if proc is None:
        return None
    try:
        return proc.wait(0.5)
    except subprocess.TimeoutExpired:
        return None


def _text(raw: bytes) -> str:
    return raw[:MAX_ERROR_BYTES].decode("utf-8", "replace")


def _exit_text(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
