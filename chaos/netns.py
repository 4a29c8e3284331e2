"""This module owns the lab network: test hosts on this machine, each a network namespace with its own address,
so that a partition between two brokers (chaos/partition.py) is a real one and not a promise of the code.

Layout of lab ``N`` (one per Lab; several coexist, e.g. under pytest-xdist):

| what | name | address |
|---|---|---|
| bridge in the root namespace (the clients' and the name server's side) | ``rmqlab<N>`` | ``.1`` of the lab's /24 |
| a host: a network namespace | ``rmqlab<N>-h<i>`` | ``.<i>`` (i = 2, 3, ...) on its ``eth0`` |
| the host's veth pair: root end (a port of the bridge), namespace end | ``rl<N>h<i>``, ``eth0`` | |
| a route in the root namespace | ``unreachable <subnet> metric 4000`` | |

The lab's /24 is the N-th of 198.18.0.0/15, the range RFC 2544 reserves for benchmarking: no real host uses it.
The unreachable route, beneath the bridge's connected route, keeps a packet to a lab address from following
the default route off the machine when the bridge is gone (a torn-down or half-built lab). Interface names stay
within IFNAMSIZ (15 characters).

Every part is entered in the ledger (chaos.leftovers) before it exists: a lab left by a killed run is removed
by the leftovers sweep (``python -m chaos cleanup``). Deleting a namespace deletes its veth pair and its nftables
tables; the processes still in it are ended first (a namespace lives on while a process is in it).

Needs root, ``ip`` (iproute2) and, for partitions, ``nft`` (nftables): ``unavailable()`` says why not.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from chaos.leftovers import (
    LAB_ROUTE_METRIC,
    Ledger,
    ResourceKind,
    delete_link,
    delete_netns,
    delete_unreachable_route,
    run_cmd,
)

LAB_SUPERNET: Final = ipaddress.IPv4Network("198.18.0.0/15")  # RFC 2544: reserved for benchmarking
MAX_LABS: Final = 512  # /24s in the /15
MAX_HOSTS: Final = 253  # .2 .. .254
NAME_PREFIX: Final = "rmqlab"
IFNAMSIZ: Final = 15  # Linux interface names: 15 characters and the NUL


def unavailable() -> str | None:
    """Why a lab cannot be built here, or None."""
    if os.geteuid() != 0:
        return "the lab network needs root (network namespaces, veth pairs, nftables)"
    for tool, package in (("ip", "iproute2"), ("nft", "nftables")):
        if shutil.which(tool) is None:
            return f"no {tool} on PATH (Debian package {package}; scripts/setup.sh installs it as root)"
    return None


def lab_subnet(index: int) -> ipaddress.IPv4Network:
    if not 0 <= index < MAX_LABS:
        raise ValueError(f"lab index {index}: 0..{MAX_LABS - 1}")
    return ipaddress.IPv4Network((int(LAB_SUPERNET.network_address) + 256 * index, 24))


def bridge_name(index: int) -> str:
    return f"{NAME_PREFIX}{index}"


def netns_name(index: int, host_no: int) -> str:
    return f"{NAME_PREFIX}{index}-h{host_no}"


def veth_name(index: int, host_no: int) -> str:
    name = f"rl{index}h{host_no}"
    assert len(name) <= IFNAMSIZ
    return name


@dataclass(frozen=True)
class Host:
    """One test host: its name in the topology, its namespace and its address on the lab's bridge."""

    name: str
    netns: str
    addr: str
    veth: str  # the root end; the namespace end is eth0

    def exec_prefix(self) -> list[str]:
        """Run a command in this host's namespace. ``ip netns exec`` execs it, so the pid is the command's."""
        return ["ip", "netns", "exec", self.netns]

    def run(self, args: list[str], stdin: str | None = None) -> str:
        """Run a system tool in the namespace; RuntimeError with its stderr when it fails."""
        return run_cmd(self.exec_prefix() + args, stdin=stdin).stdout


