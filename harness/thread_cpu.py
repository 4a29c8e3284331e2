"""This module owns reading a running process's CPU thread by thread from /proc, so a benchmark can say which of
the broker's threads a message's CPU goes to (the dispatch thread's share: docs/dispatch.md).

The broker's store threads carry their service's name in the kernel (``ServiceThread`` sets it with
``PR_SET_NAME``, cut to 15 bytes: "ReputMessageSer" is the dispatch thread); the broker's event loop is its
main thread (the thread whose id is the process id). Threads the broker starts without a name show the
process's name and are counted together under it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.load_cost import stat_cpu_seconds

MAIN = "main"  # the label of the process's main thread (the broker's event loop)
DISPATCH = "ReputMessageService"[:15]  # reference_broker/store/reput.py, as the kernel keeps it


@dataclass(frozen=True)
class ThreadCpu:
    name: str
    cpu_s: float


def sample(pid: int) -> dict[int, ThreadCpu]:
    """Every live thread of ``pid``: its name (``MAIN`` for the main thread) and its user + system CPU seconds so
    far (/proc/<pid>/task/<tid>/stat fields 14 and 15, in clock ticks: 10 ms resolution, so a figure wants a run
    of seconds). A thread that ends while it is read is left out."""
    out: dict[int, ThreadCpu] = {}
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:
        return out
    for task in tasks:
        tid = int(task.name)
        try:
            comm = (task / "comm").read_text().rstrip("\n")
            stat = (task / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        out[tid] = ThreadCpu(MAIN if tid == pid else comm, stat_cpu_seconds(stat))
    return out


def delta_by_name(before: dict[int, ThreadCpu], after: dict[int, ThreadCpu]) -> dict[str, float]:
    """CPU seconds each thread name used between two samples, threads of one name summed. A thread that started
    in between counts from zero; one that ended in between is lost (its last ticks are not in ``after``)."""
    out: dict[str, float] = {}
    for tid, t in after.items():
        start = before.get(tid)
        used = t.cpu_s - (start.cpu_s if start is not None and start.name == t.name else 0.0)
        out[t.name] = out.get(t.name, 0.0) + max(0.0, used)
    return out
