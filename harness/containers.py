"""This module owns the container topology: the launcher's name server and brokers (harness/launcher.py), each
in a container of the project's image (docker/Dockerfile) on a docker network of its own, driven by the docker
CLI. The chaos cells use it through the same interface as the process topology (``--topology docker``):

=====================  ==========================================  ===========================================
launcher (process)     here (container)                            what the fault means
=====================  ==========================================  ===========================================
``kill()`` SIGKILL     ``docker kill -s KILL``                     a crash: the broker gets no chance to flush
``stop()`` SIGTERM     ``docker stop -t N`` (STOPSIGNAL SIGTERM)   the graceful shutdown
``start()``            ``docker run`` once, then ``docker start``  a restart on the same store (a bind mount)
``pause()`` SIGSTOP    ``docker pause`` (the freezer cgroup)       every process of the container stopped
(netns partition)      ``docker network disconnect`` / ``connect`` the broker cut off from clients and name server
=====================  ==========================================  ===========================================

Addresses: the network gets a /24 of its own (172.29.N.0/24, the first free N), the name server .2, the
brokers .10 upwards; a broker's ``brokerIP1`` is its container's address, which the host reaches over the
network's bridge, so clients on the host use the routes the name server hands out as they are. The store is a
host directory bind-mounted at /data/store (chowned to the image's user, uid 10001) so the host can check it
offline (admin checkStore) as it does a process's store.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from harness.launcher import (
    BOOT_LINE_BROKER,
    BOOT_LINE_NAMESRV,
    BrokerGroups,
    BrokerRole,
    LaunchError,
    env_broker_conf,
    write_broker_conf,
)

DEFAULT_IMAGE: Final = "rmq-lab:latest"
IMAGE_UID: Final = 10001  # docker/Dockerfile's user: owns the bind-mounted store
NAMESRV_PORT: Final = 9876  # NamesrvConfig's default listenPort (4.9.8)
BROKER_PORT: Final = 10911  # NettyServerConfig's default listenPort (4.9.8): every container has its own address
STOP_TIMEOUT_S: Final = 30
READY_TIMEOUT_S: Final = 60.0  # a container's first start also starts its Python and imports
SUBNET_PREFIX: Final = "172.29"


class DockerError(RuntimeError):
    """A docker command failed; the message carries its stderr."""


def docker(*args: str, check: bool = True, timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise DockerError(f"docker {' '.join(args)}: {e}") from None
    if check and done.returncode != 0:
        raise DockerError(f"docker {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()[-2000:]}")
    return done


def unavailable(image: str = DEFAULT_IMAGE) -> str | None:
    """Why containers cannot run here (None: they can)."""
    try:
        if docker("info", check=False, timeout_s=20).returncode != 0:
            return "no docker daemon answers (docker/build-offline.sh starts one)"
    except DockerError as e:
        return str(e)
    if docker("image", "inspect", image, check=False).returncode != 0:
        return f"no image {image} (build it: docker/build-offline.sh)"
    return None


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def _chown_tree(root: Path, uid: int) -> None:
    """The image's user must write the bind-mounted directory (root: uid and gid ``uid``)."""
    try:
        for d, _dirs, files in os.walk(root):
            os.chown(d, uid, uid)
            for f in files:
                os.chown(Path(d) / f, uid, uid)
    except PermissionError as e:
        raise LaunchError(f"cannot hand {root} to the image's user (uid {uid}): {e}; run as root") from None


