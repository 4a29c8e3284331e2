"""This module owns network partitions between the lab's test hosts (chaos/netns.py): nftables rules inside the
hosts' namespaces that drop every packet to and from the other side, and their removal.

| cut | where the rules go | dropped |
|---|---|---|
| ``master<->slave`` | the master's and the slave's namespace | each host: everything from and to the other |
| ``clients<->master`` | the master's namespace | everything from and to the lab's gateway: the root namespace, |
| | | where the clients and the name server are; the slave still reaches the master |

The rules match addresses only, not connection state: an established connection (the slave's HA connection,
a client's) stops as well as new ones, as on a real partition; TCP retransmits what was in flight once healed.
Each cut is one table of its own (``inet rmqlab_partition``) in each namespace, so healing is deleting that
table, and the table goes away with the namespace anyway. ``Partition`` is a context manager that always heals
on exit.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from chaos.netns import Host

TABLE: Final = "rmqlab_partition"
PRIORITY: Final = -10  # ahead of any filter-priority (0) chain someone else's table might hold


class Cut(enum.StrEnum):
    MASTER_SLAVE = "master<->slave"
    CLIENTS_MASTER = "clients<->master"


def ruleset(peers: Iterable[str]) -> str:
    """The nft script that makes a namespace drop every IPv4 packet from and to ``peers``."""
    addrs = sorted(set(peers))
    if not addrs:
        raise ValueError("a partition needs at least one peer address")
    peer_set = ", ".join(addrs)
    return (f"table inet {TABLE} {{\n"
            f"\tchain input {{\n"
            f"\t\ttype filter hook input priority {PRIORITY}; policy accept;\n"
            f"\t\tip saddr {{ {peer_set} }} drop\n"
            f"\t}}\n"
            f"\tchain output {{\n"
            f"\t\ttype filter hook output priority {PRIORITY}; policy accept;\n"
            f"\t\tip daddr {{ {peer_set} }} drop\n"
            f"\t}}\n"
            f"}}\n")


def plan(cut: Cut, master: Host, slave: Host, gateway: str) -> dict[Host, list[str]]:
    """For each host that gets rules, the addresses it stops talking to."""
    if cut is Cut.MASTER_SLAVE:
        return {master: [slave.addr], slave: [master.addr]}
    return {master: [gateway]}


@dataclass
class Partition:
    """``with Partition(rules):`` cuts on entry and heals on exit, whatever happened in between. ``cut_ns`` and
    ``healed_ns`` are the wall-clock times (``now_ns``) when the last cut was in force and when it was gone."""

    rules: Mapping[Host, Sequence[str]]
    now_ns: Callable[[], int] = time.time_ns  # a run record's clock (WallClock.now_ns) in an experiment
    cut_ns: int | None = None
    healed_ns: int | None = None
    _active: list[Host] = field(default_factory=list)

    def cut(self) -> None:
        try:
            for host, peers in self.rules.items():
                self._active.append(host)  # before: a half-applied script is still deleted by heal()
                host.run(["nft", "-f", "-"], stdin=ruleset(peers))
        except BaseException:
            self.heal()
            raise
        self.cut_ns = self.now_ns()

    def heal(self) -> None:
        """Delete the table in every namespace it was put in; errors are collected and raised at the end, so one
        failure does not leave the other side cut."""
        errors = []
        while self._active:
            host = self._active.pop()
            try:
                if TABLE in host.run(["nft", "list", "tables", "inet"]):
                    host.run(["nft", "delete", "table", "inet", TABLE])
            except RuntimeError as e:
                errors.append(f"{host.name}: {e}")
        self.healed_ns = self.now_ns()
        if errors:
            raise RuntimeError("partition not healed: " + "; ".join(errors))

    @property
    def active(self) -> bool:
        return bool(self._active)

    def __enter__(self) -> Partition:
        self.cut()
        return self

    def __exit__(self, *exc: object) -> None:
        self.heal()
