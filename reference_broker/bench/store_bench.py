"""The store benchmark behind ``rmq-lab bench store``: append, group commit, queue fan-out and recovery.

This module owns the workloads and the figures they produce. Every phase runs in this process, on a
fresh store in its own directory under one base directory, through the MessageStore facade only, and
returns a plain dict; ``run_store_bench`` puts them side by side with the fio baselines and the targets.

| phase          | store                   | workload                                                   |
|----------------|-------------------------|------------------------------------------------------------|
| append async   | ASYNC_FLUSH             | one writer, N puts of a 1 KiB body over 4 queues, with     |
|                |                         | TAGS + UNIQ_KEY (as a producer sends) and with TAGS only    |
| append sync    | SYNC_FLUSH              | 1, 16, 64 writer threads putting for a fixed time          |
| queues         | ASYNC_FLUSH             | N puts round-robin over 1 vs 10,000 queues of one topic,   |
|                |                         | after a warm-up round that creates every queue             |
| recovery       | ASYNC_FLUSH, 1 GiB files| a log of each size, then load()+start() after a clean exit, |
|                |                         | after a "crash" with a checkpoint, and with no checkpoint  |
|                |                         | and no consume queues (full scan and re-dispatch)          |

Rates count puts that returned PUT_OK per second of wall time from the first put; "dispatched" rates
stop the clock when ``dispatch_behind_bytes()`` reaches 0, i.e. when the reput thread has built the
consume queues and index for everything put. Writer and reput thread share the GIL, so rates vary by
±10-20 % from run to run: the count-based phases report the median of ``Plan.rounds`` rounds, and
keep every round.

The plan, sizes and targets are in store_plan.py; messages and stores in store_workload.py; the recovery
phase in store_recovery_bench.py.
"""

from __future__ import annotations

import contextlib
import math
import resource
import shutil
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from reference_broker.bench.fio import FioParams, run_fio_baselines
from reference_broker.bench.report import host_info
from reference_broker.bench.store_plan import Plan, evaluate_targets, median_of, ratio, size_label
from reference_broker.bench.store_recovery_bench import bench_recovery
from reference_broker.bench.store_workload import (
    BODY_BYTES,
    OK,
    PRODUCER_QUEUES,
    TOPIC,
    BenchError,
    MessageFactory,
    Progress,
    must_dispatch,
    open_fd_count,
    rate,
    running_store,
    timed_puts,
    wait_dispatched,
    warm_up,
)
from reference_broker.store.config import FlushDiskType
from reference_broker.store.status import PutMessageResult, PutMessageStatus

SCHEMA: Final = "rmq-lab/bench-store/1"
FD_MARGIN: Final = 64


# ---- phases --------------------------------------------------------------------------------------

