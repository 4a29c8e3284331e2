"""This module owns the sandboxed worker process that runs one uploaded filter (``def match(message) -> bool``).

RocketMQ ≤ 4.2's filter server compiled the consumer's uploaded Java class into its own JVM
(FilterClassManager / DynaCode) and called it there. Uploaded code is hostile until proven otherwise, so here it
never runs in the broker, nor even in the filter server: each (consumer group, topic) filter gets a child
process of its own, started with ``python -m reference_broker.filtersrv.sandbox`` and confined before the
uploaded source is compiled:

- resource limits: RLIMIT_CPU (CPU seconds over the worker's life; SIGXCPU/SIGKILL ends it), RLIMIT_AS (a
  bounded allocation is a MemoryError), RLIMIT_FSIZE 0 (no file grows), RLIMIT_NPROC 0 for the unprivileged
  uid (no fork);
- as root: its own network namespace (only a down loopback: no connect, not even to the broker), its own mount
  namespace with read-only empty tmpfs over the world-writable directories (/tmp, /var/tmp, /dev/shm) and over
  the hidden paths it is given (the broker's store: its error replies would otherwise be a way out for other
  groups' messages), then
  uid/gid ``nobody`` with no supplementary groups, so it can signal no other process; PR_SET_NO_NEW_PRIVS;
- PR_SET_PDEATHSIG: it dies with its filter server (and an EOF on stdin ends it too);
- an audit hook (PEP 578) refusing process creation, os.system, os.kill and signals, sockets, opening a file
  for writing, file-system changes and ctypes, as defence in depth behind the limits above;
- a per-message CPU-time budget (ITIMER_PROF: SIGPROF raises inside ``match``; CPU time, so a worker that a
  loaded machine leaves waiting is not charged for it); the filter server's hard wall-clock deadline per batch
  kills a worker that swallows that exception.

Where a layer cannot be applied (not root) the worker says which in its hello, and runs with the others.

Frames on stdin/stdout are a 4-byte big-endian length and a payload. Parent → worker payloads are marshal
data (the parent is trusted; the worker's answers are not, and are parsed strictly by filter_worker.py):

| frame                  | payload                                                                        |
|------------------------|--------------------------------------------------------------------------------|
| hello (worker → parent)| ``H`` + UTF-8 JSON list of the layers applied                                  |
| source (parent → w.)   | marshal ``(source: str, budget_ms: int)``                                      |
| batch (parent → w.)    | marshal ``[(topic, tags or None, keys, body: bytes, properties: dict), ...]``  |
| verdicts (worker → p.) | ``R`` + one byte per message, ``0`` or ``1``                                   |
| error (worker → p.)    | ``E`` + UTF-8 text (at most ``MAX_ERROR_BYTES``)                               |
"""

from __future__ import annotations

import json
import marshal
import os
import resource
import signal
import struct
import sys
from collections.abc import Callable
from typing import Any, Final

FRAME_LEN: Final = struct.Struct(">I")
MAX_ERROR_BYTES: Final = 2048
MAX_IN_FRAME: Final = 64 * 1024 * 1024  # a batch of 32 messages of up to 4 MiB each, with room

# Linux constants (linux/sched.h, linux/prctl.h, linux/mount.h).
CLONE_NEWNS: Final = 0x00020000
CLONE_NEWNET: Final = 0x40000000
PR_SET_PDEATHSIG: Final = 1
PR_SET_NO_NEW_PRIVS: Final = 38
MS_RDONLY: Final = 1
MS_NOSUID: Final = 2
MS_NODEV: Final = 4
MS_NOEXEC: Final = 8
MS_REC: Final = 0x4000
MS_PRIVATE: Final = 0x40000
WORLD_WRITABLE_DIRS: Final = ("/tmp", "/var/tmp", "/dev/shm")

# Audit events refused once the uploaded code may run (https://docs.python.org/3/library/audit_events.html).
REFUSED_EVENTS: Final = frozenset({
    "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "os.startfile", "pty.spawn",
    "subprocess.Popen", "os.kill", "os.killpg", "signal.pthread_kill", "os.remove", "os.rename", "os.rmdir",
    "os.mkdir", "os.truncate", "os.chmod", "os.chown", "os.symlink", "os.link", "os.utime", "os.chdir",
    "os.chflags", "os.lchflags", "os.setxattr", "os.removexattr", "shutil.rmtree", "shutil.copyfile",
    "shutil.move", "shutil.chown", "os.putenv", "os.unsetenv", "sys.setprofile", "sys.settrace",
    "resource.setrlimit", "resource.prlimit", "mmap.__new__", "sys.remote_exec",
})
REFUSED_PREFIXES: Final = ("socket.", "ctypes.", "_posixsubprocess", "winreg.", "webbrowser.", "urllib.",
                           "http.", "ftplib.", "smtplib.", "telnetlib.", "poplib.", "imaplib.", "nntplib.")
