"""This module owns how one workload is divided among several load processes and how their answers add up again
(sans-IO: ``harness.load_procs`` runs the processes).

A workload's ``LoadShape`` is split into ``n`` parts, one per process, so that together they offer what the one
process offered: the fixed rate divided evenly (each part open loop on its own schedule, so the sum keeps the
rate), and the in-flight window divided with the remainder to the first parts. A window smaller than ``n``
cannot be split without changing the workload (``one`` keeps exactly one send in flight), so it runs in as many
processes as it has sends in flight: ``parts_for``.

Each part's keys carry its number (``<run-id>-p<i>-<seq>``), so keys stay unique across processes and the loss
checker, which reads every writer's events of the run, still sees one send per key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from harness.driver_load import LoadShape

COUNT_FIELDS = ("sent_ok", "sent_fail", "sent_unknown", "received")


def parts_for(shape: LoadShape, processes: int) -> int:
    """How many processes ``shape`` can run in: at most one per send in flight."""
    if processes < 1:
        raise ValueError(f"processes must be >= 1, not {processes}")
    return max(1, min(processes, shape.in_flight))


def split_shape(shape: LoadShape, processes: int) -> list[LoadShape]:
    """``parts_for(shape, processes)`` shapes whose rates and in-flight windows add up to ``shape``'s."""
    n = parts_for(shape, processes)
    base, extra = divmod(shape.in_flight, n)
    return [replace(shape, name=f"{shape.name}-p{i}", rate=shape.rate / n if shape.rate > 0 else 0.0,
                    in_flight=base + (1 if i < extra else 0)) for i in range(n)]


def key_prefix(run_id: str, part: int) -> str:
    return f"{run_id}-p{part}-"


def merge_counts(parts: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The parts' answer counts summed, and the longest load window (the parts start together on one signal)."""
    out: dict[str, Any] = {k: 0 for k in COUNT_FIELDS}
    seconds = 0.0
    for p in parts:
        for k in COUNT_FIELDS:
            out[k] += int(p.get(k, 0))
        seconds = max(seconds, float(p.get("seconds", 0.0)))
    out["seconds"] = seconds
    return out
