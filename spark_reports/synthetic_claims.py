"""Synthetic run records with known answers for the claim-judging reports: flush-mode pairs, recovery-bench
runs, queue-count phases, disk-fill cycles and broker-group runs that lost their master.

Each writer lays out a run directory as the producing code does (meta.json with ``results``, events Parquet,
faults.jsonl, check.json, chaos.json where chaos writes one) and returns what a report must find, computed
here from the values it wrote (nearest-rank percentiles of the written latencies, counts, windows), not by
the code under test.
"""

import json
import math
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

T0_NS: Final = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z
RUN_SPACING_NS: Final = 3_600_000_000_000
MIB: Final = 1 << 20
TOPIC: Final = "ClaimTopic"
CODE_SERVICE_NOT_AVAILABLE: Final = 14
BROKER_IMPL: Final = "synthetic (no broker ran)"

Int64Array = npt.NDArray[np.int64]


def run_id_for(scenario: str, index: int) -> str:
    return f"20260101T{index // 60 % 24:02d}{index % 60:02d}00-{scenario}-{index:06x}"


def _meta(run_id: str, scenario: str, flush_mode: str, params: dict[str, Any], started: int, ended: int,
          profile: str | None, results: dict[str, Any] | None = None) -> dict[str, Any]:
    applied = profile is not None
    return {
        "schema_version": 1, "run_id": run_id, "scenario": scenario, "command": ["synthetic_claims"],
        "started_at_ns": started, "ended_at_ns": ended,
        "broker": {"flushDiskType": flush_mode, "brokerRole": "ASYNC_MASTER"}, "broker_impl": BROKER_IMPL,
        "sysctl": {"profile": profile, "applied": applied, "reason": None,
                   "values": {"vm.dirty_ratio": 20} if applied else {}},
        "host": {"cores": os.cpu_count(), "ram_bytes": 8 << 30, "kernel": platform.release(),
                 "python": platform.python_version(), "hostname": "synth", "disk": {}},
        "fio": None, "git_rev": None, "params": params, "results": results or {},
    }


def _write_run(out_dir: Path, run_id: str, meta: dict[str, Any], events: dict[str, Any] | None = None,
               faults: list[dict[str, Any]] | None = None, check: dict[str, Any] | None = None,
               chaos: dict[str, Any] | None = None) -> Path:
    run_dir = out_dir / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "meta.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
    if events is not None:
        (run_dir / "events").mkdir(exist_ok=True)
        n = len(events["op"])
        table = pa.table({
            "op": pa.array(events["op"], pa.string()), "key": pa.array(events["key"], pa.string()),
            "topic": pa.array([TOPIC] * n, pa.string()), "queue_id": pa.array([0] * n, pa.int32()),
            "queue_offset": pa.array([-1] * n, pa.int64()),
            "intended_ns": pa.array(events["start_ns"], pa.int64()),
            "start_ns": pa.array(events["start_ns"], pa.int64()), "end_ns": pa.array(events["end_ns"], pa.int64()),
            "outcome": pa.array(events["outcome"], pa.string()), "code": pa.array(events["code"], pa.int32()),
            "bytes": pa.array([1024] * n, pa.int32()), "worker": pa.array(["w0"] * n, pa.string()),
            "born_ns": pa.array([-1] * n, pa.int64()), "store_ns": pa.array([-1] * n, pa.int64()),
        })
        pq.write_table(table, run_dir / "events" / "part-w0-0.parquet")
    if faults is not None:
        (run_dir / "faults.jsonl").write_text("".join(json.dumps(f) + "\n" for f in faults), encoding="utf-8")
    if check is not None:
        (run_dir / "check.json").write_text(json.dumps(check), encoding="utf-8")
    if chaos is not None:
        (run_dir / "chaos.json").write_text(json.dumps(chaos), encoding="utf-8")
    return run_dir