@dataclass
class ContainerProcess:
    """One container of a topology; duck-types launcher.Process."""

    name: str  # the process's name in the topology (broker-a, namesrv)
    container: str  # the container's name (unique per topology)
    image: str
    network: str
    ip: str
    command: list[str]  # the entrypoint's role and its arguments
    log_path: Path
    ready_line: str
    mounts: dict[str, str] = field(default_factory=dict)  # host path -> container path
    ready_timeout_s: float = READY_TIMEOUT_S
    created: bool = False

    def _inspect(self) -> dict[str, Any] | None:
        done = docker("inspect", "--type", "container", self.container, check=False)
        if done.returncode != 0:
            return None
        state: dict[str, Any] = json.loads(done.stdout)[0]["State"]
        return state

    @property
    def alive(self) -> bool:
        state = self._inspect()
        return state is not None and bool(state.get("Running"))

    @property
    def pid(self) -> int:
        """The process doing the work, on the host: the child of docker-init (``--init``), else the container's
        first process."""
        state = self._inspect()
        top = int(state.get("Pid", 0)) if state else 0
        kids = _children(top) if top else []
        return kids[0] if kids else top

    def _boot_lines(self) -> int:
        done = docker("logs", self.container, check=False)
        return (done.stdout + done.stderr).count(self.ready_line)

    def start(self, timeout_s: float | None = None) -> None:
        timeout_s = self.ready_timeout_s if timeout_s is None else timeout_s
        before = self._boot_lines() if self.created else 0
        if not self.created:
            args = ["run", "-d", "--init", "--name", self.container, "--network", self.network, "--ip", self.ip,
                    "--stop-timeout", str(STOP_TIMEOUT_S), "--label", "rmq-lab=chaos"]
            for host, inside in self.mounts.items():
                args += ["-v", f"{host}:{inside}"]
            docker(*args, self.image, *self.command)
            self.created = True
        else:
            docker("start", self.container)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._boot_lines() > before:
                return
            state = self._inspect()
            if state is not None and not state.get("Running"):
                raise LaunchError(f"{self.name} exited with {state.get('ExitCode')} while starting:\n"
                                  f"{self.logs_tail()}")
            time.sleep(0.1)
        self.kill()
        raise LaunchError(f"{self.name} not ready after {timeout_s} s:\n{self.logs_tail()}")

    def logs_tail(self, lines: int = 30) -> str:
        done = docker("logs", "--tail", str(lines), self.container, check=False)
        return (done.stdout + done.stderr).strip() or "(no log)"

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """``docker stop``: SIGTERM (the image's STOPSIGNAL), SIGKILL after ``timeout_s``; the exit code."""
        state = self._inspect()
        if state is None:
            return None
        if state.get("Paused"):
            docker("unpause", self.container, check=False)
        if state.get("Running"):
            docker("stop", "-t", str(int(timeout_s)), self.container, timeout_s=timeout_s + 30)
        state = self._inspect()
        return int(state["ExitCode"]) if state is not None else None

    def kill(self) -> None:
        """``docker kill -s KILL``: every process of the container SIGKILLed at once."""
        if self.alive:
            docker("kill", "-s", "KILL", self.container, check=False)
            deadline = time.monotonic() + 10
            while self.alive and time.monotonic() < deadline:
                time.sleep(0.02)

    def pause(self) -> None:
        """``docker pause`` freezes the container's cgroup; it returns once every task is frozen."""
        if self.alive:
            docker("pause", self.container)

    def resume(self) -> None:
        state = self._inspect()
        if state is not None and state.get("Paused"):
            docker("unpause", self.container)

    def disconnect(self) -> None:
        """Cut the container off its network: clients and the name server get no answer from it."""
        docker("network", "disconnect", "--force", self.network, self.container)

    def connect(self) -> None:
        """Back on the network, at the same address (its brokerIP1 and the routes stay true)."""
        docker("network", "connect", "--ip", self.ip, self.network, self.container)

    def remove(self) -> None:
        """Keep its log (``docker logs``) at ``log_path``, then remove the container."""
        if not self.created:
            return
        done = docker("logs", "-t", self.container, check=False)
        with contextlib.suppress(OSError):
            self.log_path.write_text(done.stdout + done.stderr, encoding="utf-8")
        docker("rm", "-f", "-v", self.container, check=False)
        self.created = False


@dataclass
class ContainerBroker(BrokerRole, ContainerProcess):
    """A broker container; duck-types launcher.BrokerProcess (``store_root`` is the host directory)."""

    port: int = BROKER_PORT
    store_root: Path = Path()
    conf: dict[str, str] = field(default_factory=dict)

    @property
    def host(self) -> str:
        return self.ip

    @property
    def addr(self) -> str:
        return f"{self.ip}:{self.port}"

    def restart(self, timeout_s: float | None = None) -> None:
        if self.alive:
            self.stop()
        self.start(timeout_s)


def create_network(name: str, attempts: int = 20) -> str:
    """A bridge network on the first free 172.29.N.0/24 tried (random N): its subnet prefix ``172.29.N``."""
    tried = random.sample(range(1, 255), attempts)
    last = ""
    for n in tried:
        prefix = f"{SUBNET_PREFIX}.{n}"
        done = docker("network", "create", "--driver", "bridge", "--subnet", f"{prefix}.0/24",
                      "--label", "rmq-lab=chaos", name, check=False)
        if done.returncode == 0:
            return prefix
        last = done.stderr.strip()
        if "overlap" not in last.lower():
            break
    raise DockerError(f"docker network create {name}: {last}")


