"""This module owns the embedded topology: a name server and brokers as real subprocesses on a store directory,
started with a broker.conf per broker, waited for until ready, stopped cleanly (SIGTERM) or killed (SIGKILL).

The scenarios and the chaos suite share it; tests use it for end-to-end runs. Ports are picked free on
127.0.0.1 (harness/ports.py); every process logs to ``<root>/<name>.log``.

Either implementation runs: the reference broker (``impl="reference"``), or Apache RocketMQ from a distribution
directory (``impl="rocketmq"``, harness/rocketmq.py), with the same broker.conf keys and store directory.

A broker group is a master and its slaves (classic HA, not DLedger): each its own process, store and ports, the
same ``brokerName``; a slave has ``brokerRole=SLAVE`` and ``brokerId`` 1, 2, ... and replicates the master's
commit log from the master's HA port (haListenPort, listenPort + 1 unless the conf sets it).

With a lab network (``lab=``, chaos/netns.py: a network namespace per test host, joined by a bridge in the root
namespace) each broker runs on a host of its own (``ip netns exec``, which execs: the pid is the broker's),
listening on RocketMQ's default port 10911 at the host's address, which is its brokerIP1 (and RocketMQ's
brokerIP2, the HA address it registers), its slave's haMasterAddress and ``BrokerProcess.addr``. The name server
stays in the root namespace, bound to the bridge's address: it sits with the clients, so "clients <-> master"
is one address to cut (chaos/partition.py), and the brokers reach it over their veth like any client. Without a
lab everything is on 127.0.0.1, as before.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Generic, Protocol, TypeVar

from harness import rocketmq
from harness.ports import free_port
from harness.rocketmq import BrokerImpl

READY_TIMEOUT_S = 30.0
BOOT_LINE_BROKER = "boot success"
BOOT_LINE_NAMESRV = "The Name Server boot success"
LOOPBACK: Final = "127.0.0.1"
LAB_LISTEN_PORT: Final = 10911  # BrokerConfig/NettyServerConfig default listenPort (4.9.8): each host is its own


class LabHost(Protocol):
    """A test host of a lab network (chaos.netns.Host)."""

    @property
    def addr(self) -> str: ...

    def exec_prefix(self) -> list[str]: ...


class NetLab(Protocol):
    """A lab network (chaos.netns.Lab): the root namespace's address on it, and a host per broker name."""

    @property
    def gateway(self) -> str: ...

    def host(self, name: str) -> LabHost: ...


