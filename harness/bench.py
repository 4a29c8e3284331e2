"""Cost of the harness itself: per-event recording cost of ``EventWriter`` and checker time for N events.

``python -m harness bench [--events N]`` prints both. The synthetic history has known answers (``Expected``),
so the benchmark also asserts the checker's counts at scale.
"""

# pyarrow ships no type information; its names are Any here.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from harness.checker import check_events, check_run
from harness.records.reader import load_events
from harness.records.run import RunRecord
from harness.records.schema import EVENTS_DIR, EVENTS_FULL_SCHEMA


@dataclass(frozen=True)
class Expected:
    attempted: int
    acknowledged: int
    failed: int
    unknown: int
    lost: int
    duplicated: int
    recovered: int


def synthetic_history(n_keys: int, seed: int = 0, workers: int = 4, queues: int = 8) -> tuple[pa.Table, Expected]:
    """Sends of ``n_keys`` keys and their receives, in offset order per queue: 1 % lost, 1 % duplicated,
    0.5 % unknown outcome (half of them received), 0.2 % failed (never received)."""
    rng = np.random.default_rng(seed)
    k = np.arange(n_keys)
    fate = rng.random(n_keys)
    failed = fate < 0.002
    unknown = (fate >= 0.002) & (fate < 0.007)
    acked = ~failed & ~unknown
    lost = acked & (fate >= 0.007) & (fate < 0.017)
    dup = acked & (fate >= 0.017) & (fate < 0.027)
    unknown_received = unknown & (rng.random(n_keys) < 0.5)
    worker = k % workers
    queue = (k // workers) % queues
    offset = k // (workers * queues) * workers + worker  # per-queue offsets rise with the key number
    start = 1_700_000_000_000_000_000 + k * 10_000
    end = start + 5_000
    outcome = np.where(acked, 0, np.where(failed, 1, 2))

    recv_keys = np.concatenate([np.flatnonzero((acked & ~lost) | unknown_received), np.flatnonzero(dup)])
    recv_keys.sort(kind="stable")
    recv_end = start[recv_keys] + 1_000_000 + np.arange(len(recv_keys))

    def strings(prefix: str, values: np.ndarray) -> pa.Array:
        return pa.array(np.char.add(prefix, values.astype(str)).astype(object), pa.string())

    n_s, n_r = n_keys, len(recv_keys)
    names = np.array(["ok", "fail", "unknown"], dtype=object)
    cols = {
        "op": pa.array(["send"] * n_s + ["receive"] * n_r, pa.string()),
        "key": pa.concat_arrays([strings("k", k), strings("k", recv_keys)]),
        "topic": pa.array(["T"] * (n_s + n_r), pa.string()),
        "queue_id": pa.array(np.concatenate([queue, queue[recv_keys]]).astype(np.int32)),
        "queue_offset": pa.array(np.concatenate([offset, offset[recv_keys]]).astype(np.int64)),
        "intended_ns": pa.array(np.concatenate([start, recv_end - 100])),
        "start_ns": pa.array(np.concatenate([start, recv_end - 100])),
        "end_ns": pa.array(np.concatenate([end, recv_end])),
        "outcome": pa.array(np.concatenate([names[outcome], np.full(n_r, "ok", dtype=object)]), pa.string()),
        "code": pa.array(np.full(n_s + n_r, -1, np.int32)),
        "bytes": pa.array(np.full(n_s + n_r, 1024, np.int32)),
        "worker": pa.concat_arrays([strings("p", worker), pa.array(["c0"] * n_r, pa.string())]),
        "born_ns": pa.array(np.concatenate([np.full(n_s, -1), start[recv_keys]])),
        "store_ns": pa.array(np.concatenate([np.full(n_s, -1), end[recv_keys]])),
        "session": pa.array([""] * (n_s + n_r), pa.string()),
    }
    expected = Expected(attempted=n_keys, acknowledged=int(acked.sum()), failed=int(failed.sum()),
                        unknown=int(unknown.sum()), lost=int(lost.sum()), duplicated=int(dup.sum()),
                        recovered=int(unknown_received.sum()))
    return pa.table(cols, schema=EVENTS_FULL_SCHEMA), expected


def write_history(runs_dir: Path, table: pa.Table, rows_per_file: int = 1 << 20) -> Path:
    """A run directory holding ``table`` as Parquet parts (what many workers would have written)."""
    rec = RunRecord.create(runs_dir, "bench-checker", {"events": table.num_rows}, ["harness", "bench"])
    parts = rec.run_dir / EVENTS_DIR
    parts.mkdir()
    for n, start in enumerate(range(0, table.num_rows, rows_per_file)):
        pq.write_table(table.slice(start, rows_per_file), parts / f"part-synthetic-{n:06d}.parquet",
                       compression="zstd")
    rec.finish()
    return rec.run_dir


@dataclass(frozen=True)
class WriterCost:
    events: int
    record_ns_per_event: float  # wall time in record_send, including hand-offs to the flusher
    total_ns_per_event: float  # until close() returns: every event encoded and on disk
    cpu_ns_per_event: float  # process CPU (both threads) until close()


def bench_writer(n_events: int, runs_dir: Path) -> WriterCost:
    rec = RunRecord.create(runs_dir, "bench-writer", {"events": n_events}, ["harness", "bench"])
    keys = [f"w0-{i:09d}" for i in range(n_events)]
    w = rec.events_writer("w0")
    send = w.record_send
    now = rec.clock.now_ns
    cpu0, t0 = time.process_time_ns(), time.perf_counter_ns()
    for key in keys:
        t = now()
        send(key, "TopicA", 3, 17, t, t + 1000, "ok", 0, 1024)
    t1 = time.perf_counter_ns()
    w.close()
    t2, cpu1 = time.perf_counter_ns(), time.process_time_ns()
    rec.finish()
    return WriterCost(n_events, (t1 - t0) / n_events, (t2 - t0) / n_events, (cpu1 - cpu0) / n_events)


@dataclass(frozen=True)
class CheckerCost:
    events: int
    load_s: float
    check_events_s: float
    check_run_s: float  # validate + load + check + write check.json


def bench_checker(n_events: int, runs_dir: Path) -> CheckerCost:
    table, expected = synthetic_history(n_events // 2)
    run_dir = write_history(runs_dir, table)
    del table
    t0 = time.perf_counter()
    events = load_events(run_dir)
    t1 = time.perf_counter()
    result = check_events(events)
    t2 = time.perf_counter()
    del events
    result_run = check_run(run_dir)
    t3 = time.perf_counter()
    got = (result.attempted, result.acknowledged, result.failed, result.unknown, result.lost, result.duplicated,
           result.recovered)
    want = (expected.attempted, expected.acknowledged, expected.failed, expected.unknown, expected.lost,
            expected.duplicated, expected.recovered)
    if got != want or result_run.to_json() != result.to_json() | {"run_id": result_run.run_id}:
        raise AssertionError(f"checker disagrees with the synthetic history: {got} != {want}")
    if result.order_violations:
        raise AssertionError(f"order violations in an ordered synthetic history: {result.order_violations}")
    return CheckerCost(table_rows(run_dir), t1 - t0, t2 - t1, t3 - t2)


def table_rows(run_dir: Path) -> int:
    return sum(pq.ParquetFile(p).metadata.num_rows for p in (run_dir / EVENTS_DIR).glob("part-*.parquet"))


def run_bench(n_writer_events: int, n_checker_events: int, directory: Path | None = None) -> str:
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        w = bench_writer(n_writer_events, Path(tmp))
        c = bench_checker(n_checker_events, Path(tmp))
    return "\n".join([
        f"EventWriter, {w.events:,} sends: record_send {w.record_ns_per_event:,.0f} ns/event (wall), "
        f"{w.total_ns_per_event:,.0f} ns/event to close(), {w.cpu_ns_per_event:,.0f} ns/event CPU (all threads)",
        f"checker, {c.events:,} events: load {c.load_s:.2f} s, check_events {c.check_events_s:.2f} s, "
        f"check_run (validate + load + check + check.json) {c.check_run_s:.2f} s",
    ])