def check_json(acknowledged: int, failed: int = 0, lost: int = 0, lost_bytes: int = 0,
               allow_loss: bool = False) -> dict[str, Any]:
    return {"schema_version": 1, "attempted": acknowledged + failed, "acknowledged": acknowledged,
            "failed": failed, "unknown": 0, "lost": lost, "lost_bytes": lost_bytes, "unexpected": 0,
            "duplicated": 0, "recovered": 0, "order_violations": {}, "samples": {}, "valid": True,
            "allow_loss": allow_loss}


def _nearest_rank(sorted_values: Int64Array, p: float) -> int:
    return int(sorted_values[max(0, math.ceil(p * len(sorted_values)) - 1)])


# ---- flush-mode pairs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SendRun:
    """``acked`` sends one every ``interval_ns`` from the run start, latencies base + step·k (k = 0 … acked−1)
    in a shuffled order, and ``failed`` refused sends in between."""

    scenario: str
    flush_mode: str
    acked: int
    interval_ns: int
    base_ns: int
    step_ns: int
    failed: int = 0
    fault: str | None = None  # "kill9" or "power_loss": one such crash and its restart in faults.jsonl
    params: dict[str, Any] = field(default_factory=dict)
    profile: str | None = "default"
    seed: int = 1


@dataclass(frozen=True)
class SendRunAnswer:
    run_id: str
    flush_mode: str
    latencies: Int64Array  # sorted
    window_ns: int  # first send's start → last ack

    @property
    def acks_per_s(self) -> float:
        return len(self.latencies) / (self.window_ns / 1e9)

    def q(self, p: float) -> int:
        return _nearest_rank(self.latencies, p)


