"""This module owns what a load cost the machine and which side bounded it (sans-IO apart from reading the
processes' CPU times from /proc, ``cpu_seconds``).

The compare command (harness.compare) samples the user + system CPU seconds of every load process and of the
broker's server process (the reference broker, RocketMQ's JVM, nats-server, RabbitMQ's Erlang VM) at three
marks: when the load starts, when the load window ends, and after the drain. From them:

==========================  ==========================================================================
figure                      meaning
==========================  ==========================================================================
client_util                 each load process's CPU over the window ÷ the window: 1.0 = one core busy
broker_util                 the broker's CPU over the window ÷ the window (a multi-threaded server may
                            pass 1.0)
client_cpu_us_per_msg       all load processes' CPU from start to after the drain (producing, consuming,
                            recording events; the coordinator's share included) ÷ acknowledged sends
broker_cpu_us_per_msg       the broker's CPU over the same span ÷ acknowledged sends
loadavg                     the machine's load average at the end: other work takes cores too
machine_busy                the share of all cores busy over the window, whoever used them (/proc/stat)
others_cores                cores' worth of that busy time neither the load nor the broker used
bound                       ``generator``: every load process at ``SATURATED`` of a core or more and the
                            broker below it; ``broker``: the broker at or above it and some load process
                            below; ``machine``: neither alone, but the cores were ``SATURATED`` busy
                            (by the two sides, or by other work beside them: both short of CPU);
                            ``neither``: CPU was not what limited it (a fixed rate, an fsync, a wait)
==========================  ==========================================================================

A Python load process holds one interpreter lock, so one core is its ceiling; the broker's ceiling is a core
for the reference broker's event loop too, more for the JVM, Go and Erlang servers, which is why a busy broker
next to idle load processes is "broker" at one core already: on this 2-core machine the load processes take
the other.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final, Literal

Bound = Literal["generator", "broker", "machine", "neither"]
SATURATED: Final = 0.85  # of one core: a Python process at this share is at its interpreter lock's ceiling


def stat_cpu_seconds(stat: str) -> float:
    """User + system CPU seconds from a /proc ``stat`` line (a process's or a thread's: fields 14 and 15, in
    clock ticks; the command name in parentheses may hold spaces, so fields count from its ``)``)."""
    fields = stat.rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process (/proc/<pid>/stat); None once it is gone."""
    try:
        return stat_cpu_seconds(Path(f"/proc/{pid}/stat").read_text())
    except OSError:
        return None


def machine_jiffies() -> tuple[int, int]:
    """(busy, total) clock ticks of all cores since boot, from /proc/stat's ``cpu`` line (idle and iowait are
    not busy; steal is: a core the hypervisor gave to someone else was not ours to use)."""
    with open("/proc/stat", encoding="ascii") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    total = sum(values[:8])  # guest time is already counted in user
    return total - idle, total


def cores() -> int:
    """The cores this process (and the broker it starts, which inherits its affinity) may run on."""
    return len(os.sched_getaffinity(0))


def bound_of(client_util: Sequence[float], broker_util: float | None, n_cores: int,
             machine_busy: float | None = None) -> Bound:
    """``machine_busy``: the share of all cores busy over the window, whoever used them (None: use the load's
    and the broker's own share) — other work on the machine starves both sides as surely as they starve
    each other."""
    gen = bool(client_util) and min(client_util) >= SATURATED
    brk = broker_util is not None and broker_util >= SATURATED
    if gen and not brk:
        return "generator"
    if brk and not gen:
        return "broker"
    ours = (sum(client_util) + (broker_util or 0.0)) / n_cores
    if max(ours, machine_busy or 0.0) >= SATURATED:
        return "machine"
    return "neither"


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else max(0.0, b - a)


@dataclass(frozen=True)
class CpuMarks:
    """CPU seconds per process at the start, at the end of the load window and after the drain."""

    start: float | None
    window_end: float | None
    end: float | None


