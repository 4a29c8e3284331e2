"""Synthetic backlog runs (scenario "backlog") with known build, drain, rate, footprint and residency answers.

One run follows the phases of ``scenarios/backlog_control.py`` at exact synthetic rates (all times in ns):

- warm-up: sends every 1/``rate`` s, each acknowledged 0.2 ms after it starts and delivered 0.3 ms later;
- pause (``paused_at``): sends go on at ``rate`` for ``build_s`` with no deliveries, so the backlog is
  ``rate × build_s`` messages at ``built_at``;
- resume ``GAP_NS`` later (a cold run drops the page cache in the gap): one consumer delivers the queued
  messages in send order, at most one every 1/``consume_rate`` s, while sends go on at ``drain_send_rate``;
- the drain ends at the first delivery after which acknowledged − delivered ≤ the drain threshold
  (backlog_control.drain_threshold with drain ratio 1); sends then return to ``rate`` for ``tail_s``.

Every commit-log record takes ``record_bytes``; the metrics sample each second the backlog (acknowledged −
delivered), the commit-log max offset (``record_bytes`` × acknowledged) and the commit log's page-cache bytes
(everything written, less what a cold run's drop evicted, which the drain's reads bring back record by record).
meta.json's ``results.backlog`` is written as the controller writes it. The answers are computed here with
numpy over the arrays written, independently of the reports' Spark code.
"""

import hashlib
import json
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from spark_reports.synthetic_check import Delivery, Send, check_history

T0_NS: Final = 1_767_312_000_000_000_000  # 2026-01-02T00:00:00Z (a day after synthetic.py's runs)
RUN_SPACING_NS: Final = 3_600_000_000_000
SECOND_NS: Final = 1_000_000_000
FIRST_SEND_NS: Final = 1_000_000  # the first send starts 1 ms after the run, after the first metrics sample
SEND_NS: Final = 200_000  # every send is acknowledged 0.2 ms after it starts
DELIVER_NS: Final = 300_000  # an unqueued message is delivered 0.3 ms after its ack
RECEIVE_NS: Final = 20_000  # a delivery's own duration (start_ns → end_ns)
GAP_NS: Final = 40_000_000  # built → resumed (the controller's page-cache drop and residency probe)
TOPIC: Final = "lab_backlog_synth"
GROUP: Final = "lab_consumer_synth"
QUEUES: Final = 8
CQ_UNIT_BYTES: Final = 20  # RocketMQ 4.9.8 ConsumeQueue.CQ_STORE_UNIT_SIZE
INDEX_ENTRY_BYTES: Final = 20  # RocketMQ 4.9.8 IndexFile entry
OMB_DRAIN_FLOOR_MSGS: Final = 1000  # scenarios/backlog_control.py (OMB's fixed floor, capped at 1 % there)
DISK_READ_SHARE: Final = 0.1  # scenarios/backlog_control.py: storage reads above this share of the backlog = disk

Int64Array = npt.NDArray[np.int64]


@dataclass(frozen=True)
class BacklogSpec:
    """One synthetic backlog run. Rates must divide 10^9 (whole-ns periods)."""

    name: str
    cold: bool = False
    cache_dropped: bool = True  # cold runs: whether drop_caches ran (False: "not root")
    read_from_disk: bool = False  # the broker's storage reads during the drain: 80 % of the backlog, else 0
    residency_after_drop: float = 1.0  # cold runs: resident share of the backlog's commit-log bytes after the drop
    rate: int = 1_000
    drain_send_rate: int = 1_000
    consume_rate: int = 10_000
    warmup_s: int = 2
    build_s: int = 10
    tail_s: int = 2
    message_size: int = 1024
    record_bytes: int = 1232
    key_tokens: int = 1  # tokens in the KEYS property (space-separated)
    index_enabled: bool = True
    fio_randread_iops: float | None = None
    ram_bytes: int = 24 * 2**30
    disk_total_bytes: int | None = 256 * 10**9
    disk_free_bytes: int = 100 * 10**9
    metrics_jsonl: bool = False

    def validate(self) -> None:
        for rate in (self.rate, self.drain_send_rate, self.consume_rate):
            if rate <= 0 or SECOND_NS % rate:
                raise ValueError(f"rate {rate} must be positive and divide 10^9")
        if SECOND_NS // self.rate <= SEND_NS + DELIVER_NS:
            raise ValueError("rate too high: warm-up deliveries would cross the pause")
        if self.consume_rate <= self.drain_send_rate:
            raise ValueError("consume_rate must exceed drain_send_rate, or the backlog never drains")
        if self.record_bytes <= self.message_size:
            raise ValueError("a commit-log record is larger than its body")


