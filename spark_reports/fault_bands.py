"""Faults as intervals for the latency-over-time charts: each fault line of a run's faults.jsonl paired with the
line that ends it (a restart, a resume, a heal, space freed), as seconds since the run's start.

Chaos writes a fault's start and its end as two lines (chaos/kill9.py: ``kill9`` then ``restart``;
chaos/pause.py: ``pause`` then ``resume``; chaos/disk_fill.py: ``disk_fill`` then ``disk_free``;
partitions: ``partition…`` then ``heal``), both carrying the cycle number. A start is paired with the first
end after it of the same cycle and target when the lines say them; a start with no end (a master killed for
good, the run stopped) is an instant. Pure functions over the parsed lines: no Spark, no files.
"""

from collections.abc import Mapping, Sequence
from typing import Any, Final

from harness.records.schema import FaultKind
from spark_reports.plots import Band

# Lines that end a fault rather than start one ("disk_free" is chaos/disk_fill.DISK_FREE_KIND; read-only here).
END_KINDS: Final = frozenset({FaultKind.RESTART.value, FaultKind.RESUME.value, FaultKind.HEAL.value, "disk_free"})
# Events recorded in faults.jsonl that are no fault of the broker (the backlog's cold start drops the page cache).
NOT_FAULTS: Final = frozenset({"drop_caches"})


def _cycle(line: Mapping[str, Any]) -> object:
    params = line.get("params")
    return params.get("cycle") if isinstance(params, Mapping) else None


def _matches(start: Mapping[str, Any], end: Mapping[str, Any]) -> bool:
    """An end closes a start unless their cycle numbers, or their targets, are both given and differ."""
    for a, b in ((_cycle(start), _cycle(end)), (start.get("target"), end.get("target"))):
        if a is not None and b is not None and a != b:
            return False
    return True


def fault_bands(faults: Sequence[Mapping[str, Any]], started_at_ns: int) -> list[Band]:
    """One band per fault start, in time order, from its start to the end line that closes it (each end closes
    one start); a start nothing closes is a band of zero width."""
    lines = sorted((f for f in faults if isinstance(f.get("ts_ns"), int) and f.get("kind") not in NOT_FAULTS),
                   key=lambda f: int(f["ts_ns"]))
    used: set[int] = set()
    bands = []
    for i, start in enumerate(lines):
        if start.get("kind") in END_KINDS:
            continue
        end_ns = int(start["ts_ns"])
        for j in range(i + 1, len(lines)):
            end = lines[j]
            if j not in used and end.get("kind") in END_KINDS and _matches(start, end):
                used.add(j)
                end_ns = int(end["ts_ns"])
                break
        cycle = _cycle(start)
        label = str(start.get("kind")) + ("" if cycle is None else f" #{cycle}")
        bands.append(Band(label, (int(start["ts_ns"]) - started_at_ns) / 1e9, (end_ns - started_at_ns) / 1e9))
    return bands
