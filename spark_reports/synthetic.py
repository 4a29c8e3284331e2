"""Synthetic run records (schema v1) with known answers, for the tests and the 10M-event benchmark.

Each run's latencies are constructed so their percentiles are known in closed form: the samples of a
metric take the values f(1) < f(2) < … < f(n) of a fixed increasing function, handed out in window
order (window w gets ranks A_w + 1 … A_w + K_w, shuffled inside the window), so the nearest-rank
percentile p of the run is f(ceil(p·n)) and of window w is f(A_w + ceil(p·K_w)). Ops start in the
first 8 s of their 10 s window and every latency is under 2 s, so each sample stays in its window.
The history's lost / duplicated / recovered / unexpected counts are chosen up front and check.json
is computed from the written history by `synthetic_check` (a small pure-Python total-queue count).
"""

import hashlib
import json
import math
import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from spark_reports import offset_math as om
from spark_reports.percentiles import LABELS, PERCENTILES, nearest_rank_index
from spark_reports.synthetic_check import Delivery, Send, check_history

T0_NS: Final = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z
RUN_SPACING_NS: Final = 3_600_000_000_000  # runs one hour apart
WINDOW_NS: Final = 10_000_000_000
ACTIVE_NS: Final = 8_000_000_000  # ops start in the first 8 s of a window …
MAX_LATENCY_NS: Final = 2_000_000_000 - 1  # … and finish within 2 s, so samples never cross windows
TAIL_SHARE: Final = 0.01  # the top 1 % of a shape rises TAIL_FACTOR times faster (a visible tail)
TAIL_FACTOR: Final = 20
TOPIC: Final = "SynthTopic"
QUEUES: Final = 4
PRODUCERS: Final = 2
ROWS_PER_FILE: Final = 1_000_000
FAIL_NS: Final = 1_000_000  # a refused send returns after 1 ms
TIMEOUT_NS: Final = 3_000_000_000  # an unknown send times out after 3 s
RECEIVE_NS: Final = 20_000  # a delivery's own duration (start_ns → end_ns)
CODE_SUCCESS: Final = 0  # RocketMQ ResponseCode.SUCCESS
CODE_SERVICE_NOT_AVAILABLE: Final = 14  # RocketMQ ResponseCode.SERVICE_NOT_AVAILABLE

Int64Array = npt.NDArray[np.int64]


@dataclass(frozen=True)
class LatencyShape:
    """f(k) = offset + step·k, plus a steeper top 1 %; step = max(1, span // n)."""

    offset_ns: int
    span_ns: int

    def _step(self, n: int) -> int:
        return max(1, self.span_ns // max(1, n))

    def values(self, ranks: Int64Array, n: int) -> Int64Array:
        step = self._step(n)
        tail_from = math.ceil((1 - TAIL_SHARE) * n)
        tail = np.maximum(0, ranks - tail_from) * (TAIL_FACTOR * step)
        out: Int64Array = (self.offset_ns + step * ranks + tail).astype(np.int64)
        return out

    def value(self, rank: int, n: int) -> int:
        return int(self.values(np.array([rank], dtype=np.int64), n)[0])


@dataclass(frozen=True)
class SynthRunSpec:
    """One synthetic run: configuration, size, and the history's fault counts."""

    name: str
    flush_mode: str
    fault: str | None
    sysctl_profile: str | None
    sysctl_applied: bool
    messages: int
    failed: int = 0
    unknown: int = 0
    recovered: int = 0  # of the unknown sends, how many were delivered anyway
    lost: int = 0  # acknowledged, never delivered
    duplicated: int = 0  # delivered twice
    unexpected: int = 0  # delivered, never sent
    windows: int = 3
    body_sizes: tuple[int, ...] = (256, 1024, 4096)
    send: LatencyShape = LatencyShape(200_000, 2_000_000)
    delay: LatencyShape = LatencyShape(0, 300_000)
    e2e: LatencyShape = LatencyShape(3_000_000, 10_000_000)
    seed: int = 1

    def validate(self) -> None:
        if self.recovered > self.unknown:
            raise ValueError("recovered must not exceed unknown")
        if self.failed + self.unknown + self.lost + self.duplicated > self.messages:
            raise ValueError("more special messages than messages")
        if self.messages < self.windows:
            raise ValueError("fewer messages than windows")
        for shape in (self.send, self.delay, self.e2e):
            if shape.value(self.messages * 2, self.messages * 2) > MAX_LATENCY_NS:
                raise ValueError("latency shape exceeds 2 s")


@dataclass
class ExpectedRun:
    """The answers a report must find for one synthetic run."""

    run_id: str
    path: Path
    event_rows: int
    latency: dict[str, dict[str, Any]] = field(default_factory=dict)
    check: dict[str, Any] = field(default_factory=dict)
    peak_acks_per_s: int = 0  # exact: the most acks in any [t, t + 1 s)
    peak_bucket_max: int = 0  # the most acks in one 10 ms bucket: how far a bucketed peak may fall short
    mean_body_bytes: float = 0.0
    unflushed_bytes: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "event_rows": self.event_rows, "latency": self.latency,
                "check": self.check, "peak_acks_per_s": self.peak_acks_per_s,
                "peak_bucket_max": self.peak_bucket_max, "mean_body_bytes": self.mean_body_bytes,
                "unflushed_bytes": self.unflushed_bytes}


