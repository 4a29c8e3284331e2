"""This module owns the peer brokers' processes: NATS JetStream (``nats-server -js``) and RabbitMQ
(``rabbitmq-server``), Debian's packages (scripts/setup.sh), each started on loopback with a free port and a
private data directory, waited for until it serves, and stopped or killed by PID.

=============  ==========================================================================================
server         how it is started here
=============  ==========================================================================================
nats           ``nats-server -js -a 127.0.0.1 -p PORT -sd <root>/jetstream`` (file storage is JetStream's
               default for a stream; the store directory is private). Ready = a TCP connect answered with
               NATS's ``INFO`` line.
rabbitmq       ``/usr/lib/rabbitmq/bin/rabbitmq-server`` (not Debian's /usr/sbin wrapper, which switches to the
               ``rabbitmq`` user) with RABBITMQ_MNESIA_BASE / LOG_BASE / NODENAME / NODE_PORT / DIST_PORT /
               CONFIG_FILE / ENABLED_PLUGINS_FILE private, HOME = the private directory (its
               ``.erlang.cookie`` is written there, mode 0400), and ERL_EPMD_PORT = a free port on which this
               module starts its own ``epmd`` first — else the Erlang VM would spawn a daemonized epmd that
               outlives everything. Ready = the node port answers the AMQP 0-9-1 protocol header with
               its Connection.Start frame (it listens only once the broker has booted: seconds).
               RabbitMQ's script forks the VM and forwards SIGTERM to it; ``pid`` is the VM.
=============  ==========================================================================================

Both run in their own session: ``stop`` sends SIGTERM (RabbitMQ's script forwards it to the VM and waits),
``kill`` sends SIGKILL to the whole session (the VM, its port programs; nats-server alone), so no process is
left behind. ``restart`` starts again on the same directory and ports — what the kill -9 fault needs.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from harness.ports import free_port

PeerKind = Literal["nats", "rabbitmq"]
PEER_KINDS: Final[tuple[PeerKind, ...]] = ("nats", "rabbitmq")
LOOPBACK: Final = "127.0.0.1"
NATS_SERVER: Final = "nats-server"
RABBITMQ_SCRIPT: Final = "/usr/lib/rabbitmq/bin/rabbitmq-server"
EPMD: Final = "epmd"
NATS_READY_S: Final = 15.0
RABBITMQ_READY_S: Final = 90.0  # a cold boot on a loaded 2-core machine takes 10-30 s


class PeerUnavailable(RuntimeError):
    """The server's binary is not installed here (tests skip with this reason)."""


class PeerLaunchError(RuntimeError):
    """The server did not come up; the message carries the tail of its log."""


def unavailable_reason(kind: PeerKind) -> str | None:
    """Why ``kind`` cannot run here, or None when it can."""
    if kind == "nats":
        return None if shutil.which(NATS_SERVER) else "nats-server not installed (scripts/setup.sh as root)"
    if not Path(RABBITMQ_SCRIPT).exists():
        return f"{RABBITMQ_SCRIPT} not installed (scripts/setup.sh as root installs rabbitmq-server)"
    if shutil.which(EPMD) is None:
        return "epmd (erlang-base) not installed"
    return None


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _answers(port: int, expect: bytes, hello: bytes = b"", timeout_s: float = 1.0) -> bool:
    """True when a connection to ``port`` gets an answer starting with ``expect`` (after sending ``hello``)."""
    try:
        with socket.create_connection((LOOPBACK, port), timeout=timeout_s) as s:
            if hello:
                s.sendall(hello)
            return s.recv(len(expect)) == expect
    except OSError:
        return False