def write_send_run(out_dir: Path, spec: SendRun, index: int) -> SendRunAnswer:
    rng = np.random.default_rng(spec.seed * 1000 + index)
    run_id = run_id_for(spec.scenario, index)
    t0 = T0_NS + index * RUN_SPACING_NS
    latencies = (spec.base_ns + spec.step_ns * rng.permutation(spec.acked)).astype(np.int64)
    starts = t0 + spec.interval_ns * np.arange(spec.acked, dtype=np.int64)
    ends = starts + latencies
    fail_starts = t0 + spec.interval_ns // 2 + spec.interval_ns * np.arange(spec.failed, dtype=np.int64)
    n = spec.acked + spec.failed
    events = {"op": ["send"] * n, "key": [f"k{i:07d}" for i in range(n)],
              "start_ns": [*starts.tolist(), *fail_starts.tolist()],
              "end_ns": [*ends.tolist(), *(fail_starts + 1_000_000).tolist()],
              "outcome": ["ok"] * spec.acked + ["fail"] * spec.failed,
              "code": [-1] * spec.acked + [CODE_SERVICE_NOT_AVAILABLE] * spec.failed}
    ended = int(ends.max())
    faults = None
    if spec.fault is not None:
        crash = t0 + spec.interval_ns * (spec.acked // 2)
        faults = [{"ts_ns": crash, "kind": spec.fault, "target": "broker-a",
                   "params": {"written_offset": 10_000, "flushed_offset": 10_000}},
                  {"ts_ns": crash + 1, "kind": "restart", "target": "broker-a", "params": {"recovery_s": 0.3}}]
    params = {**spec.params, "flush": spec.flush_mode, "seed": spec.seed + index}
    meta = _meta(run_id, spec.scenario, spec.flush_mode, params, t0, ended, spec.profile)
    _write_run(out_dir, run_id, meta, events, faults, check_json(spec.acked, spec.failed))
    return SendRunAnswer(run_id, spec.flush_mode, np.sort(latencies), ended - t0)


def pooled(answers: list[SendRunAnswer]) -> SendRunAnswer:
    """The answer for several runs of one mode taken together (windows add up, samples pool)."""
    return SendRunAnswer("+".join(a.run_id for a in answers), answers[0].flush_mode,
                         np.sort(np.concatenate([a.latencies for a in answers])), sum(a.window_ns for a in answers))


# ---- recovery-bench runs ---------------------------------------------------------------------------------

RECOVERY_CASES: Final = ("clean", "kill9-flushed", "kill9-tail", "kill9-no-checkpoint")


def write_recovery_run(out_dir: Path, index: int, times: dict[tuple[int, str], float],
                       sizes_mib: list[int], tail_bytes: int = 8 * MIB,
                       work: dict[tuple[int, str], float] | None = None) -> str:
    """A recovery-bench record: per size (in order) the four cases with the given restart times in seconds;
    the tail and no-checkpoint rows sit ``tail_bytes`` past the size, as the bench's burst leaves them. With
    ``work``, each row also carries the store's start phases: that recovery work, split between the log's
    scan and the tail's dispatch, and a fixed 0.05 s of loading."""
    run_id = run_id_for("recovery", index)
    rows: list[dict[str, Any]] = []
    for size in sizes_mib:
        for case in RECOVERY_CASES:
            if (size, case) not in times:
                continue
            after_burst = case in ("kill9-tail", "kill9-no-checkpoint")
            rows.append({"log_bytes": size * MIB + (tail_bytes if after_burst else 0), "case": case,
                         "unflushed_bytes": tail_bytes if case == "kill9-tail" else 0,
                         "checkpoint": case != "kill9-no-checkpoint", "recovery_s": times[(size, case)]})
            if work is not None:
                w = work[(size, case)]
                rows[-1].update(work_s=w, phases={"loadCommitLog": 0.05, "recoverCommitLog": 0.75 * w,
                                                  "dispatchTail": 0.25 * w})
    t0 = T0_NS + index * RUN_SPACING_NS
    meta = _meta(run_id, "recovery", "ASYNC_FLUSH", {"sizes_mib": sizes_mib, "file_mib": 32}, t0,
                 t0 + 60 * 10**9, None, {"recovery": rows})
    _write_run(out_dir, run_id, meta)
    return run_id


# ---- queue-count phases ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueuePhase:
    queues: int
    acked: int
    base_ns: int
    step_ns: int
    failed: int = 0


@dataclass(frozen=True)
class PhaseAnswer:
    label: str
    queues: int
    attempted: int
    acks_per_s: float
    latencies: Int64Array  # sorted

    def q(self, p: float) -> int:
        return _nearest_rank(self.latencies, p)


def write_queues_run(out_dir: Path, index: int, phases: list[QueuePhase], phase_s: float = 10.0,
                     rate: float = 2000.0, warmup_sends: int = 50) -> tuple[str, list[PhaseAnswer]]:
    """Phases back to back (5 ms apart) after ``warmup_sends`` sends that belong to no phase; each phase's sends
    start evenly inside its window."""
    rng = np.random.default_rng(index)
    run_id = run_id_for("queues", index)
    t0 = T0_NS + index * RUN_SPACING_NS
    phase_ns = int(phase_s * 1e9)
    ops: dict[str, list[Any]] = {"op": [], "key": [], "start_ns": [], "end_ns": [], "outcome": [], "code": []}

    def add(starts: Int64Array, ends: Int64Array, outcome: str, code: int) -> None:
        base = len(ops["op"])
        ops["op"] += ["send"] * len(starts)
        ops["key"] += [f"k{base + i:08d}" for i in range(len(starts))]
        ops["start_ns"] += starts.tolist()
        ops["end_ns"] += ends.tolist()
        ops["outcome"] += [outcome] * len(starts)
        ops["code"] += [code] * len(starts)

    warm = t0 + 1_000_000 * np.arange(warmup_sends, dtype=np.int64)
    add(warm, warm + 500_000, "ok", -1)
    rows, answers = [], []
    start = t0 + 1_000_000_000
    for ph in phases:
        n = ph.acked + ph.failed
        starts = start + (phase_ns * np.arange(n, dtype=np.int64)) // n
        lat = (ph.base_ns + ph.step_ns * rng.permutation(ph.acked)).astype(np.int64)
        add(starts[:ph.acked], starts[:ph.acked] + lat, "ok", -1)
        add(starts[ph.acked:], starts[ph.acked:] + 1_000_000, "fail", CODE_SERVICE_NOT_AVAILABLE)
        label = f"q={ph.queues}"
        rows.append({"label": label, "queues": ph.queues, "topics": max(1, math.ceil(ph.queues / 1000)),
                     "start_ns": int(start), "end_ns": int(start + phase_ns)})
        answers.append(PhaseAnswer(label, ph.queues, n, ph.acked / phase_s, np.sort(lat)))
        start += phase_ns + 5_000_000
    meta = _meta(run_id, "queues", "ASYNC_FLUSH", {"rate": rate, "queue_counts": [p.queues for p in phases]},
                 t0, int(start), None, {"phases": rows})
    _write_run(out_dir, run_id, meta, ops, None, check_json(sum(p.acked for p in phases) + warmup_sends))
    return run_id, answers


# ---- disk-fill cycles ------------------------------------------------------------------------------------

FILL_INTERVAL_NS: Final = 1_000_000_000
REFUSALS_FROM_NS: Final = 600_000_000  # refusals start 0.6 s into the fill interval


@dataclass(frozen=True)
class FillSpec:
    used_ratio: float
    acked_inside: int  # acknowledged (and delivered) before the broker noticed
    refused: int
    pull_problem: str | None = None
    resume_ns: int | None = 900_000_000  # first ack this long after the space is freed; None: never


def write_disk_fill_run(out_dir: Path, index: int, cycles: list[FillSpec], *, lost: int = 0,
                        with_chaos_json: bool = True, flush_mode: str = "ASYNC_FLUSH") -> str:
    """Cycles 3 s apart: fill at T, ``acked_inside`` acks then ``refused`` refusals, space freed at T + 1 s, the
    next ack ``resume_ns`` later. 20 acknowledged sends before the first fill belong to no cycle."""
    run_id = run_id_for("chaos-disk.fill-async-default", index)
    t0 = T0_NS + index * RUN_SPACING_NS
    ops: dict[str, list[Any]] = {"op": [], "key": [], "start_ns": [], "end_ns": [], "outcome": [], "code": []}

    def op(kind: str, key: str, start: int, end: int, outcome: str, code: int) -> None:
        for name, value in zip(ops, (kind, key, start, end, outcome, code), strict=True):
            ops[name].append(value)

    keys = 0
    for i in range(20):
        op("send", f"k{keys:07d}", t0 + i * 1_000_000, t0 + i * 1_000_000 + 500_000, "ok", -1)
        keys += 1
    faults, chaos_cycles = [], []
    for c, spec in enumerate(cycles):
        fill = t0 + 1_000_000_000 + c * 3_000_000_000
        free = fill + FILL_INTERVAL_NS
        for i in range(spec.acked_inside):
            s = fill + i * 1_000_000
            op("send", f"k{keys:07d}", s, s + 500_000, "ok", -1)
            op("receive", f"k{keys:07d}", s + 600_000, s + 700_000, "ok", -1)
            keys += 1
        for i in range(spec.refused):
            s = fill + REFUSALS_FROM_NS + i * 10_000_000
            op("send", f"k{keys:07d}", s, s + 1_000_000, "fail", CODE_SERVICE_NOT_AVAILABLE)
            keys += 1
        if spec.resume_ns is not None:
            op("send", f"k{keys:07d}", free + spec.resume_ns - 500_000, free + spec.resume_ns, "ok", -1)
            keys += 1
        faults.append({"ts_ns": fill, "kind": "disk_fill", "target": "broker-a",
                       "params": {"cycle": c, "used_ratio": spec.used_ratio, "filler_bytes": 1 << 25}})
        faults.append({"ts_ns": free, "kind": "disk_free", "target": "broker-a",
                       "params": {"cycle": c, "used_ratio": 0.25}})
        extra: dict[str, Any] = {"used_ratio": spec.used_ratio, "pull_problem": spec.pull_problem}
        if spec.refused:
            extra["remark"] = "service not available now. ... the broker's disk is full [CL:  0.93 ...]"
        chaos_cycles.append({"cycle": c, "kind": "disk_fill", "fault_ns": fill, "restored_ns": free,
                             "ok": True, "extra": extra})
    # the ENOSPC phase: a disk_fill with a phase param, which is not a watermark cycle
    last = t0 + 1_000_000_000 + len(cycles) * 3_000_000_000
    faults.append({"ts_ns": last, "kind": "disk_fill", "target": "broker-a",
                   "params": {"phase": "enospc", "used_ratio": 0.82}})
    faults.append({"ts_ns": last + 10**9, "kind": "disk_free", "target": "broker-a", "params": {"phase": "enospc"}})
    acked = sum(1 for o, out in zip(ops["op"], ops["outcome"], strict=True) if o == "send" and out == "ok")
    refused = sum(s.refused for s in cycles)
    meta = _meta(run_id, "chaos-disk.fill-async-default", flush_mode, {"fault": "disk_fill", "flush": flush_mode},
                 t0, last + 2 * 10**9, "default")
    chaos = {"schema_version": 1, "fault": "disk_fill", "cycles": chaos_cycles} if with_chaos_json else None
    _write_run(out_dir, run_id, meta, ops, faults, check_json(acked, refused, lost, lost * 1024), chaos)
    return run_id


# ---- broker groups that lost their master ----------------------------------------------------------------


@dataclass(frozen=True)
class MasterLossSpec:
    """One chaos/replication.py run: ``acked`` sends acknowledged, ``master_only`` of them answered
    FLUSH_SLAVE_TIMEOUT (stored on the master alone), ``lost`` never served by the slave, ``lost_promised`` of
    those answered SEND_OK; kill -9 cycles of the master, then the final master fault with the lag at it."""

    role: str  # the master's brokerRole: SYNC_MASTER or ASYNC_MASTER
    acked: int
    lost: int = 0
    master_only: int = 0
    lost_promised: int = 0
    lag_bytes: int = 40_000
    fault: str = "master_disk_destroyed"
    kill9_cycles: int = 1
    promised_window: int | None = 1000  # SEND_OK answers in the final cycle's window (None: not recorded)


def write_master_loss_run(out_dir: Path, index: int, spec: MasterLossSpec) -> str:
    """meta.json with the master's brokerRole, faults.jsonl with the lag sampled before each master fault, and
    check.json with the checker's counts (the loss report reads nothing else of these runs)."""
    scenario = f"chaos-master.{spec.fault.removeprefix('master_').replace('_', '.')}"
    run_id = run_id_for(scenario, index)
    t0 = T0_NS + index * RUN_SPACING_NS
    faults: list[dict[str, Any]] = []
    for c in range(spec.kill9_cycles):
        at = t0 + (c + 1) * 2_000_000_000
        faults.append({"ts_ns": at, "kind": "kill9", "target": "broker-a", "params": {"lag_bytes": 1024}})
        faults.append({"ts_ns": at + 500_000_000, "kind": "restart", "target": "broker-a", "params": {}})
    end = t0 + (spec.kill9_cycles + 1) * 2_000_000_000
    faults.append({"ts_ns": end, "kind": spec.fault, "target": "broker-a",
                   "params": {"lag_bytes": spec.lag_bytes, "final": True,
                              **({} if spec.promised_window is None
                                 else {"promised_in_window": spec.promised_window})}})
    meta = _meta(run_id, scenario, "ASYNC_FLUSH", {"fault": spec.fault, "replication": spec.role}, t0,
                 end + 10**9, "default")
    meta["broker"]["brokerRole"] = spec.role
    check = check_json(spec.acked, lost=spec.lost, lost_bytes=1024 * spec.lost, allow_loss=True)
    check.update(acked_master_only=spec.master_only, lost_promised=spec.lost_promised)
    _write_run(out_dir, run_id, meta, faults=faults, check=check)
    return run_id