def _expected_stats(shape: LatencyShape, counts: Int64Array) -> dict[str, Any]:
    """Closed-form nearest-rank percentiles of a metric whose window w holds ranks A_w + 1 … A_w + K_w."""
    n = int(counts.sum())

    def stats(first: int, k: int) -> dict[str, Any]:
        out: dict[str, Any] = {"samples": k}
        for label, p in zip(LABELS, PERCENTILES, strict=True):
            out[label] = shape.value(first + nearest_rank_index(p, k) + 1, n)
        out["max"] = shape.value(first + k, n)
        return out

    result = stats(0, n)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    result["windows"] = {str(w): stats(int(a), int(k)) for w, (a, k) in enumerate(zip(starts, counts, strict=True))
                         if k > 0}
    return result


def _ranks_by_window(window: Int64Array, rng: np.random.Generator) -> Int64Array:
    """1-based ranks, contiguous per window in window order, shuffled within each window."""
    order = np.lexsort((rng.random(len(window)), window))
    ranks = np.empty(len(window), dtype=np.int64)
    ranks[order] = np.arange(1, len(window) + 1, dtype=np.int64)
    return ranks


def run_id_for(spec: SynthRunSpec, index: int) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime((T0_NS + index * RUN_SPACING_NS) // 10**9))
    digest = hashlib.sha256(f"{spec.name}/{spec.seed}/{index}".encode()).hexdigest()[:6]
    return f"{stamp}-synthetic-{digest}"


def _write_events(events_dir: Path, table: pa.Table, worker: str) -> None:
    for n, start in enumerate(range(0, max(1, table.num_rows), ROWS_PER_FILE)):
        pq.write_table(table.slice(start, ROWS_PER_FILE), events_dir / f"part-{worker}-{n}.parquet")


def _meta(spec: SynthRunSpec, run_id: str, started: int, ended: int) -> dict[str, Any]:
    values = {"vm.dirty_writeback_centisecs": 360000, "vm.dirty_ratio": 50} if spec.sysctl_applied else {}
    return {
        "schema_version": 1, "run_id": run_id, "scenario": "synthetic",
        "command": ["python", "-m", "spark_reports", "synth"],
        "started_at_ns": started, "ended_at_ns": ended,
        "broker": {"flushDiskType": spec.flush_mode, "brokerRole": "ASYNC_MASTER",
                   "mappedFileSizeCommitLog": 1073741824},
        "broker_impl": "synthetic (no broker ran)",
        "sysctl": {"profile": spec.sysctl_profile, "applied": spec.sysctl_applied,
                   "reason": None if spec.sysctl_applied or spec.sysctl_profile is None else "not root",
                   "values": values},
        "host": {"cores": os.cpu_count(), "ram_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
                 "kernel": platform.release(),
                 "python": platform.python_version(), "disk": {}},
        "fio": None, "git_rev": None, "params": {"spec": spec.name, "messages": spec.messages},
    }


def generate_run(out_dir: Path, spec: SynthRunSpec, index: int) -> ExpectedRun:
    """Write one run directory and return its known answers."""
    spec.validate()
    rng = np.random.default_rng(spec.seed * 1000 + index)
    run_id = run_id_for(spec, index)
    run_dir = out_dir / run_id
    (run_dir / "events").mkdir(parents=True, exist_ok=True)
    t0 = T0_NS + index * RUN_SPACING_NS
    m = spec.messages
    i = np.arange(m, dtype=np.int64)
    window = i * spec.windows // m
    per_window = np.bincount(window, minlength=spec.windows).astype(np.int64)
    first_in_window = np.concatenate([[0], np.cumsum(per_window)[:-1]])
    slot = i - first_in_window[window]
    start = t0 + window * WINDOW_NS + slot * (ACTIVE_NS // per_window[window])

    # Outcomes: a random choice of messages for each special fate.
    perm = rng.permutation(m)
    fate_sizes = {"failed": spec.failed, "unknown": spec.unknown, "lost": spec.lost, "duplicated": spec.duplicated}
    fate: dict[str, npt.NDArray[np.bool_]] = {}
    at = 0
    for name, size in fate_sizes.items():
        mask = np.zeros(m, dtype=bool)
        mask[perm[at:at + size]] = True
        fate[name] = mask
        at += size
    unknown_idx = np.flatnonzero(fate["unknown"])
    recovered = np.zeros(m, dtype=bool)
    recovered[unknown_idx[:spec.recovered]] = True
    ok = ~(fate["failed"] | fate["unknown"])
    stored = ok | recovered
    body = np.array(spec.body_sizes, dtype=np.int32)[i % len(spec.body_sizes)]

    # Send latency over acknowledged sends; publish delay over all sends.
    end = np.where(fate["failed"], start + FAIL_NS, start + TIMEOUT_NS)
    ok_idx = np.flatnonzero(ok)
    end[ok_idx] = start[ok_idx] + spec.send.values(_ranks_by_window(window[ok_idx], rng), len(ok_idx))
    delay = spec.delay.values(_ranks_by_window(window, rng), m)
    queue_id = (i % QUEUES).astype(np.int32)
    queue_offset = np.full(m, -1, dtype=np.int64)
    for q in range(QUEUES):
        sel = np.flatnonzero(stored & (queue_id == q))
        queue_offset[sel] = np.arange(len(sel))
    keys = np.char.add(np.char.add("w", (i % PRODUCERS).astype(str)),
                       np.char.add("-", np.char.zfill(i.astype(str), 9)))
    outcome = np.where(ok, "ok", np.where(fate["failed"], "fail", "unknown"))
    code = np.where(ok, CODE_SUCCESS, np.where(fate["failed"], CODE_SERVICE_NOT_AVAILABLE, -1)).astype(np.int32)

    # Deliveries: every stored message except the lost ones, duplicated ones twice, plus unexpected keys.
    delivered = np.flatnonzero(stored & ~fate["lost"])
    deliveries = np.concatenate([delivered, np.flatnonzero(fate["duplicated"])])
    e2e = spec.e2e.values(_ranks_by_window(window[deliveries], rng), len(deliveries))
    recv_end = start[deliveries] + e2e
    n_unexp = spec.unexpected
    unexp_end = t0 + 1_000_000_000 + np.arange(n_unexp, dtype=np.int64) * 1000
    r_end = np.concatenate([recv_end, unexp_end])
    r_keys = np.concatenate([keys[deliveries], np.array([f"x-{n:09d}" for n in range(n_unexp)], dtype=keys.dtype)])
    r_qid = np.concatenate([queue_id[deliveries], np.zeros(n_unexp, dtype=np.int32)])
    r_qoff = np.concatenate([queue_offset[deliveries], np.full(n_unexp, -1, dtype=np.int64)])
    r_body = np.concatenate([body[deliveries], np.full(n_unexp, spec.body_sizes[0], dtype=np.int32)])
    r_born = np.concatenate([start[deliveries] // 1_000_000 * 1_000_000, np.full(n_unexp, -1, dtype=np.int64)])
    r_store = np.concatenate([np.minimum(end, start + MAX_LATENCY_NS)[deliveries] // 1_000_000 * 1_000_000,
                              np.full(n_unexp, -1, dtype=np.int64)])
    order = np.argsort(r_end, kind="stable")
    n_recv = len(r_end)

    def column(values: Any, kind: Any) -> Any:
        return pa.array(values, type=kind)

    for w in range(PRODUCERS):
        sel = np.flatnonzero(i % PRODUCERS == w)
        _write_events(run_dir / "events", pa.table({
            "op": column(np.full(len(sel), "send"), pa.string()), "key": column(keys[sel], pa.string()),
            "topic": column(np.full(len(sel), TOPIC), pa.string()), "queue_id": column(queue_id[sel], pa.int32()),
            "queue_offset": column(queue_offset[sel], pa.int64()),
            "intended_ns": column(start[sel] - delay[sel], pa.int64()), "start_ns": column(start[sel], pa.int64()),
            "end_ns": column(end[sel], pa.int64()), "outcome": column(outcome[sel], pa.string()),
            "code": column(code[sel], pa.int32()), "bytes": column(body[sel], pa.int32()),
            "worker": column(np.full(len(sel), f"w{w}"), pa.string()),
            "born_ns": column(np.full(len(sel), -1), pa.int64()), "store_ns": column(np.full(len(sel), -1), pa.int64()),
        }), f"w{w}")
    r_sorted_end = r_end[order]
    _write_events(run_dir / "events", pa.table({
        "op": column(np.full(n_recv, "receive"), pa.string()), "key": column(r_keys[order], pa.string()),
        "topic": column(np.full(n_recv, TOPIC), pa.string()), "queue_id": column(r_qid[order], pa.int32()),
        "queue_offset": column(r_qoff[order], pa.int64()),
        "intended_ns": column(r_sorted_end - RECEIVE_NS, pa.int64()),
        "start_ns": column(r_sorted_end - RECEIVE_NS, pa.int64()), "end_ns": column(r_sorted_end, pa.int64()),
        "outcome": column(np.full(n_recv, "ok"), pa.string()), "code": column(np.full(n_recv, -1), pa.int32()),
        "bytes": column(r_body[order], pa.int32()), "worker": column(np.full(n_recv, "c0"), pa.string()),
        "born_ns": column(r_born[order], pa.int64()), "store_ns": column(r_store[order], pa.int64()),
    }), "c0")

    # check.json from the history as written (pure Python), faults, metrics, meta.
    check = check_history(
        (Send(k, o, int(b)) for k, o, b in zip(keys.tolist(), outcome.tolist(), body.tolist(), strict=True)),
        (Delivery(k, TOPIC, int(q), int(off)) for k, q, off in
         zip(r_keys[order].tolist(), r_qid[order].tolist(), r_qoff[order].tolist(), strict=True)),
        allow_loss=spec.flush_mode == "ASYNC_FLUSH" and spec.fault == "power_loss")
    (run_dir / "check.json").write_text(json.dumps(check, indent=2), encoding="utf-8")

    key_bytes = np.char.str_len(keys[stored]).astype(np.int64)
    record = (om.COMMITLOG_RECORD_FIXED_BYTES + body[stored].astype(np.int64) + len(TOPIC)
              + om.PROPERTIES_FIXED_BYTES + key_bytes)
    written = int(record.sum())
    lost_record_bytes = int(record[fate["lost"][stored]].sum())
    ended = t0 + spec.windows * WINDOW_NS
    unflushed: int | None = None
    faults = []
    if spec.fault == "power_loss":
        # Async flush holds up to a few pages more than what was lost; sync flush holds nothing.
        unflushed = lost_record_bytes + (4096 if spec.flush_mode == "ASYNC_FLUSH" else 0)
        faults.append({"ts_ns": ended, "kind": "power_loss", "target": "broker-a",
                       "params": {"written_offset": written, "flushed_offset": written - unflushed}})
    elif spec.fault is not None:
        faults.append({"ts_ns": ended, "kind": spec.fault, "target": "broker-a", "params": {"signal": 9}})
    (run_dir / "faults.jsonl").write_text("".join(json.dumps(f) + "\n" for f in faults), encoding="utf-8")

    acks = np.sort(end[ok_idx])
    peak = int((np.searchsorted(acks, acks + 1_000_000_000, side="left") - np.arange(len(acks))).max()) \
        if len(acks) else 0
    bucket_max = int(np.bincount((acks - acks[0]) // 10_000_000).max()) if len(acks) else 0
    seconds = (acks - t0) // 1_000_000_000
    tps = np.bincount(seconds, minlength=spec.windows * 10)
    metrics = []
    offset = 0
    for s, count in enumerate(tps.tolist()):
        offset += int(count) * int(record.mean()) if len(record) else 0
        ts = t0 + (s + 1) * 1_000_000_000
        metrics.append({"ts_ns": ts, "metric": "send_tps", "value": float(count), "label": ""})
        metrics.append({"ts_ns": ts, "metric": "commitlog_max_offset", "value": float(offset), "label": ""})
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in metrics), encoding="utf-8")
    (run_dir / "meta.json").write_text(json.dumps(_meta(spec, run_id, t0, ended), indent=2), encoding="utf-8")

    expected = ExpectedRun(run_id=run_id, path=run_dir, event_rows=m + n_recv, check=check,
                           peak_acks_per_s=peak, peak_bucket_max=bucket_max,
                           mean_body_bytes=float(body[ok].mean()) if ok.any() else 0.0,
                           unflushed_bytes=unflushed)
    expected.latency = {
        "send_latency": _expected_stats(spec.send, np.bincount(window[ok_idx], minlength=spec.windows)),
        "publish_delay": _expected_stats(spec.delay, per_window),
        "send_to_consume_latency": _expected_stats(spec.e2e, np.bincount(window[deliveries], minlength=spec.windows)),
    }
    expected.latency["send_to_consume_latency"]["unmatched"] = n_unexp
    return expected


def default_specs(total_events: int, *, seed: int = 1) -> list[SynthRunSpec]:
    """Four runs (async/sync flush × power loss/kill -9) of about ``total_events`` event rows in all."""
    # Each message is one send and about one delivery (a few fail, are lost or are delivered twice):
    # 4 runs hold about 7.99 rows per message, so this slightly overshoots total_events.
    m = max(50, math.ceil(total_events / 7.98))
    common: dict[str, Any] = {
        "messages": m, "failed": max(1, m // 400), "unknown": max(2, m // 200), "duplicated": max(1, m // 300),
        "windows": 6, "seed": seed,
    }
    common["recovered"] = common["unknown"] // 2
    return [
        SynthRunSpec("async-power", "ASYNC_FLUSH", "power_loss", "rocketmq-os.sh", True, lost=max(1, m // 250),
                     **common),
        SynthRunSpec("sync-power", "SYNC_FLUSH", "power_loss", "durable", True,
                     send=LatencyShape(400_000, 3_000_000), **common),
        SynthRunSpec("async-kill9", "ASYNC_FLUSH", "kill9", None, False, unexpected=1,
                     e2e=LatencyShape(2_000_000, 20_000_000), **common),
        SynthRunSpec("sync-kill9", "SYNC_FLUSH", "kill9", "rocketmq-os.sh", False,
                     delay=LatencyShape(10_000, 900_000), **common),
    ]


def generate(out_dir: Path, specs: list[SynthRunSpec]) -> dict[str, ExpectedRun]:
    """Write every run under ``out_dir`` plus ``out_dir/expected.json``; return the answers by run id."""
    out_dir.mkdir(parents=True, exist_ok=True)
    expected = {}
    for index, spec in enumerate(specs):
        run = generate_run(out_dir, spec, index)
        expected[run.run_id] = run
    (out_dir / "expected.json").write_text(
        json.dumps({k: v.to_json() for k, v in expected.items()}, indent=2), encoding="utf-8")
    return expected