class ContainerTopology(BrokerGroups[ContainerBroker]):
    """A name server and brokers in containers of ``image`` on a network of their own; the launcher's
    ``Topology`` interface (start, add_broker, add_slave, stop, kill, cleanup, namesrv_addr)."""

    def __init__(self, root: Path, broker_conf: Mapping[str, Any] | None = None, brokers: int = 1,
                 image: str = DEFAULT_IMAGE, slaves: int = 0) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.image = image
        self.broker_conf = dict(broker_conf or {})
        self.n_brokers = brokers
        self.n_slaves = slaves
        self.tag = f"rmqlab-{random.randrange(16**6):06x}"
        self.network = self.tag
        self.prefix = ""
        self.namesrv: ContainerProcess | None = None
        self.brokers: list[ContainerBroker] = []
        self._next_host = 10

    @property
    def namesrv_addr(self) -> str:
        return f"{self.prefix}.2:{NAMESRV_PORT}"

    def start(self) -> ContainerTopology:
        try:
            self.prefix = create_network(self.network)
            self.namesrv = ContainerProcess("namesrv", f"{self.tag}-namesrv", self.image, self.network,
                                            f"{self.prefix}.2", ["namesrv", "-p", str(NAMESRV_PORT)],
                                            self.root / "namesrv.log", BOOT_LINE_NAMESRV)
            self.namesrv.start()
            self.start_brokers()
        except BaseException:
            self.cleanup()
            raise
        return self

    def add_broker(self, name: str, extra: Mapping[str, Any] | None = None) -> ContainerBroker:
        ip = f"{self.prefix}.{self._next_host}"
        self._next_host += 1
        conf: dict[str, str] = {"brokerClusterName": "DefaultCluster", "brokerName": name, "brokerId": "0",
                                "listenPort": str(BROKER_PORT), "brokerIP1": ip, "namesrvAddr": self.namesrv_addr}
        conf.update(env_broker_conf())
        conf.update({k: str(v) for k, v in self.broker_conf.items()})
        conf.update({k: str(v) for k, v in (extra or {}).items()})
        # The caller's store directory (a chaos cell's) is on the host; inside, the image's store volume.
        store_root = Path(conf.get("storePathRootDir") or self.root / name / "store")
        conf["storePathRootDir"] = "/data/store"
        conf_dir = self.root / name / "conf"
        for d in (store_root, conf_dir):
            d.mkdir(parents=True, exist_ok=True)
        write_broker_conf(conf_dir / "broker.conf", conf)
        for d in (store_root, conf_dir):
            _chown_tree(d, IMAGE_UID)
        bp = ContainerBroker(name, f"{self.tag}-{name}", self.image, self.network, ip, ["broker"],
                             self.root / f"{name}.log", BOOT_LINE_BROKER,
                             mounts={str(store_root): "/data/store", str(conf_dir): "/data/conf"},
                             store_root=store_root, conf=conf)
        self.brokers.append(bp)  # before it starts: cleanup() then removes it even if its start fails
        bp.start()
        return bp

    def add_slave(self, master: ContainerBroker, name: str | None = None,
                  extra: Mapping[str, Any] | None = None) -> ContainerBroker:
        """A slave of ``master``'s group (launcher.Topology.add_slave), haMasterAddress set so it connects
        without waiting for a registration round."""
        default_name, conf = self.slave_conf(master)
        conf["haMasterAddress"] = f"{master.ip}:{master.ha_port}"
        conf.update(extra or {})
        return self.add_broker(name or default_name, extra=conf)

    def _all(self) -> Sequence[ContainerProcess]:
        return [*self.brokers, *([self.namesrv] if self.namesrv is not None else [])]

    def stop(self) -> None:
        """Stop every container (brokers first, gracefully), keep their logs, remove them and the network."""
        for p in self._all():
            with contextlib.suppress(DockerError):
                p.stop()
        self.cleanup()

    def kill(self) -> None:
        for p in self._all():
            p.kill()

    def cleanup(self) -> None:
        for p in self._all():
            p.remove()
        docker("network", "rm", self.network, check=False)

    def __enter__(self) -> ContainerTopology:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