def bench_append_async(root: Path, messages: int, *, keyed: bool, **config: Any) -> dict[str, Any]:
    """One writer, ASYNC_FLUSH: put rate, and the rate until dispatch has caught up."""
    factory = MessageFactory(keyed)
    make = factory.make
    with running_store(root, **config) as store:
        warm_up(store)
        start_offset = store.commit_log.get_max_offset()
        ok, put_s, dispatched_s = timed_puts(store, make, messages, PRODUCER_QUEUES)
        log_bytes = store.commit_log.get_max_offset() - start_offset
    return {"messages": messages, "ok": ok, "failed": messages - ok, "put_s": round(put_s, 4),
            "dispatched_s": round(dispatched_s, 4), "msgs_per_s": rate(ok, put_s),
            "dispatched_msgs_per_s": rate(ok, dispatched_s), "record_bytes": log_bytes // max(1, messages)}


def bench_append_sync(root: Path, threads: int, duration_s: float) -> dict[str, Any]:
    """SYNC_FLUSH (group commit) with ``threads`` concurrent writers, i.e. puts in flight.

    Writers are modelled as a broker serves them: one thread submits with ``put``
    and keeps ``threads`` puts in flight; the group-commit thread completes them. (Sixty-four OS
    threads each blocking on a put measure Python's thread hand-offs rather than the store.)
    """
    in_flight = threading.Semaphore(threads)
    counts = {"ok": 0, "timeouts": 0, "other": 0}

    def done(result: PutMessageResult) -> None:
        if result.status is OK:
            counts["ok"] += 1
        elif result.status is PutMessageStatus.FLUSH_DISK_TIMEOUT:
            counts["timeouts"] += 1
        else:
            counts["other"] += 1
        in_flight.release()

    factory = MessageFactory(True)
    make = factory.make
    with running_store(root, FlushDiskType.SYNC_FLUSH) as store:
        warm_up(store)
        put = store.put
        i = 0
        t0 = time.perf_counter()
        deadline = t0 + duration_s
        while time.perf_counter() < deadline:
            in_flight.acquire()
            put(make(i, i % PRODUCER_QUEUES)).add_done_callback(done)
            i += 1
        for _ in range(threads):  # drain what is still in flight
            if not in_flight.acquire(timeout=30):
                raise BenchError("SYNC_FLUSH puts did not complete within 30 s")
        elapsed = time.perf_counter() - t0
    total = counts["ok"]
    return {"threads": threads, "duration_s": round(elapsed, 4), "ok": total, "flush_timeouts": counts["timeouts"],
            "failed": counts["other"], "msgs_per_s": rate(total, elapsed)}


def bench_queues(root: Path, queues: int, messages: int, *, warm_messages: int, create_budget_s: float = 300.0,
                 rounds: int = 1) -> dict[str, Any]:
    """Put + dispatch rate of ``messages`` round-robin over ``queues`` queues (median of ``rounds``), after
    a warm-up round of ``warm_messages`` that creates every queue (timed separately). TAGS only: no index
    keys to dilute the consume-queue work being compared."""
    factory = MessageFactory(False)
    make = factory.make
    out: dict[str, Any] = {"queues": queues, "messages": messages, "skipped_reason": None}
    with running_store(root) as store:
        put = store.put_message
        # The first put opens the commit log and the index file; the next ones each open one more queue,
        # which tells how many descriptors a consume queue holds here.
        probe = min(9, queues)
        t0 = time.perf_counter()
        put(make(0, 0))
        must_dispatch(store)
        fd0 = open_fd_count()
        for i in range(1, probe):
            put(make(i, i))
        must_dispatch(store)
        fd1 = open_fd_count()
        if queues > probe and fd0 is not None and fd1 is not None:
            per_queue = (fd1 - fd0) / (probe - 1)
            out["fds_per_queue"] = per_queue
            need = fd1 + math.ceil(per_queue * (queues - probe)) + FD_MARGIN
            limit, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            if limit != resource.RLIM_INFINITY and need > limit:
                out["skipped_reason"] = (
                    f"{queues} queues need about {need} open files ({per_queue:g} per consume queue here) but "
                    f"RLIMIT_NOFILE is {limit} (hard limit {hard})")
                return out
        for i in range(probe, warm_messages):
            put(make(i, i % queues))
        if not wait_dispatched(store, create_budget_s):
            created = len(store.consume_queue_table.get(TOPIC, {}))
            out["skipped_reason"] = (f"creating {queues} consume queues took longer than {create_budget_s:g} s "
                                     f"({created} created)")
            return out
        out["create_s"] = round(time.perf_counter() - t0, 4)
        samples: list[dict[str, Any]] = []
        for _ in range(rounds):
            ok, put_s, dispatched_s = timed_puts(store, make, messages, queues)
            samples.append({"ok": ok, "failed": messages - ok, "put_msgs_per_s": rate(ok, put_s),
                            "msgs_per_s": rate(ok, dispatched_s)})
    out.update(median_of(samples, "msgs_per_s"), rounds=samples)
    out["put_msgs_per_s"] = statistics.median(x["put_msgs_per_s"] for x in samples)
    return out


# ---- the whole run -------------------------------------------------------------------------------

@contextlib.contextmanager
def _phase_dir(base: Path, name: str) -> Iterator[Path]:
    root = base / name
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_store_bench(plan: Plan, base: Path, progress: Progress | None = None) -> dict[str, Any]:
    """Run every phase under ``base`` (which the caller creates and removes) and return the figures."""
    say = progress or (lambda _m: None)
    started = time.time()
    t_start = time.perf_counter()
    r: dict[str, Any] = {"schema": SCHEMA, "quick": plan.quick, "scale": plan.scale}
    r.update(host_info(base))
    r["message_body_bytes"] = BODY_BYTES

    if plan.fio:
        say("fio baselines on " + str(base))
        fio, reason = run_fio_baselines(base, FioParams.for_mode(plan.quick), progress=say)
    else:
        fio, reason = None, "skipped (--no-fio)"
    r["fio_seq_write_bytes_per_s"] = fio.seq_write_bytes_per_s if fio else None
    r["fio_fdatasync_4k_iops"] = fio.fdatasync_4k_iops if fio else None
    r["fio_randread_4k_iops"] = fio.randread_4k_iops if fio else None
    r["fio_skipped_reason"] = reason
    r["fio"] = fio.as_dict() if fio else None

    n = plan.async_messages
    # The variants take turns round by round, so a drifting machine moves them alike. "no_prop_crc" is
    # the keyed run without the whole-record CRC (4.9.8's records): the CRC's cost, side by side.
    variants: tuple[tuple[str, bool, str, dict[str, Any]], ...] = (
        ("keyed", True, "TAGS + UNIQ_KEY", {}),
        ("nokey", False, "TAGS only", {}),
        ("no_prop_crc", True, "TAGS + UNIQ_KEY, no whole-record CRC", {"enabled_append_prop_crc": False}),
        # dispatchInSeparateProcess: the writer no longer shares the interpreter lock with dispatch
        ("process", True, "TAGS + UNIQ_KEY, dispatch in its own process", {"dispatch_in_separate_process": True}),
    )
    say(f"append, ASYNC_FLUSH, one writer: {n:,} messages, {plan.rounds} rounds of "
        + ", ".join(f"{name} ({what})" for name, _k, what, _c in variants) + " on fresh stores")
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name, *_ in variants}
    for k in range(plan.rounds):
        for name, with_keys, _what, config in variants:
            with _phase_dir(base, f"append-async-{name}-{k}") as root:
                samples[name].append(bench_append_async(root, n, keyed=with_keys, **config))
            say(f"  {name}: {samples[name][-1]['msgs_per_s']:,.0f} msg/s put, "
                f"{samples[name][-1]['dispatched_msgs_per_s']:,.0f} msg/s dispatched")
    appends: dict[str, dict[str, Any]] = {}
    for name, runs in samples.items():
        appends[name] = median_of(runs, "msgs_per_s")
        appends[name]["dispatched_msgs_per_s"] = statistics.median(x["dispatched_msgs_per_s"] for x in runs)
        appends[name]["rounds"] = runs
    keyed, nokey, no_crc = appends["keyed"], appends["nokey"], appends["no_prop_crc"]
    process = appends["process"]
    r.update(append_async_process_msgs_per_s=process["msgs_per_s"],
             append_async_process_dispatched_msgs_per_s=process["dispatched_msgs_per_s"])
    r.update(append_async_msgs_per_s=keyed["msgs_per_s"],
             append_async_dispatched_msgs_per_s=keyed["dispatched_msgs_per_s"],
             append_async_nokey_msgs_per_s=nokey["msgs_per_s"],
             append_async_nokey_dispatched_msgs_per_s=nokey["dispatched_msgs_per_s"],
             append_async_no_prop_crc_msgs_per_s=no_crc["msgs_per_s"],
             prop_crc_vs_none_ratio=ratio(keyed["msgs_per_s"], no_crc["msgs_per_s"]),
             append_async={"keyed": keyed, "nokey": nokey, "no_prop_crc": no_crc, "process": process})

    sync: dict[str, Any] = {}
    for threads in plan.sync_threads:
        say(f"append, SYNC_FLUSH, {threads} writer thread(s) for {plan.sync_duration_s:g} s")
        with _phase_dir(base, f"append-sync-{threads}") as root:
            s = bench_append_sync(root, threads, plan.sync_duration_s)
        say(f"  {s['msgs_per_s']:,.0f} msg/s")
        sync[str(threads)] = s
        r[f"append_sync_{threads}_msgs_per_s"] = s["msgs_per_s"]
    r["sync64_vs_async_ratio"] = ratio(r.get("append_sync_64_msgs_per_s"), r["append_async_msgs_per_s"])
    r["append_sync"] = sync

    many = plan.many_queues
    qn = plan.queue_messages
    queues: dict[str, Any] = {}
    for count in (1, many):
        say(f"dispatch to {count:,} queue(s): {qn:,} messages x {plan.rounds} rounds after a warm-up of {many:,}")
        with _phase_dir(base, f"queues-{count}") as root:
            q = bench_queues(root, count, qn, warm_messages=many, create_budget_s=plan.queue_create_budget_s,
                             rounds=plan.rounds)
        say(f"  skipped: {q['skipped_reason']}" if q["skipped_reason"] else f"  {q['msgs_per_s']:,.0f} msg/s")
        queues[str(count)] = q
        r[f"queues_{count}_msgs_per_s"] = q.get("msgs_per_s")
        r[f"queues_{count}_skipped_reason"] = q["skipped_reason"]
    r[f"queues_{many}_vs_1_ratio"] = ratio(r[f"queues_{many}_msgs_per_s"], r["queues_1_msgs_per_s"])
    r["queues_many"] = many
    r["queues"] = queues

    recovery: dict[str, Any] = {}
    for size in plan.sizes:
        say(f"recovery, {size_label(size)} commit log")
        with _phase_dir(base, f"recovery-{size_label(size)}") as root:
            rec = bench_recovery(root, size, say)
        say(f"  normal {rec['normal_s']:.3f} s, with checkpoint {rec['abnormal_checkpoint_s']:.3f} s, "
            f"full scan {rec['full_scan_s']:.3f} s ({rec['full_scan_bytes_per_s'] / 1e6:,.1f} MB/s)")
        recovery[size_label(size)] = rec
    largest = recovery[size_label(max(plan.sizes))]
    r.update(recovery_size=size_label(max(plan.sizes)), recovery_log_bytes=largest["log_bytes"],
             recovery_normal_s=largest["normal_s"], recovery_abnormal_checkpoint_s=largest["abnormal_checkpoint_s"],
             recovery_abnormal_checkpoint_rocketmq_rule_s=largest["abnormal_checkpoint_rocketmq_rule_s"],
             recovery_full_scan_s=largest["full_scan_s"],
             recovery_full_scan_bytes_per_s=largest["full_scan_bytes_per_s"], recovery=recovery)

    r["targets"] = evaluate_targets(r, many)
    r["started_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started))
    r["wall_s"] = round(time.perf_counter() - t_start, 2)
    return r