class LaunchError(RuntimeError):
    """A process of the topology did not start; the message carries the tail of its log."""


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class Process:
    name: str
    args: list[str]
    log_path: Path
    ready_line: str
    proc: subprocess.Popen[bytes] | None = None
    env: dict[str, str] | None = None  # None: this process's environment
    # A JVM started through a distribution's script: its own session, signalled as a group (harness/rocketmq.py).
    group: bool = False
    ready_timeout_s: float = READY_TIMEOUT_S
    # Called with the child's pid right after the spawn, before it runs far enough to map its store (a memory
    # cgroup's admit: pages are charged to the group the process is in when it faults them in). Its children
    # (the JVM under RocketMQ's script) inherit the placement. An error kills the process and fails the start.
    spawn_hook: Callable[[int], None] | None = None

    @property
    def pid(self) -> int:
        """The process doing the work (for a group, the JVM under the script)."""
        assert self.proc is not None
        return rocketmq.jvm_pid(self.proc.pid) if self.group else self.proc.pid

    def _signal(self, sig: int) -> None:
        assert self.proc is not None
        if self.group:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass
        else:
            self.proc.send_signal(sig)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout_s: float | None = None) -> None:
        if timeout_s is None:
            timeout_s = self.ready_timeout_s
        with open(self.log_path, "ab") as log:
            log.write(f"---- start {self.name}: {' '.join(self.args)}\n".encode())
            start_size = log.tell()
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env={**(self.env or os.environ), "PYTHONUNBUFFERED": "1"},
                                         start_new_session=self.group)
        if self.spawn_hook is not None:
            try:
                self.spawn_hook(self.proc.pid)
            except BaseException:
                self.kill()
                raise
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise LaunchError(f"{self.name} exited with {self.proc.returncode} while starting:\n"
                                  f"{_tail(self.log_path)}")
            with open(self.log_path, "rb") as f:
                f.seek(start_size)
                if self.ready_line.encode() in f.read():
                    return
            time.sleep(0.05)
        self.kill()
        raise LaunchError(f"{self.name} not ready after {timeout_s} s:\n{_tail(self.log_path)}")

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM and wait (the broker's graceful shutdown); SIGKILL if it does not end in time."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self._signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self) -> None:
        """SIGKILL: the process gets no chance to flush or persist anything."""
        if self.proc is not None and self.proc.poll() is None:
            self._signal(signal.SIGKILL)
            self.proc.wait(10)

    def pause(self, timeout_s: float = 5.0) -> None:
        """SIGSTOP, and return once the process is stopped: the signal is delivered asynchronously, so a
        caller that acts right after sending it could otherwise race threads that are still running."""
        if not self.alive:
            return
        self._signal(signal.SIGSTOP)
        stat = Path(f"/proc/{self.pid}/stat")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                state = stat.read_text().rsplit(")", 1)[1].split()[0]  # the field after "(comm)"
            except (OSError, IndexError):
                return  # gone, or no procfs: nothing more to wait for
            if state in ("T", "t"):
                return
            time.sleep(0.005)

    def resume(self) -> None:
        if self.alive:
            self._signal(signal.SIGCONT)


class BrokerRole:
    """What a broker's conf says about its place in its group; a broker process's and a broker container's
    (harness/containers.py)."""

    name: str
    conf: dict[str, str]
    port: int

    @property
    def role(self) -> str:
        """brokerRole: ASYNC_MASTER (the default of both implementations), SYNC_MASTER or SLAVE."""
        return self.conf.get("brokerRole", "ASYNC_MASTER")

    @property
    def is_slave(self) -> bool:
        return self.role == "SLAVE"

    @property
    def ha_port(self) -> int:
        """Where a master listens for slaves: BrokerStartup sets haListenPort to listenPort + 1 (4.9.8 even over
        a configured one; the reference broker keeps a configured one)."""
        return int(self.conf.get("haListenPort", self.port + 1))


@dataclass
class BrokerProcess(BrokerRole, Process):
    port: int = 0
    store_root: Path = Path()
    conf: dict[str, str] = field(default_factory=dict)
    host: str = LOOPBACK  # the address it listens on: its lab host's, or loopback

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    def restart(self, timeout_s: float | None = None) -> None:
        if self.alive:
            self.stop()
        self.start(timeout_s)


BROKER_CONF_ENV = "RMQ_LAB_BROKER_CONF"


def env_broker_conf() -> dict[str, str]:
    """Defaults under every broker this launcher starts, from ``RMQ_LAB_BROKER_CONF="k=v;k=v"``: the test
    suite uses it for small files (RocketMQ's 1 GiB commit-log and ~420 MB index files are reserved on
    disk up front, and dozens of end-to-end topologies would fill the disk). Explicit ``broker_conf`` wins."""
    out = {}
    for item in os.environ.get(BROKER_CONF_ENV, "").split(";"):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            out[key.strip()] = value.strip()
    return out


def write_broker_conf(path: Path, conf: Mapping[str, Any]) -> None:
    path.write_text("".join(f"{k}={v}\n" for k, v in conf.items()), encoding="utf-8")


B = TypeVar("B", bound=BrokerRole)


class BrokerGroups(Generic[B]):
    """Broker groups of a topology, whatever runs the brokers (processes here, containers in
    harness/containers.py): the masters and slaves ``start`` makes, a slave's brokerId and conf, a group."""

    brokers: list[B]
    n_brokers: int
    n_slaves: int

    def add_broker(self, name: str, extra: Mapping[str, Any] | None = None) -> B:
        raise NotImplementedError

    def start_brokers(self) -> None:
        """broker-a, broker-b, ... each with ``n_slaves`` slaves."""
        for i in range(self.n_brokers):
            master = self.add_broker(f"broker-{chr(ord('a') + i)}")
            for _ in range(self.n_slaves):
                self.add_slave(master)

    def add_slave(self, master: B, name: str | None = None, extra: Mapping[str, Any] | None = None) -> B:
        raise NotImplementedError

    def slave_conf(self, master: B) -> tuple[str, dict[str, Any]]:
        """A new slave of ``master``'s group: its default name and conf (the next free brokerId, SLAVE)."""
        if master.is_slave:
            raise ValueError(f"{master.name} is a slave: a slave replicates from a master")
        group = self.group(master.conf["brokerName"])
        broker_id = 1 + max((int(b.conf["brokerId"]) for b in group), default=0)
        return f"{master.name}-s{broker_id}", {"brokerName": master.conf["brokerName"], "brokerId": str(broker_id),
                                               "brokerRole": "SLAVE", "slaveReadEnable": "true"}

    def group(self, broker_name: str) -> list[B]:
        """The brokers of one group (brokerName), master first."""
        return sorted((b for b in self.brokers if b.conf.get("brokerName") == broker_name),
                      key=lambda b: int(b.conf.get("brokerId", "0")))

    def slaves_of(self, master: B) -> list[B]:
        return [b for b in self.group(master.conf["brokerName"]) if b.is_slave]


class Topology(BrokerGroups[BrokerProcess]):
    """``with Topology(root) as topo:`` — one name server and ``brokers`` brokers, all local subprocesses, of
    the reference broker or (``impl="rocketmq"``) of the RocketMQ distribution at ``rocketmq_home``
    (harness/rocketmq.find_home: ``$ROCKETMQ_HOME`` or the one beside the repository when None). With ``lab``
each broker runs on a host of that lab network (see the module doc)."""

    def __init__(self, root: Path | str | None = None, broker_conf: Mapping[str, Any] | None = None,
                 brokers: int = 1, python: str = sys.executable, impl: BrokerImpl = "reference",
                 rocketmq_home: Path | str | None = None, rocketmq_heap: str | None = None,
                 slaves: int = 0, lab: NetLab | None = None,
                 broker_spawn_hook: Callable[[int], None] | None = None) -> None:
        if impl not in rocketmq.IMPLS:
            raise ValueError(f"unknown broker implementation {impl!r}: one of {', '.join(rocketmq.IMPLS)}")
        self.impl: BrokerImpl = impl
        self.rocketmq_home: Path | None = None
        self.rocketmq_heap = rocketmq_heap  # None: $ROCKETMQ_HEAP, else 512m (harness/rocketmq.java_env)
        if impl == "rocketmq":
            reason = rocketmq.unavailable(rocketmq_home)
            if reason is not None:
                raise LaunchError(reason)
            self.rocketmq_home = rocketmq.find_home(rocketmq_home)
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if root is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="rmq-lab-topology-")
            root = self._tmp.name
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.python = python
        self.broker_conf = dict(broker_conf or {})
        self.n_brokers = brokers
        self.n_slaves = slaves  # per broker that start() starts
        self.namesrv: Process | None = None
        self.namesrv_port = 0
        self.brokers: list[BrokerProcess] = []
        self.lab = lab
        self.broker_spawn_hook = broker_spawn_hook  # each broker's Process.spawn_hook (harness/memory_cgroup.py)
        self.namesrv_host = lab.gateway if lab is not None else LOOPBACK

    @property
    def namesrv_addr(self) -> str:
        return f"{self.namesrv_host}:{self.namesrv_port}"

    def start(self) -> Topology:
        try:
            self.namesrv_port = free_port(self.namesrv_host)
            if self.rocketmq_home is not None:
                conf = self.root / "namesrv.conf"
                # kvConfigPath under the topology's root: RocketMQ's default is the user's home.
                kv_path = self.root / "namesrv" / "kvConfig.json"
                conf.write_text(f"listenPort={self.namesrv_port}\nkvConfigPath={kv_path}\n", encoding="utf-8")
                self.namesrv = Process("namesrv", rocketmq.namesrv_args(self.rocketmq_home, conf),
                                       self.root / "namesrv.log", BOOT_LINE_NAMESRV, **self._java("namesrv"))
            else:
                self.namesrv = Process("namesrv", [self.python, "-m", "reference_broker", "namesrv", "--host",
                                                   self.namesrv_host, "-p", str(self.namesrv_port), "--kv-config-path",
                                                   str(self.root / "namesrv" / "kvConfig.json")],
                                       self.root / "namesrv.log", BOOT_LINE_NAMESRV)
            self.namesrv.start()
            self.start_brokers()
        except BaseException:
            self.stop()
            raise
        return self

    def _java(self, name: str) -> dict[str, Any]:
        """How a RocketMQ process of this topology runs: its environment (home, heap, ``-Duser.home``), as
        a process group, with the JVM's boot time."""
        assert self.rocketmq_home is not None
        return {"env": rocketmq.java_env(self.rocketmq_home, self.root / name / "rmq-home", self.rocketmq_heap),
                "group": True,
                "ready_timeout_s": rocketmq.BOOT_TIMEOUT_S}

    def add_broker(self, name: str, extra: Mapping[str, Any] | None = None) -> BrokerProcess:
        home = self.rocketmq_home
        prefix: list[str] = []
        if self.lab is not None:
            lab_host = self.lab.host(name)
            ip, port, prefix = lab_host.addr, LAB_LISTEN_PORT, lab_host.exec_prefix()
        else:
            ip, port = LOOPBACK, rocketmq.broker_port() if home is not None else free_port()
        store_root = self.root / name / "store"
        store_root.mkdir(parents=True, exist_ok=True)
        conf: dict[str, str] = {
            "brokerClusterName": "DefaultCluster", "brokerName": name, "brokerId": "0",
            "listenPort": str(port), "storePathRootDir": str(store_root), "brokerIP1": ip,
        }
        if home is not None and self.lab is not None:
            # 4.9.8 registers haServerAddr as brokerIP2:haListenPort, brokerIP2 defaulting to the first
            # non-loopback address it finds (the reference broker uses brokerIP1 and has no such key).
            conf["brokerIP2"] = ip
        conf.update(env_broker_conf())
        conf.update({k: str(v) for k, v in self.broker_conf.items()})
        conf.update({k: str(v) for k, v in (extra or {}).items()})
        store_root = Path(conf["storePathRootDir"])  # a caller's (a chaos cell's loop mount) over the default
        if home is not None:
            conf = {**rocketmq.broker_conf_extra(store_root, self.namesrv_addr), **conf}
        conf_path = self.root / name / "broker.conf"
        write_broker_conf(conf_path, conf)
        if home is not None:
            bp = BrokerProcess(name, prefix + rocketmq.broker_args(home, self.namesrv_addr, conf_path),
                               self.root / f"{name}.log", BOOT_LINE_BROKER, port=port, store_root=store_root,
                               conf=conf, host=ip, **self._java(name))
        else:
            bp = BrokerProcess(name, [*prefix, self.python, "-m", "reference_broker", "broker", "--host", ip,
                                      "-n", self.namesrv_addr, "-c", str(conf_path)],
                               self.root / f"{name}.log", BOOT_LINE_BROKER, port=port, store_root=store_root,
                               conf=conf, host=ip)
        bp.spawn_hook = self.broker_spawn_hook
        self.brokers.append(bp)  # before it starts: stop() then ends it even if its start fails
        bp.start()
        return bp

    def add_slave(self, master: BrokerProcess, name: str | None = None,
                  extra: Mapping[str, Any] | None = None) -> BrokerProcess:
        """Start a slave of ``master``'s group: the next free brokerId, its own store and ports.

        slaveReadEnable is set because 4.9.8's PullMessageProcessor answers a slave's pulls with
        PULL_RETRY_IMMEDIATELY without it, and a run that lost its master reads from the slave. RocketMQ's slave
        gets haMasterAddress too, so it connects without waiting for a name-server registration round (the
        reference slave learns it from the name server's reply, as 4.9.8's does without the key)."""
        default_name, conf = self.slave_conf(master)
        if self.rocketmq_home is not None:
            conf["haMasterAddress"] = f"{master.host}:{master.ha_port}"
        conf.update(extra or {})
        return self.add_broker(name or default_name, extra=conf)

    def stop(self) -> None:
        for b in self.brokers:
            b.stop()
        if self.namesrv is not None:
            self.namesrv.stop()

    def kill(self) -> None:
        """SIGKILL every process, brokers first. For a topology whose store is thrown away (a benchmark):
        RocketMQ 4.9.8's graceful stop takes about 7 s for a broker and 3 s for a name server (its Netty
        event loops' quiet periods and executor waits), ours well under one."""
        for b in self.brokers:
            b.kill()
        if self.namesrv is not None:
            self.namesrv.kill()

    def cleanup(self) -> None:
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> Topology:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