@dataclass(frozen=True)
class LoadCost:
    processes: int
    cores: int
    window_s: float
    acked: int
    client_cpu_s: list[float | None]  # per load process, start → after the drain
    client_util: list[float]  # per load process, over the window
    coordinator_cpu_s: float | None  # the parent of several load processes (None: it was the load process)
    broker_cpu_s: float | None
    broker_util: float | None
    client_cpu_us_per_msg: float | None
    broker_cpu_us_per_msg: float | None
    bound: Bound
    loadavg: tuple[float, float, float] | None = None  # the machine's, at the end (other work shares the cores)
    machine_busy: float | None = None  # share of all cores busy over the window, by anyone (/proc/stat)
    others_cores: float | None = None  # of which neither the load nor the broker: cores' worth used by other work

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["client_util"] = [round(u, 3) for u in self.client_util]
        d["broker_util"] = None if self.broker_util is None else round(self.broker_util, 3)
        return d


def load_cost(clients: Sequence[CpuMarks], broker: CpuMarks | None, window_s: float, acked: int, n_cores: int,
              coordinator: CpuMarks | None = None, loadavg: tuple[float, float, float] | None = None,
              machine: tuple[tuple[int, int], tuple[int, int]] | None = None) -> LoadCost:
    """The figures of the table above from the marks of each load process, the broker and the coordinator."""
    client_cpu = [_delta(c.start, c.end) for c in clients]
    util = [(_delta(c.start, c.window_end) or 0.0) / window_s if window_s > 0 else 0.0 for c in clients]
    coord = None if coordinator is None else _delta(coordinator.start, coordinator.end)
    broker_cpu = None if broker is None else _delta(broker.start, broker.end)
    broker_window = None if broker is None else _delta(broker.start, broker.window_end)
    broker_util = None if broker_window is None or window_s <= 0 else broker_window / window_s
    busy = None
    if machine is not None and machine[1][1] > machine[0][1]:
        busy = (machine[1][0] - machine[0][0]) / (machine[1][1] - machine[0][1])
    coord_window = None if coordinator is None else _delta(coordinator.start, coordinator.window_end)
    ours = sum(util) + (broker_util or 0.0) + ((coord_window or 0.0) / window_s if window_s > 0 else 0.0)
    others = None if busy is None else max(0.0, busy * n_cores - ours)
    known = [c for c in client_cpu if c is not None]
    client_total = (sum(known) + (coord or 0.0)) if known else None
    return LoadCost(
        processes=len(clients), cores=n_cores, window_s=window_s, acked=acked, client_cpu_s=client_cpu,
        client_util=util, coordinator_cpu_s=coord, broker_cpu_s=broker_cpu, broker_util=broker_util,
        client_cpu_us_per_msg=client_total / acked * 1e6 if client_total is not None and acked else None,
        broker_cpu_us_per_msg=broker_cpu / acked * 1e6 if broker_cpu is not None and acked else None,
        bound=bound_of(util, broker_util, n_cores, busy), loadavg=loadavg, machine_busy=busy, others_cores=others)


class CpuMeter:
    """Marks ``start`` / ``window_end`` / ``end`` over a set of pids (the I/O edge of ``load_cost``)."""

    def __init__(self, pids: Mapping[str, int | None]) -> None:
        self.pids = dict(pids)
        self._marks: dict[str, dict[str, float | None]] = {}
        self._machine: dict[str, tuple[int, int]] = {}

    def mark(self, name: str) -> None:
        self._marks[name] = {who: None if pid is None else cpu_seconds(pid) for who, pid in self.pids.items()}
        self._machine[name] = machine_jiffies()

    def machine(self) -> tuple[tuple[int, int], tuple[int, int]] | None:
        """The machine's (busy, total) ticks at ``start`` and ``window_end``."""
        if "start" not in self._machine or "window_end" not in self._machine:
            return None
        return self._machine["start"], self._machine["window_end"]

    def marks(self, who: str) -> CpuMarks | None:
        if who not in self.pids or self.pids[who] is None:
            return None
        get = {m: self._marks.get(m, {}).get(who) for m in ("start", "window_end", "end")}
        return CpuMarks(get["start"], get["window_end"], get["end"])
