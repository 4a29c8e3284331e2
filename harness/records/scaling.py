"""The scaling experiment's rows (``scaling.jsonl`` in its output directory; harness.scaling writes them, the
``scaling`` report reads them). One JSON object per line, one measured point each:

==========================  ==============================================================================
key                         meaning
==========================  ==============================================================================
session                     the run of ``python -m harness scaling`` that measured it (a timestamp)
curve                       size | depth | producers | queues | groups | backlog | backlog_cold
x                           the curve's variable: body bytes, in flight, processes, queues, broker groups,
                            stored messages
target                      broker (under test) | bare (``bench bare-broker``) | fio (the device's wall)
msgs_per_s, mb_per_s        acknowledged sends (consumed messages on the backlog curves) per second
p50_ms, p99_ms              send latency (send-to-consume on the backlog curves)
broker_cpu_us_per_msg       the serving process's CPU per message
client_cpu_us_per_msg       the load generator's CPU per message
size, in_flight, processes  the load: body bytes, messages in flight in all, generator processes
queues                      the topic's queue count
flush, impl                 flushDiskType; reference or rocketmq
drained                     backlog curves: the consumers read everything before their time was up
memory_max                  backlog_cold: the broker's memory cgroup limit in bytes (its page cache is charged
                            to it, so a backlog larger than this is read from disk)
read_bytes                  backlog_cold: bytes the broker read from storage while consuming (/proc/PID/io)
loadavg, ts_ns              the machine's 1/5/15-minute load average and the time, when measured
==========================  ==============================================================================
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from harness.records import jsonl

SCALING_FILE: Final = "scaling.jsonl"
CURVES: Final = ("size", "depth", "producers", "queues", "groups", "backlog", "backlog_cold")
TARGETS: Final = ("broker", "bare", "fio")
ROW_KEYS: Final = ("session", "curve", "x", "target", "msgs_per_s", "mb_per_s", "p50_ms", "p99_ms",
                   "broker_cpu_us_per_msg", "client_cpu_us_per_msg", "size", "in_flight", "processes", "queues",
                   "flush", "impl", "drained", "memory_max", "read_bytes", "loadavg", "ts_ns")


def read(runs_dir: Path) -> list[dict[str, Any]]:
    """The rows in ``runs_dir``/scaling.jsonl, oldest first; a malformed line is left out."""
    return [item for item in jsonl.read_objects(runs_dir / SCALING_FILE)
            if item.get("curve") in CURVES and item.get("target") in TARGETS and isinstance(item.get("x"), int)
            and isinstance(item.get("msgs_per_s"), (int, float))]
