"""This module owns the head readers' latency record: a log-bucketed histogram of send-to-consume latency, one
per stage of a backlog run ("warmup", "build", "drain", "after"), small enough to travel in a progress report.

Why a histogram and not event rows: the head readers are a second consumer group reading the same messages as
the run's own group, and the checker judges the events (one receive per acknowledged key); their latency is a
measurement of the run, so it goes into meta.json ``results.backlog.head`` (merged over the load processes)
and, per second, into the metrics table (``head_latency_ms``).

Buckets: latency in microseconds, bucket ``i`` = [GROWTH^i, GROWTH^(i+1)) (2 % wide: a quantile's error is at
most 2 %); bucket 0 also takes everything under 1 µs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Final

GROWTH: Final = 1.02
_LOG_GROWTH: Final = math.log(GROWTH)
QUANTILES: Final = (0.5, 0.9, 0.99, 0.999)


def bucket_of(latency_ns: int) -> int:
    us = latency_ns / 1000
    return 0 if us < 1 else int(math.log(us) / _LOG_GROWTH)


def bucket_upper_ms(index: int) -> float:
    return GROWTH ** (index + 1) / 1000


class LatencyHistogram:
    """Counts per bucket; ``to_json``/``from_json`` with string keys (JSON objects), ``merge`` for processes."""

    __slots__ = ("counts", "max_ns", "n")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.n = 0
        self.max_ns = 0

    def add(self, latency_ns: int) -> None:
        latency_ns = max(0, latency_ns)  # born time is the producer's clock: the same host, but never negative
        b = bucket_of(latency_ns)
        self.counts[b] = self.counts.get(b, 0) + 1
        self.n += 1
        if latency_ns > self.max_ns:
            self.max_ns = latency_ns

    def merge(self, other: LatencyHistogram) -> None:
        for b, c in other.counts.items():
            self.counts[b] = self.counts.get(b, 0) + c
        self.n += other.n
        self.max_ns = max(self.max_ns, other.max_ns)

    def quantile_ms(self, q: float) -> float | None:
        """The upper edge of the bucket holding the q-quantile (an overestimate by at most 2 %)."""
        if self.n == 0:
            return None
        rank = math.ceil(q * self.n)
        seen = 0
        for b in sorted(self.counts):
            seen += self.counts[b]
            if seen >= rank:
                return round(min(bucket_upper_ms(b), self.max_ns / 1e6), 3)
        return round(self.max_ns / 1e6, 3)

    def summary(self) -> dict[str, float | int | None]:
        out: dict[str, float | int | None] = {"n": self.n}
        for q in QUANTILES:
            out[f"p{q * 100:g}_ms"] = self.quantile_ms(q)
        out["max_ms"] = round(self.max_ns / 1e6, 3) if self.n else None
        return out

    def to_json(self) -> dict[str, object]:
        return {"n": self.n, "max_ns": self.max_ns, "counts": {str(b): c for b, c in self.counts.items()}}

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> LatencyHistogram:
        h = cls()
        counts = d.get("counts")
        if isinstance(counts, Mapping):
            h.counts = {int(b): int(c) for b, c in counts.items()}
        n, max_ns = d.get("n"), d.get("max_ns")
        h.n = n if isinstance(n, int) else sum(h.counts.values())
        h.max_ns = max_ns if isinstance(max_ns, int) else 0
        return h


def merge_stages(parts: Iterable[Mapping[str, Mapping[str, object]]]) -> dict[str, LatencyHistogram]:
    """The per-stage histograms of several processes (each ``{stage: histogram json}``), merged."""
    out: dict[str, LatencyHistogram] = {}
    for part in parts:
        for stage, d in part.items():
            out.setdefault(stage, LatencyHistogram()).merge(LatencyHistogram.from_json(d))
    return out