REFUSED_IMPORTS: Final = frozenset({"socket", "_socket", "ssl", "_ssl", "subprocess", "_posixsubprocess",
                                    "ctypes", "_ctypes", "multiprocessing", "_multiprocessing", "pty", "select",
                                    "selectors", "asyncio", "signal", "_signal", "mmap", "resource", "fcntl"})
WRITE_FLAGS: Final = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class SandboxViolation(PermissionError):
    """An uploaded filter did what the sandbox refuses."""


class BudgetExceeded(Exception):
    """``match`` ran past the per-message time budget."""


def audit_hook(event: str, args: tuple[Any, ...]) -> None:
    """Refuse the events that reach outside the worker (installed after set-up, before the uploaded code)."""
    if event in REFUSED_EVENTS or event.startswith(REFUSED_PREFIXES):
        raise SandboxViolation(f"the filter sandbox refuses {event}")
    if event == "import" and args and isinstance(args[0], str) and args[0].split(".")[0] in REFUSED_IMPORTS:
        raise SandboxViolation(f"the filter sandbox refuses importing {args[0]}")
    if event == "open" and len(args) >= 3:
        mode, flags = args[1], args[2]
        if (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & WRITE_FLAGS):
            raise SandboxViolation(f"the filter sandbox refuses opening {args[0]!r} for writing")


# ---- frames (both sides) ---------------------------------------------------------------------------------

def read_exact(fd: int, n: int) -> bytes:
    """``n`` bytes from ``fd``; EOFError when it closes first."""
    chunks: list[bytes] = []
    while n > 0:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            raise EOFError("pipe closed")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def write_frame(fd: int, payload: bytes) -> None:
    data = memoryview(FRAME_LEN.pack(len(payload)) + payload)
    while data:
        data = data[os.write(fd, data):]


def read_frame(fd: int, limit: int = MAX_IN_FRAME) -> bytes:
    (n,) = FRAME_LEN.unpack(read_exact(fd, FRAME_LEN.size))
    if n > limit:
        raise ValueError(f"frame of {n} bytes is over the limit of {limit}")
    return read_exact(fd, n)


# ---- confinement (worker side) ---------------------------------------------------------------------------

class Limits:
    """What the filter server asks of a worker (command-line arguments of this module)."""

    def __init__(self, cpu_s: int, memory_mib: int, parent_pid: int, hidden: tuple[str, ...] = ()) -> None:
        self.hidden = hidden
        self.cpu_s = cpu_s
        self.memory_mib = memory_mib
        self.parent_pid = parent_pid


def _libc() -> Any:
    import ctypes
    import ctypes.util

    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def confine(limits: Limits) -> list[str]:
    """Apply every layer this process can; the names of those applied (the hello's list)."""
    applied: list[str] = []
    libc = _libc()
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
        applied.append("pdeathsig")
    if os.getppid() != limits.parent_pid:  # the filter server died before the line above
        os._exit(1)
    if os.geteuid() == 0:
        if libc.unshare(CLONE_NEWNET | CLONE_NEWNS) == 0:
            applied.append("netns")
            if libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) == 0:
                ro = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
                if all(libc.mount(b"none", d.encode(), b"tmpfs", ro, b"size=4k") == 0
                       for d in WORLD_WRITABLE_DIRS if os.path.isdir(d)):
                    applied.append("ro-tmp")
                # After /tmp: a hidden directory under /tmp is already out of sight (and no longer a mount point).
                if limits.hidden and all(libc.mount(b"none", d.encode(), b"tmpfs", ro, b"size=4k") == 0
                                         for d in limits.hidden if os.path.isdir(d)):
                    applied.append("hidden-paths")
        try:
            import pwd

            nobody = pwd.getpwnam("nobody")
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            applied.append("uid-nobody")
        except (KeyError, OSError):
            pass
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0:
        applied.append("no-new-privs")
    for which, value, name in ((resource.RLIMIT_CPU, limits.cpu_s, "rlimit-cpu"),
                               (resource.RLIMIT_AS, limits.memory_mib * 1024 * 1024, "rlimit-as"),
                               (resource.RLIMIT_FSIZE, 0, "rlimit-fsize"),
                               (resource.RLIMIT_CORE, 0, "rlimit-core")):
        try:
            resource.setrlimit(which, (value, value))
            applied.append(name)
        except (ValueError, OSError):
            pass
    if os.getuid() != 0:  # for root RLIMIT_NPROC is not enforced; for nobody it forbids fork
        try:
            resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
            applied.append("rlimit-nproc")
        except (ValueError, OSError):
            pass
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    # Modules set-up loaded (ctypes, signal, ...) would be imported again without an "import" event: forget
    # them, so that the uploaded code's import of one is refused too (this module keeps its own references).
    for name in [n for n in sys.modules if n.split(".")[0] in REFUSED_IMPORTS]:
        del sys.modules[name]
    sys.addaudithook(audit_hook)
    applied.append("audit-hook")
    return applied


