"""This module owns what one benchmark producer process measures and prints: its options, the counters of a
reporting period (the tools' StatsBenchmarkProducer snapshot), RocketMQ's periodic producer line and the
percentiles beside it. Shared by the client-library producer (client_bench.py) and the pre-encoded one
(lean_producer.py), which client_bench starts for ``--lean``.

Latency samples are kept as microseconds in ``array('I')`` (4 bytes each); percentiles are exact (sorted).
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field
from datetime import datetime

PERCENTILES = (50.0, 99.0, 99.9)
SEND_NS_PROPERTY = "BENCH_SEND_NS"  # our own property, not RocketMQ's


def percentile(sorted_us: array[int] | list[int], p: float) -> float:
    """Nearest-rank percentile of sorted microsecond samples, in ms."""
    if not sorted_us:
        return 0.0
    k = max(0, min(len(sorted_us) - 1, math.ceil(round(p * len(sorted_us) / 100, 9)) - 1))
    return sorted_us[k] / 1000


@dataclass
class Window:
    """Counters for one reporting period (the tools' StatsBenchmarkProducer snapshot)."""

    ok: int = 0
    send_failed: int = 0
    response_failed: int = 0
    rt_total_us: int = 0
    rt_max_us: int = 0
    samples: array[int] = field(default_factory=lambda: array("I"))

    def add(self, rt_us: int) -> None:
        self.ok += 1
        self.rt_total_us += rt_us
        if rt_us > self.rt_max_us:
            self.rt_max_us = rt_us
        self.samples.append(min(rt_us, 0xFFFFFFFF))


@dataclass
class ProducerOptions:
    namesrv: str
    topic: str = "BenchmarkTest"
    threads: int = 64
    size: int = 128
    key_enable: bool = False
    tag_count: int = 0
    batch_size: int = 1
    async_send: bool = False
    in_flight: int = 64
    duration_s: float = 30.0
    quantity: int = 0
    report_interval_s: float = 10.0
    group: str = "benchmark_producer"
    rate: float = 0.0  # messages per second per process (async mode); 0 = as fast as the in-flight limit allows
    lean: bool = False  # pre-encoded frames on one connection (lean_producer), not the client library


def producer_line(now: float, w: Window, elapsed_s: float, batch: int) -> str:
    tps = w.ok * batch / elapsed_s if elapsed_s > 0 else 0.0
    avg = w.rt_total_us / w.ok / 1000 if w.ok else 0.0
    s = sorted(w.samples)
    ts = datetime.fromtimestamp(now).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
    return (f"Current Time: {ts} Send TPS: {int(tps)} Max RT(ms): {w.rt_max_us // 1000} Average RT(ms): "
            f"{avg:7.3f} Send Failed: {w.send_failed} Response Failed: {w.response_failed} "
            f"p50(ms): {percentile(s, 50):.3f} p99(ms): {percentile(s, 99):.3f} p999(ms): {percentile(s, 99.9):.3f}")