@dataclass
class _Proc:
    """One process in its own session, logging to ``log``."""

    name: str
    args: list[str]
    log: Path
    env: dict[str, str] | None = None
    proc: subprocess.Popen[bytes] | None = None

    def spawn(self) -> None:
        with open(self.log, "ab") as out:
            out.write(f"---- start {self.name}: {' '.join(self.args)}\n".encode())
            self.proc = subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=self.env, start_new_session=True)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal_group(self, sig: int) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        if self.proc is not None:
            self.signal_group(signal.SIGKILL)  # also after the leader exited: its children may still run
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
            _wait_group_gone(self.proc.pid, 10.0)  # the VM under the script dies after the script does

    def stop(self, timeout_s: float = 30.0) -> None:
        if not self.alive:
            self.kill()
            return
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            pass
        self.kill()


@dataclass
class PeerServer:
    """A peer broker on loopback: ``start()``, ``kill()`` (SIGKILL), ``restart()``, ``stop()``; ``cleanup()``
    also removes the private directory when this object made it."""

    kind: PeerKind
    root: Path | None = None
    port: int = 0
    _own_root: bool = False
    _server: _Proc | None = None
    _epmd: _Proc | None = None
    _epmd_port: int = 0
    _dist_port: int = 0
    extra_env: dict[str, str] = field(default_factory=dict)
    # Where the data directory lives, when not under ``root``: the chaos image faults put it on a loop-mounted
    # image (chaos.peer_faults) while the log, cookie and config stay on the ordinary disk.
    data_root: Path | None = None

    def __post_init__(self) -> None:
        reason = unavailable_reason(self.kind)
        if reason is not None:
            raise PeerUnavailable(reason)
        if self.root is None:
            self.root = Path(tempfile.mkdtemp(prefix=f"peer-{self.kind}-"))
            self._own_root = True
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port(LOOPBACK)

    @property
    def url(self) -> str:
        scheme = "nats" if self.kind == "nats" else "amqp"
        return f"{scheme}://{LOOPBACK}:{self.port}"

    @property
    def data_dir(self) -> Path:
        base = self.data_root if self.data_root is not None else self.root
        assert base is not None
        return base / ("jetstream" if self.kind == "nats" else "mnesia")

    @property
    def pid(self) -> int:
        """The server's own process (nats-server; the Erlang VM under RabbitMQ's script)."""
        assert self._server is not None and self._server.proc is not None
        leader = self._server.proc.pid
        if self.kind == "nats":
            return leader
        children = Path(f"/proc/{leader}/task/{leader}/children")
        try:
            kids = [int(x) for x in children.read_text().split()]
        except OSError:
            kids = []
        return kids[0] if kids else leader

    @property
    def alive(self) -> bool:
        return self._server is not None and self._server.alive

    @property
    def log_path(self) -> Path:
        assert self.root is not None
        return self.root / f"{self.kind}.log"

    # ---- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> PeerServer:
        if self.kind == "nats":
            self._start_nats()
        else:
            self._start_rabbitmq()
        return self

    def _start_nats(self) -> None:
        args = [NATS_SERVER, "-js", "-a", LOOPBACK, "-p", str(self.port), "-sd", str(self.data_dir),
                "-n", f"lab-{self.port}"]
        self._server = _Proc("nats-server", args, self.log_path)
        self._server.spawn()
        self._wait(lambda: _answers(self.port, b"INFO"), NATS_READY_S)

    def _rabbitmq_env(self) -> dict[str, str]:
        root = self.root
        assert root is not None
        cookie = root / ".erlang.cookie"
        if not cookie.exists():
            cookie.write_text(secrets.token_hex(16))
            cookie.chmod(0o400)
        plugins = root / "enabled_plugins"
        if not plugins.exists():
            plugins.write_text("[].\n")  # no management plugin: no extra listener, faster boot
        conf = root / "rabbitmq.conf"
        if not conf.exists():
            # Loopback only; the guest user may log in from loopback (RabbitMQ's default); a low disk limit so
            # a nearly full /tmp does not block publishers behind the disk alarm before the run starts.
            conf.write_text(f"listeners.tcp.1 = {LOOPBACK}:{self.port}\ndisk_free_limit.absolute = 50MB\n")
        return {**os.environ, "HOME": str(root), "RABBITMQ_MNESIA_BASE": str(self.data_dir),
                "RABBITMQ_LOG_BASE": str(root / "log"), "RABBITMQ_NODENAME": f"lab{self.port}@localhost",
                "RABBITMQ_NODE_IP_ADDRESS": LOOPBACK, "RABBITMQ_NODE_PORT": str(self.port),
                "RABBITMQ_DIST_PORT": str(self._dist_port), "RABBITMQ_CONFIG_FILE": str(conf),
                "RABBITMQ_ENABLED_PLUGINS_FILE": str(plugins), "RABBITMQ_PID_FILE": str(root / "rabbit.pid"),
                "RABBITMQ_LOGS": "-", "ERL_EPMD_PORT": str(self._epmd_port), "ERL_EPMD_ADDRESS": LOOPBACK,
                **self.extra_env}

    def _start_rabbitmq(self) -> None:
        assert self.root is not None
        if not self._epmd_port:
            self._epmd_port = free_port(LOOPBACK)
            self._dist_port = free_port(LOOPBACK)
        env = self._rabbitmq_env()
        if self._epmd is None or not self._epmd.alive:
            self._epmd = _Proc("epmd", [EPMD, "-port", str(self._epmd_port), "-address", LOOPBACK],
                               self.root / "epmd.log", env)
            self._epmd.spawn()
            self._wait(lambda: _port_open(self._epmd_port), 10.0, self._epmd)
        self._server = _Proc("rabbitmq-server", [RABBITMQ_SCRIPT], self.log_path, env)
        self._server.spawn()
        # AMQP 0-9-1 protocol header -> the Connection.Start method frame (type 1 on channel 0).
        self._wait(lambda: _answers(self.port, b"\x01\x00\x00", b"AMQP\x00\x00\x09\x01"), RABBITMQ_READY_S)

    def _wait(self, ready: Callable[[], bool], timeout_s: float, proc: _Proc | None = None) -> None:
        proc = proc or self._server
        assert proc is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not proc.alive:
                proc.kill()
                raise PeerLaunchError(f"{proc.name} exited while starting:\n{_tail(proc.log)}")
            if ready():
                if not proc.alive:  # what answered was another process on the port, not ours
                    proc.kill()
                    raise PeerLaunchError(f"{proc.name} exited while starting (something else answered on "
                                          f"its port):\n{_tail(proc.log)}")
                return
            time.sleep(0.1)
        self.stop()
        raise PeerLaunchError(f"{proc.name} not ready after {timeout_s} s:\n{_tail(proc.log)}")

    def kill(self) -> None:
        """SIGKILL to the server's session (kill -9): nothing gets to flush. epmd stays (it holds no data)."""
        if self._server is not None:
            self._server.kill()

    def pause(self) -> None:
        if self._server is not None:
            self._server.signal_group(signal.SIGSTOP)

    def resume(self) -> None:
        if self._server is not None:
            self._server.signal_group(signal.SIGCONT)

    def restart(self) -> None:
        if self.alive:
            self.stop_server()
        self.start()

    def stop_server(self) -> None:
        if self._server is not None:
            self._server.stop()

    def stop(self) -> None:
        """The server, then epmd; each by its process group, SIGKILL after a grace period."""
        self.stop_server()
        if self._epmd is not None:
            self._epmd.kill()

    def cleanup(self) -> None:
        self.stop()
        if self._own_root and self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PeerServer:
        try:
            return self.start()
        except BaseException:
            self.cleanup()  # the directory this object made, and epmd
            raise

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=0.5):
            return True
    except OSError:
        return False


def _group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``, from /proc."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:  # state, ppid, pgrp
            out.append(int(d.name))
    return out


def _wait_group_gone(pgid: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while _group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
