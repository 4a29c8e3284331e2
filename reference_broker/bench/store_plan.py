"""What the store benchmark runs and how its figures are judged: sizes, the plan of a run (full, quick, scaled)
and the targets; numbers only, no stores or files (the workloads: store_bench.py, store_recovery_bench.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from reference_broker.bench.fio import FioParams
from reference_broker.store.config import MessageStoreConfig
from reference_broker.store.index_format import index_file_size

KiB: Final = 1 << 10
MiB: Final = 1 << 20
GiB: Final = 1 << 30
MANY_QUEUES: Final = 10_000
DEFAULT_SIZES: Final = (1 * GiB, 4 * GiB)
QUICK_SIZES: Final = (64 * MiB, 128 * MiB)

_SIZE_RE: Final = re.compile(r"^(\d+(?:\.\d+)?)([kmgt]?)(?:i?b)?$", re.IGNORECASE)
_UNITS: Final = {"": 1, "k": KiB, "m": MiB, "g": GiB, "t": 1 << 40}


# ---- sizes ---------------------------------------------------------------------------------------

def parse_size(text: str) -> int:
    """``64M``, ``1G``, ``1.5GiB``, ``4096`` → bytes (binary units); ValueError with a reason."""
    m = _SIZE_RE.match(text.strip())
    if not m:
        raise ValueError(f"{text.strip()!r} is not a size (use e.g. 64M, 1G, 4G)")
    n = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if n < MiB:
        raise ValueError(f"{text.strip()!r} is too small: a recovery log needs at least 1M")
    return n


def parse_sizes(text: str) -> tuple[int, ...]:
    """A comma-separated list of sizes, sorted, without duplicates."""
    items = [t for t in (s.strip() for s in text.split(",")) if t]
    if not items:
        raise ValueError("no sizes given (use e.g. 1G,4G)")
    return tuple(sorted({parse_size(t) for t in items}))


def size_label(n: int) -> str:
    for unit, mult in (("T", 1 << 40), ("G", GiB), ("M", MiB), ("K", KiB)):
        if n >= mult and n % mult == 0:
            return f"{n // mult}{unit}"
    return str(n)


# ---- plan ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    quick: bool
    scale: float
    sizes: tuple[int, ...]
    fio: bool
    async_messages: int
    sync_threads: tuple[int, ...]
    sync_duration_s: float
    queue_messages: int
    many_queues: int
    queue_create_budget_s: float
    rounds: int = 3

    @classmethod
    def make(cls, *, quick: bool, scale: float = 1.0, sizes: tuple[int, ...] | None = None, fio: bool = True,
             many_queues: int = MANY_QUEUES) -> Plan:
        """Counts for a full run (about 5 minutes with 1G,4G) or a quick one (under a minute); ``scale``
        shrinks message counts and durations (tests)."""
        def n(full: int, fast: int) -> int:
            return max(500, round((fast if quick else full) * scale))

        return cls(quick=quick, scale=scale, sizes=sizes or (QUICK_SIZES if quick else DEFAULT_SIZES), fio=fio,
                   async_messages=n(300_000, 50_000), sync_threads=(1, 16, 64),
                   sync_duration_s=max(0.2, (2.0 if quick else 5.0) * scale),
                   queue_messages=n(200_000, 50_000), many_queues=many_queues,
                   queue_create_budget_s=20.0 if quick else 300.0, rounds=3)


def disk_needed_bytes(plan: Plan) -> int:
    """Peak space one phase reserves (stores are removed between phases); files are fallocate'd whole."""
    cfg = MessageStoreConfig()
    index = index_file_size(cfg.max_hash_slot_num, cfg.max_index_num)
    fs = cfg.mapped_file_size_commit_log
    recovery = max(((s + fs - 1) // fs + 1) * fs for s in plan.sizes) + index
    queues = fs + index + plan.many_queues * cfg.consume_queue_alloc_chunk_bytes
    fio = FioParams.for_mode(plan.quick).seq_write_size_bytes if plan.fio else 0
    return max(recovery, queues, fio) + 256 * MiB


# ---- targets -------------------------------------------------------------------------------------

TARGETS: Final = (
    # name, metric, op, threshold, description
    ("append_async", "append_async_msgs_per_s", ">=", 150_000, "async append >= 150,000 msg/s"),
    ("sync64_vs_async", "sync64_vs_async_ratio", ">=", 0.5, "SYNC_FLUSH, 64 writers >= 50 % of async"),
    ("queues_{n}_vs_1", "queues_{n}_vs_1_ratio", ">=", 0.9, "{n:,} queues >= 90 % of one queue"),
    ("recovery_abnormal_checkpoint", "recovery_abnormal_checkpoint_s", "<=", 1.0,
     "abnormal recovery with checkpoint <= 1 s"),
    ("recovery_full_scan", "recovery_full_scan_bytes_per_s", ">=", 300e6, "full-scan recovery >= 300 MB/s"),
)


def evaluate_targets(result: dict[str, Any], many_queues: int = MANY_QUEUES) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, metric, op, threshold, desc in TARGETS:
        metric = metric.format(n=many_queues)
        value = result.get(metric)
        met = None if value is None else (value >= threshold if op == ">=" else value <= threshold)
        out[name.format(n=many_queues)] = {"description": desc.format(n=many_queues), "metric": metric, "op": op,
                                           "threshold": threshold, "value": value, "met": met}
    return out


def median_of(samples: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """The sample with the median ``key`` (the lower median for an even count), so its fields agree."""
    ordered = sorted(samples, key=lambda x: float(x[key]))
    return dict(ordered[(len(ordered) - 1) // 2])


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 4) if a is not None and b else None