@dataclass(frozen=True)
class ExpectedBacklog:
    """The answers the reports must find for one synthetic backlog run."""

    run_id: str
    path: Path
    cold: bool
    cache_dropped: bool
    read_source: str  # "disk" or "page cache"
    build_s: float
    backlog_msgs: int
    backlog_bytes: int
    threshold: int
    drain_ns: int  # resumed → drained
    sends_in_drain: int  # acknowledged sends with resumed < end_ns <= drained
    receives_in_drain: int  # deliveries with resumed < end_ns <= drained
    acknowledged: int
    record_bytes: int
    body_bytes: int
    index_entries: int  # per message: UNIQ_KEY + KEYS tokens (0 with the index off)
    max_backlog_metric: float
    page_cache_min_in_drain: float | None  # smallest commit-log page-cache sample in (resumed, drained]
    residency_at_drain_start: float

    @property
    def drain_s(self) -> float:
        return self.drain_ns / SECOND_NS

    @property
    def send_rate_in_drain(self) -> float:
        return self.sends_in_drain / self.drain_s

    @property
    def read_rate(self) -> float:
        return self.receives_in_drain / self.drain_s

    @property
    def drain_rate(self) -> float:
        return self.backlog_msgs / self.drain_s


def drain_threshold(built_msgs: int) -> int:
    """scenarios/backlog_control.drain_threshold with drain ratio 1 (re-stated: reports never import scenarios)."""
    return min(OMB_DRAIN_FLOOR_MSGS, max(1, built_msgs // 100))


def run_id_for(spec: BacklogSpec, index: int) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime((T0_NS + index * RUN_SPACING_NS) // SECOND_NS))
    return f"{stamp}-backlog-{hashlib.sha256(f'{spec.name}/{index}'.encode()).hexdigest()[:6]}"


def _periodic(first: int, period: int, count: int) -> Int64Array:
    return first + np.arange(count, dtype=np.int64) * period


def _deliveries(ready: Int64Array, period: int) -> Int64Array:
    """A single consumer at one delivery per ``period``: delivery k = max over j <= k of ready_j + (k - j)·period."""
    k = np.arange(len(ready), dtype=np.int64) * period
    return k + np.maximum.accumulate(ready - k) if len(ready) else ready


def _write_parquet(path: Path, columns: dict[str, Any]) -> None:
    pq.write_table(pa.table(columns), path)


def _meta(spec: BacklogSpec, run_id: str, started: int, ended: int, backlog: dict[str, Any]) -> dict[str, Any]:
    disk: dict[str, Any] = {}
    if spec.disk_total_bytes is not None:
        disk = {"path": "/tmp/labruns", "total_bytes": spec.disk_total_bytes, "free_bytes": spec.disk_free_bytes,
                "mount": "/", "device": "/dev/synthetic", "fs_type": "ext4"}
    fio = None
    if spec.fio_randread_iops is not None:
        fio = {"mode": "quick", "randread_4k_iops": spec.fio_randread_iops, "randread_ioengine": "libaio iodepth=32"}
    return {
        "schema_version": 1, "run_id": run_id, "scenario": "backlog",
        "command": ["locust", "-f", "scenarios/backlog.py", "--headless", *(["--cold"] if spec.cold else [])],
        "started_at_ns": started, "ended_at_ns": ended,
        "broker": {"flushDiskType": "ASYNC_FLUSH", "brokerRole": "ASYNC_MASTER",
                   "mappedFileSizeCommitLog": 1073741824, "messageIndexEnable": spec.index_enabled,
                   "maxHashSlotNum": 5_000_000, "maxIndexNum": 20_000_000, "diskMaxUsedSpaceRatio": 75},
        "broker_impl": "synthetic (no broker ran)",
        "sysctl": {"profile": None, "applied": False, "reason": "no profile requested", "values": {}},
        "host": {"cores": os.cpu_count(), "ram_bytes": spec.ram_bytes, "kernel": platform.release(),
                 "python": platform.python_version(), "disk": disk},
        "fio": fio, "git_rev": None,
        "params": {"spec": spec.name, "message_size": spec.message_size, "rate": float(spec.rate),
                   "backlog_bytes": spec.rate * spec.build_s * spec.message_size, "drain_ratio": 1.0,
                   "drain_rate": float(spec.drain_send_rate), "warmup_s": float(spec.warmup_s), "cold": spec.cold},
        "results": {"backlog": backlog},
    }


def generate_run(out_dir: Path, spec: BacklogSpec, index: int) -> ExpectedBacklog:
    """Write one backlog run directory and return its known answers."""
    spec.validate()
    run_id = run_id_for(spec, index)
    run_dir = out_dir / run_id
    (run_dir / "events").mkdir(parents=True, exist_ok=True)
    t0 = T0_NS + index * RUN_SPACING_NS
    period, drain_period, consume_period = (SECOND_NS // r for r in
                                            (spec.rate, spec.drain_send_rate, spec.consume_rate))

    # Sends: warm-up and build at `rate`; the drain's sends at `drain_send_rate` (cut at the drain's end below).
    warm = _periodic(t0 + FIRST_SEND_NS, period, spec.rate * spec.warmup_s)
    paused = t0 + FIRST_SEND_NS + spec.warmup_s * SECOND_NS
    build = _periodic(paused, period, spec.rate * spec.build_s)
    built = paused + spec.build_s * SECOND_NS
    resumed = built + GAP_NS
    backlog = len(build)
    threshold = drain_threshold(backlog)
    horizon = backlog * SECOND_NS // (spec.consume_rate - spec.drain_send_rate) + 2 * SECOND_NS
    drain_sends = _periodic(resumed, drain_period, horizon // drain_period)

    # The drain ends at the first delivery k with backlog + drain acks so far - (k + 1) <= threshold.
    queued_acks = np.concatenate([build, drain_sends]) + SEND_NS
    recv = _deliveries(np.maximum(queued_acks + DELIVER_NS, resumed + consume_period), consume_period)
    drain_acks = np.searchsorted(drain_sends + SEND_NS, recv, side="right")
    left = backlog + drain_acks - np.arange(1, len(recv) + 1)
    drained = int(recv[int(np.argmax(left <= threshold))])
    tail = _periodic(drained + period, period, spec.rate * spec.tail_s)
    starts = np.concatenate([warm, build, drain_sends[drain_sends < drained], tail])
    acks = starts + SEND_NS
    n_warm = len(warm)
    recv_all = np.concatenate([acks[:n_warm] + DELIVER_NS,
                               _deliveries(np.maximum(acks[n_warm:] + DELIVER_NS, resumed + consume_period),
                                           consume_period)])
    assert recv_all[n_warm - 1] < paused and recv_all[n_warm] > resumed  # warm-up drained, the rest queued

    # Events.
    m = len(starts)
    i = np.arange(m)
    base = np.char.add(f"{spec.name}-w0-", np.char.zfill(i.astype(str), 9))
    keys = base
    for token in range(1, spec.key_tokens):
        keys = np.char.add(np.char.add(keys, f" t{token}-"), i.astype(str))
    queue_id = (i % QUEUES).astype(np.int32)
    queue_offset = i // QUEUES
    body = np.full(m, spec.message_size, dtype=np.int32)
    minus_one = np.full(m, -1, dtype=np.int64)
    common = {"key": keys, "topic": np.full(m, TOPIC), "queue_id": queue_id, "queue_offset": queue_offset}
    _write_parquet(run_dir / "events" / "part-w0-000000.parquet", {
        "op": np.full(m, "send"), **common, "intended_ns": starts, "start_ns": starts, "end_ns": acks,
        "outcome": np.full(m, "ok"), "code": np.zeros(m, dtype=np.int32), "bytes": body,
        "worker": np.full(m, "w0"), "born_ns": minus_one, "store_ns": minus_one, "session": np.full(m, ""),
    })
    _write_parquet(run_dir / "events" / "part-c0-000000.parquet", {
        "op": np.full(m, "receive"), **common, "intended_ns": recv_all - RECEIVE_NS,
        "start_ns": recv_all - RECEIVE_NS, "end_ns": recv_all, "outcome": np.full(m, "ok"),
        "code": np.full(m, -1, dtype=np.int32), "bytes": body, "worker": np.full(m, "c0"),
        "born_ns": starts // 1_000_000 * 1_000_000, "store_ns": acks // 1_000_000 * 1_000_000,
        "session": np.full(m, ""),
    })
    check = check_history((Send(str(k), "ok", spec.message_size) for k in keys.tolist()),
                          (Delivery(str(k), TOPIC, int(q), int(o)) for k, q, o in
                           zip(keys.tolist(), queue_id.tolist(), queue_offset.tolist(), strict=True)))
    check["run_id"] = run_id
    (run_dir / "check.json").write_text(json.dumps(check, indent=2), encoding="utf-8")

    # The page cache: a cold run's drop (in the gap) evicts part of what was written; deliveries read it back.
    dropped_at = built + GAP_NS // 2
    written_at_build = spec.record_bytes * int(np.searchsorted(acks, built, side="right"))
    written_at_pause = spec.record_bytes * int(np.searchsorted(acks, paused, side="right"))
    evicting = spec.cold and spec.cache_dropped
    evicted = round((1 - spec.residency_after_drop) * written_at_build) if evicting else 0
    sorted_recv = np.sort(recv_all)

    def page_cache(ts: int, written: int) -> float:
        if ts < dropped_at or evicted == 0:
            return float(written)
        reread = spec.record_bytes * int(np.searchsorted(sorted_recv, ts, side="right")
                                         - np.searchsorted(sorted_recv, resumed, side="right"))
        return float(written - max(0, evicted - reread))

    ended = int(recv_all.max()) + SECOND_NS
    entries = (1 + spec.key_tokens) if spec.index_enabled else 0
    samples: list[dict[str, Any]] = []
    in_drain: list[float] = []
    max_backlog = 0.0
    for ts in range(t0, ended + 1, SECOND_NS):
        acked = int(np.searchsorted(acks, ts, side="right"))
        backlog_now = float(acked - np.searchsorted(sorted_recv, ts, side="right"))
        written = spec.record_bytes * acked
        cached = page_cache(ts, written)
        max_backlog = max(max_backlog, backlog_now)
        if resumed < ts <= drained:
            in_drain.append(cached)
        samples += [{"ts_ns": ts, "metric": "backlog_msgs", "value": backlog_now, "label": GROUP},
                    {"ts_ns": ts, "metric": "commitlog_max_offset", "value": float(written), "label": ""},
                    {"ts_ns": ts, "metric": "page_cache_bytes", "value": cached, "label": "commitlog"},
                    {"ts_ns": ts, "metric": "page_cache_bytes", "value": float(CQ_UNIT_BYTES * acked),
                     "label": "consumequeue"},
                    {"ts_ns": ts, "metric": "page_cache_bytes", "value": float(INDEX_ENTRY_BYTES * entries * acked),
                     "label": "index"}]
    if spec.metrics_jsonl:
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples), encoding="utf-8")
    else:
        (run_dir / "metrics").mkdir(exist_ok=True)
        pq.write_table(pa.Table.from_pylist(samples, schema=pa.schema([
            ("ts_ns", pa.int64()), ("metric", pa.string()), ("value", pa.float64()), ("label", pa.string())])),
            run_dir / "metrics" / "part-main-000000.parquet")

    # results.backlog as scenarios/backlog_control.py writes it.
    backlog_bytes = backlog * spec.message_size
    at_build = {"resident_bytes": written_at_build, "range_bytes": written_at_build, "ratio": 1.0}
    drain_s = round((drained - resumed) / SECOND_NS, 3)
    in_window = (recv_all > resumed) & (recv_all <= drained)
    sends_in_window = int(((acks > resumed) & (acks <= drained)).sum())
    disk_read = round(0.8 * backlog_bytes) if spec.read_from_disk else 0
    where = "disk" if disk_read > DISK_READ_SHARE * backlog_bytes else "page cache"
    results: dict[str, Any] = {
        "target_bytes": backlog_bytes, "drain_ratio": 1.0, "drain_rate": float(spec.drain_send_rate),
        "warmup_s": float(spec.warmup_s), "paused_at_ns": paused, "client_backlog_at_pause_msgs": 0,
        "built_at_ns": built, "build_s": round((built - paused) / SECOND_NS, 3), "backlog_msgs": backlog,
        "backlog_bytes": backlog_bytes, "client_backlog_msgs": backlog,
        "commitlog_range": [written_at_pause, written_at_build], "page_cache_at_build": at_build,
    }
    faults = []
    residency_at_start = 1.0
    if spec.cold:
        after = dict(at_build)
        if spec.cache_dropped:
            after = {"resident_bytes": written_at_build - evicted, "range_bytes": written_at_build,
                     "ratio": round((written_at_build - evicted) / written_at_build, 4)}
            residency_at_start = after["ratio"]
        reason = None if spec.cache_dropped else "not root (euid 1000)"
        results["cold"] = {"dropped": spec.cache_dropped, "reason": reason, "page_cache_after_drop": after}
        faults.append({"ts_ns": dropped_at, "kind": "drop_caches", "target": "host",
                       "params": {"level": 1, "done": spec.cache_dropped, "reason": reason,
                                  "page_cache_before": at_build, "page_cache_after": after}})
    results.update(
        resumed_at_ns=resumed, drain_threshold_msgs=threshold, drained_at_ns=drained, drain_s=drain_s,
        drain_rate_msgs=round(backlog / drain_s, 1), consume_rate_msgs=round(int(in_window.sum()) / drain_s, 1),
        disk_read_bytes=disk_read, read_from=f"{where} ({disk_read / 2**20:.1f} MiB read from storage)",
        broker_backlog_after_drain_msgs=threshold)
    (run_dir / "faults.jsonl").write_text("".join(json.dumps(f) + "\n" for f in faults), encoding="utf-8")
    (run_dir / "meta.json").write_text(json.dumps(_meta(spec, run_id, t0, ended, results), indent=2),
                                       encoding="utf-8")
    return ExpectedBacklog(
        run_id=run_id, path=run_dir, cold=spec.cold, cache_dropped=spec.cache_dropped, read_source=where,
        build_s=spec.build_s, backlog_msgs=backlog, backlog_bytes=backlog_bytes, threshold=threshold,
        drain_ns=drained - resumed, sends_in_drain=sends_in_window, receives_in_drain=int(in_window.sum()),
        acknowledged=m, record_bytes=spec.record_bytes, body_bytes=spec.message_size, index_entries=entries,
        max_backlog_metric=max_backlog, page_cache_min_in_drain=min(in_drain) if in_drain else None,
        residency_at_drain_start=residency_at_start)


def generate(out_dir: Path, specs: list[BacklogSpec], *, first_index: int = 0) -> dict[str, ExpectedBacklog]:
    """Write every run under ``out_dir``; return the answers by run id."""
    out_dir.mkdir(parents=True, exist_ok=True)
    runs = [generate_run(out_dir, spec, first_index + n) for n, spec in enumerate(specs)]
    return {r.run_id: r for r in runs}


def variety_specs() -> list[BacklogSpec]:
    """One run of each kind the backlog reports tell apart (about 15,000 messages each).

    hot; cold from disk (8,000 deliveries/s); cold from disk and slow (4,000/s, keys of two tokens); cold but still
    cached (drop_caches left everything resident; no index, lean 60-byte record overhead); cold asked for but the
    cache not dropped (not root).
    """
    return [
        BacklogSpec("hot", fio_randread_iops=12_000.0),
        BacklogSpec("cold-disk", cold=True, read_from_disk=True, residency_after_drop=0.2, consume_rate=8_000,
                    fio_randread_iops=12_000.0, metrics_jsonl=True),
        BacklogSpec("cold-slow", cold=True, read_from_disk=True, residency_after_drop=0.05, consume_rate=4_000,
                    key_tokens=2, record_bytes=1250),
        BacklogSpec("cold-cached", cold=True, residency_after_drop=1.0, index_enabled=False, record_bytes=1084,
                    disk_total_bytes=None),
        BacklogSpec("cold-not-root", cold=True, cache_dropped=False),
    ]