class _Message:
    """What ``match`` sees: ``.topic .tags .keys .body .properties`` (a copy; changing it changes nothing)."""

    __slots__ = ("body", "keys", "properties", "tags", "topic")

    def __init__(self, topic: str, tags: str | None, keys: str, body: bytes, properties: dict[str, str]) -> None:
        self.topic = topic
        self.tags = tags
        self.keys = keys
        self.body = body
        self.properties = properties

    def __repr__(self) -> str:
        return f"Message(topic={self.topic!r}, tags={self.tags!r}, keys={self.keys!r})"


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:MAX_ERROR_BYTES]


def _on_alarm(_signum: int, _frame: object) -> None:
    raise BudgetExceeded("match exceeded its per-message time budget")


def compile_filter(source: str) -> Callable[[Any], Any]:
    """Compile and run the module, return its ``match``; ValueError when there is none."""
    namespace: dict[str, Any] = {"__name__": "uploaded_filter"}
    exec(compile(source, "<uploaded filter>", "exec"), namespace)  # the point of the sandbox
    fn = namespace.get("match")
    if not callable(fn):
        raise ValueError("the filter source does not define match(message)")
    return fn  # type: ignore[no-any-return]


def serve(limits: Limits, rfd: int = 0, wfd: int = 1) -> None:
    """The worker's life: confine, hello, compile the source, then answer batches until EOF."""
    applied = confine(limits)
    write_frame(wfd, b"H" + json.dumps(applied).encode())
    source, budget_ms = marshal.loads(read_frame(rfd))
    signal.signal(signal.SIGPROF, _on_alarm)
    budget_s = max(budget_ms, 1) / 1000
    try:
        signal.setitimer(signal.ITIMER_PROF, budget_s * 10)  # the module's top level gets ten budgets
        try:
            match = compile_filter(source)
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
    except BaseException as exc:  # noqa: BLE001 - whatever the source does is reported, not raised
        write_frame(wfd, b"E" + _describe(exc).encode("utf-8", "replace")[:MAX_ERROR_BYTES])
        return
    write_frame(wfd, b"R")
    while True:
        try:
            batch = marshal.loads(read_frame(rfd))
        except EOFError:
            return
        verdicts = bytearray()
        try:
            for topic, tags, keys, body, props in batch:
                signal.setitimer(signal.ITIMER_PROF, budget_s)
                try:
                    verdicts.append(0x31 if match(_Message(topic, tags, keys, body, dict(props))) else 0x30)
                finally:
                    signal.setitimer(signal.ITIMER_PROF, 0)
        except BaseException as exc:  # noqa: BLE001 - the group's error reply, the worker goes on
            write_frame(wfd, b"E" + _describe(exc).encode("utf-8", "replace")[:MAX_ERROR_BYTES])
            continue
        write_frame(wfd, b"R" + bytes(verdicts))


def main(argv: list[str]) -> None:
    cpu_s, memory_mib, parent_pid = (int(a) for a in argv[:3])
    # Our own fds: stdin/stdout are the pipes; stderr the filter server's log. Uploaded code writing to them
    # can garble only its own group's answers.
    serve(Limits(cpu_s, memory_mib, parent_pid, tuple(argv[3:])))


if __name__ == "__main__":
    main(sys.argv[1:])