@dataclass
class Lab:
    """``with Lab(ledger) as lab:`` — a bridge with its address, then ``lab.add_host(name)`` per host."""

    ledger: Ledger = field(default_factory=Ledger)
    index: int = -1
    hosts: dict[str, Host] = field(default_factory=dict)

    @property
    def subnet(self) -> ipaddress.IPv4Network:
        return lab_subnet(self.index)

    @property
    def gateway(self) -> str:
        """The root namespace's address on the lab: where the clients' traffic comes from, and the name server's."""
        return str(self.subnet.network_address + 1)

    @property
    def bridge(self) -> str:
        return bridge_name(self.index)

    def open(self) -> Lab:
        reason = unavailable()
        if reason is not None:
            raise RuntimeError(reason)
        try:
            self._claim_bridge()
            run_cmd(["ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge])
            run_cmd(["ip", "link", "set", self.bridge, "up"])
            subnet = str(self.subnet)
            self.ledger.add(ResourceKind.ROUTE, subnet, metric=LAB_ROUTE_METRIC)
            run_cmd(["ip", "route", "add", "unreachable", subnet, "metric", str(LAB_ROUTE_METRIC)])
        except BaseException:
            self.close()
            raise
        return self

    def _claim_bridge(self) -> None:
        """The bridge's name is the lab's claim on its index: creating a link that exists fails, so two labs
        never share one (and a stale lab's index is skipped until the sweep removes it)."""
        start = (os.getpid() * 7) % MAX_LABS  # spread parallel runs over the indexes
        for k in range(MAX_LABS):
            index = (start + k) % MAX_LABS
            name = bridge_name(index)
            if _link_exists(name) or _route_exists(str(lab_subnet(index))):
                continue
            entry = self.ledger.add(ResourceKind.LINK, name, lab=index)
            try:
                run_cmd(["ip", "link", "add", name, "type", "bridge"])
            except RuntimeError:
                self.ledger.drop(entry)  # someone else's now
                continue
            self.index = index
            return
        raise RuntimeError(f"no free lab network: {MAX_LABS} bridges {NAME_PREFIX}N exist")

    def add_host(self, name: str) -> Host:
        """A new namespace joined to the bridge, with the next address; ``lo`` up (a JVM resolves localhost)."""
        if name in self.hosts:
            raise ValueError(f"host {name!r} exists in lab {self.index}")
        host_no = len(self.hosts) + 2
        if host_no - 1 > MAX_HOSTS:
            raise RuntimeError(f"lab {self.index} is full ({MAX_HOSTS} hosts)")
        host = Host(name, netns_name(self.index, host_no), str(self.subnet.network_address + host_no),
                    veth_name(self.index, host_no))
        self.ledger.add(ResourceKind.NETNS, host.netns, lab=self.index, host=name)
        run_cmd(["ip", "netns", "add", host.netns])
        self.hosts[name] = host  # from here close() deletes it
        self.ledger.add(ResourceKind.LINK, host.veth, lab=self.index, host=name)
        run_cmd(["ip", "link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.netns])
        run_cmd(["ip", "link", "set", host.veth, "master", self.bridge, "up"])
        host.run(["ip", "addr", "add", f"{host.addr}/24", "dev", "eth0"])
        host.run(["ip", "link", "set", "eth0", "up"])
        host.run(["ip", "link", "set", "lo", "up"])
        return host

    def host(self, name: str) -> Host:
        """The host ``name``, added when it is new (a restarted broker keeps its host)."""
        return self.hosts[name] if name in self.hosts else self.add_host(name)

    def close(self) -> None:
        """Undo everything, namespaces (and the processes still in them) first, the route last; what could not be
        undone stays in the ledger for the sweep."""
        if self.index < 0:
            return
        errors: list[str] = []
        steps: list[tuple[ResourceKind, str, Callable[[str], None]]] = []
        for host in reversed(list(self.hosts.values())):
            steps += [(ResourceKind.NETNS, host.netns, delete_netns), (ResourceKind.LINK, host.veth, delete_link)]
        steps += [(ResourceKind.LINK, self.bridge, delete_link),
                  (ResourceKind.ROUTE, str(self.subnet), delete_unreachable_route)]
        self.hosts.clear()
        for kind, ident, undo in steps:
            try:
                undo(ident)
                self.ledger.remove(kind, ident)
            except RuntimeError as e:
                errors.append(str(e))
        if errors:
            raise RuntimeError(f"lab {self.index} not fully removed: " + "; ".join(errors))

    def __enter__(self) -> Lab:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _link_exists(name: str) -> bool:
    return os.path.exists(f"/sys/class/net/{name}")


def _route_exists(subnet: str) -> bool:
    with contextlib.suppress(RuntimeError):
        return bool(run_cmd(["ip", "route", "show", "exact", subnet]).stdout.strip())
    return False
