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

The crash with a checkpoint is simulated as a clean shutdown (which flushes everything and writes the
checkpoint) followed by re-creating ``abort``: the state a broker killed right after a checkpoint leaves
behind, and the best case for abnormal recovery. Recovery timings run on a warm page cache (the log was
just written); the resident bytes of the commit-log files are reported next to them.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import resource
import shutil
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from reference_broker.bench.fio import FioParams, run_fio_baselines
from reference_broker.bench.report import host_info
from reference_broker.common.dispatch import DispatchRequest
from reference_broker.common.record import MessageExtBrokerInner
from reference_broker.store.commit_log import MessageExtBatch
from reference_broker.store.config import FlushDiskType, MessageStoreConfig
from reference_broker.store.index_file import index_file_size
from reference_broker.store.message_store import MessageStore, raise_open_files_limit
from reference_broker.store.status import PutMessageResult, PutMessageStatus

Progress = Callable[[str], None]

SCHEMA: Final = "rmq-lab/bench-store/1"
KiB: Final = 1 << 10
MiB: Final = 1 << 20
GiB: Final = 1 << 30
TOPIC: Final = "BenchTopic"
BODY_BYTES: Final = 1024
PRODUCER_QUEUES: Final = 4  # defaultTopicQueueNums: a producer spreads its sends over 4 queues
MANY_QUEUES: Final = 10_000
BUILD_BATCH: Final = 128  # messages per put_messages while building a recovery log
CLEAN_DELAY_S: Final = 10 * 86_400.0  # cleaning must not run during a benchmark
DISPATCH_TIMEOUT_S: Final = 1800.0
FD_MARGIN: Final = 64
DEFAULT_SIZES: Final = (1 * GiB, 4 * GiB)
QUICK_SIZES: Final = (64 * MiB, 128 * MiB)

_OK: Final = PutMessageStatus.PUT_OK
_SIZE_RE: Final = re.compile(r"^(\d+(?:\.\d+)?)([kmgt]?)(?:i?b)?$", re.IGNORECASE)
_UNITS: Final = {"": 1, "k": KiB, "m": MiB, "g": GiB, "t": 1 << 40}


class BenchError(RuntimeError):
    """The benchmark could not produce a trustworthy figure (store refused, wrong recovery, no space)."""


# ---- sizes ---------------------------------------------------------------------------------------

# Bytes written after the last checkpoint before the simulated crash (about half a second of load).
CRASH_TAIL_BYTES: Final = 32 * MiB


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


# ---- messages and stores -------------------------------------------------------------------------

class MessageFactory:
    """Messages as a RocketMQ producer sends them: a 1 KiB body, TAGS and, when keyed, a unique UNIQ_KEY
    (MessageClientIDSetter: 32 hex digits, a 20-digit ip/pid/loader prefix and a 12-digit counter)."""

    def __init__(self, keyed: bool, body_bytes: int = BODY_BYTES) -> None:
        self.keyed = keyed
        self.body = os.urandom(body_bytes)
        self.prefix = f"7F000001{os.getpid() & 0xFFFF:04X}{os.urandom(4).hex().upper()}"

    def make(self, i: int, queue_id: int) -> MessageExtBrokerInner:
        # The properties also in their wire form, as the broker hands a message to the store (it keeps the
        # producer's properties string rather than re-encoding the map).
        if self.keyed:
            uniq = f"{self.prefix}{i:012X}"
            props = {"TAGS": "TagA", "UNIQ_KEY": uniq}
            raw = f"TAGS\x01TagA\x02UNIQ_KEY\x01{uniq}".encode()
        else:
            props = {"TAGS": "TagA"}
            raw = b"TAGS\x01TagA"
        return MessageExtBrokerInner(TOPIC, self.body, queue_id=queue_id, properties=props,
                                     born_timestamp=time.time_ns() // 1_000_000, properties_bytes=raw)


def new_store(root: Path, flush: FlushDiskType = FlushDiskType.ASYNC_FLUSH, **config: Any) -> MessageStore:
    store = MessageStore(MessageStoreConfig(store_path_root_dir=root, flush_disk_type=flush, **config))
    store.clean_initial_delay_s = CLEAN_DELAY_S
    return store


def load_and_start(store: MessageStore) -> None:
    if not store.load():
        raise BenchError(f"store at {store.store_root} failed to load")
    store.start()


@contextlib.contextmanager
def running_store(root: Path, flush: FlushDiskType = FlushDiskType.ASYNC_FLUSH,
                  **config: Any) -> Iterator[MessageStore]:
    store = new_store(root, flush, **config)
    try:
        load_and_start(store)
        yield store
    finally:
        store.shutdown()


def wait_dispatched(store: MessageStore, timeout_s: float = DISPATCH_TIMEOUT_S) -> bool:
    """Sleep until the reput thread has caught up; False at the timeout."""
    deadline = time.monotonic() + timeout_s
    while store.dispatch_behind_bytes() > 0:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.0005)
    return True


def _must_dispatch(store: MessageStore) -> None:
    if not wait_dispatched(store):
        raise BenchError(f"dispatch still {store.dispatch_behind_bytes()} bytes behind after {DISPATCH_TIMEOUT_S} s")


def _rate(count: int, seconds: float) -> float:
    return round(count / seconds, 1) if seconds > 0 else 0.0


def queued_messages(store: MessageStore, queues: int = PRODUCER_QUEUES) -> int:
    return sum(store.get_max_offset_in_queue(TOPIC, q) for q in range(queues))


def open_fd_count() -> int | None:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return None


def raise_fd_limit() -> int:
    """The soft RLIMIT_NOFILE after raising it to the hard limit (as the store does on load)."""
    return raise_open_files_limit()


# ---- phases --------------------------------------------------------------------------------------

def _warm_up(store: MessageStore) -> None:
    """One message per producer queue, not timed: the commit-log, index and queue files exist before the
    clock starts, as on a broker that has been running (RocketMQ pre-allocates the next commit-log file)."""
    factory = MessageFactory(False)
    for q in range(PRODUCER_QUEUES):
        if store.put_message(factory.make(q, q)).status is not _OK:
            raise BenchError("the store refused a warm-up put")
    _must_dispatch(store)


def bench_append_async(root: Path, messages: int, *, keyed: bool, **config: Any) -> dict[str, Any]:
    """One writer, ASYNC_FLUSH: put rate, and the rate until dispatch has caught up."""
    factory = MessageFactory(keyed)
    make = factory.make
    with running_store(root, **config) as store:
        _warm_up(store)
        start_offset = store.commit_log.get_max_offset()
        ok, put_s, dispatched_s = _timed_puts(store, make, messages, PRODUCER_QUEUES)
        log_bytes = store.commit_log.get_max_offset() - start_offset
    return {"messages": messages, "ok": ok, "failed": messages - ok, "put_s": round(put_s, 4),
            "dispatched_s": round(dispatched_s, 4), "msgs_per_s": _rate(ok, put_s),
            "dispatched_msgs_per_s": _rate(ok, dispatched_s), "record_bytes": log_bytes // max(1, messages)}


def _timed_puts(store: MessageStore, make: Callable[[int, int], MessageExtBrokerInner], messages: int,
                queues: int) -> tuple[int, float, float]:
    """Put ``messages`` round-robin over ``queues``: (accepted, seconds to put, seconds until dispatched)."""
    put = store.put_message
    ok = 0
    t0 = time.perf_counter()
    for i in range(messages):
        if put(make(i, i % queues)).status is _OK:
            ok += 1
    t_put = time.perf_counter()
    _must_dispatch(store)
    return ok, t_put - t0, time.perf_counter() - t0


def bench_append_sync(root: Path, threads: int, duration_s: float) -> dict[str, Any]:
    """SYNC_FLUSH (group commit) with ``threads`` concurrent writers, i.e. puts in flight.

    Writers are modelled as a broker serves them: one thread submits with ``put``
    and keeps ``threads`` puts in flight; the group-commit thread completes them. (Sixty-four OS
    threads each blocking on a put measure Python's thread hand-offs rather than the store.)
    """
    in_flight = threading.Semaphore(threads)
    counts = {"ok": 0, "timeouts": 0, "other": 0}

    def done(result: PutMessageResult) -> None:
        if result.status is _OK:
            counts["ok"] += 1
        elif result.status is PutMessageStatus.FLUSH_DISK_TIMEOUT:
            counts["timeouts"] += 1
        else:
            counts["other"] += 1
        in_flight.release()

    factory = MessageFactory(True)
    make = factory.make
    with running_store(root, FlushDiskType.SYNC_FLUSH) as store:
        _warm_up(store)
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
            "failed": counts["other"], "msgs_per_s": _rate(total, elapsed)}


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
        _must_dispatch(store)
        fd0 = open_fd_count()
        for i in range(1, probe):
            put(make(i, i))
        _must_dispatch(store)
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
            ok, put_s, dispatched_s = _timed_puts(store, make, messages, queues)
            samples.append({"ok": ok, "failed": messages - ok, "put_msgs_per_s": _rate(ok, put_s),
                            "msgs_per_s": _rate(ok, dispatched_s)})
    out.update(median_of(samples, "msgs_per_s"), rounds=samples)
    out["put_msgs_per_s"] = statistics.median(x["put_msgs_per_s"] for x in samples)
    return out


class DispatchCounter:
    """A dispatch listener counting records dispatched (recovery re-dispatch included)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, req: DispatchRequest) -> None:
        self.count += 1


def create_abort_file(root: Path) -> None:
    fd = os.open(root / "abort", os.O_WRONLY | os.O_CREAT, 0o644)
    os.close(fd)


def resident_bytes(directory: Path) -> int | None:
    """Page-cache resident bytes of the files in ``directory`` (fincore), or None without fincore."""
    files = sorted(str(p) for p in directory.iterdir() if p.is_file()) if directory.is_dir() else []
    fincore = shutil.which("fincore")
    if not files or fincore is None:
        return None
    try:
        out = subprocess.run([fincore, "--bytes", "--noheadings", "--output", "RES", *files], capture_output=True,
                             text=True, timeout=60, check=True).stdout
        return sum(int(x) for x in out.split())
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def _timed_recovery(root: Path, expect_normal: bool, messages: int, **config: Any) -> dict[str, Any]:
    """Time load()+start() of the store at ``root`` and check it recovered every message."""
    cached = resident_bytes(root / "commitlog")
    counter = DispatchCounter()
    store = new_store(root, **config)
    store.add_dispatch_hook(counter, during_recovery=True)
    try:
        t0 = time.perf_counter()
        load_and_start(store)
        seconds = time.perf_counter() - t0
        if store.last_exit_ok != expect_normal:
            raise BenchError(f"expected a {'normal' if expect_normal else 'abnormal'} recovery, store saw "
                             f"last_exit_ok={store.last_exit_ok}")
        found = queued_messages(store)
        if found != messages:
            raise BenchError(f"recovery rebuilt {found} of {messages} consume-queue entries")
        store.flush_cq_service.do_flush(0)  # consume queues and checkpoint on disk before the next step
    finally:
        store.shutdown()
    if not store.shutdown_normally:
        raise BenchError("recovered store did not shut down cleanly")
    return {"s": round(seconds, 4), "redispatched_msgs": counter.count, "commitlog_resident_bytes": cached}


def bench_recovery(root: Path, target_bytes: int, progress: Progress | None = None) -> dict[str, Any]:
    """Build a log of ``target_bytes``, then time normal, abnormal-with-checkpoint and full-scan recovery."""
    say = progress or (lambda _m: None)
    factory = MessageFactory(True)
    make = factory.make
    i = batch_no = 0
    with running_store(root) as store:
        cl = store.commit_log
        t0 = time.perf_counter()
        next_note = 256 * MiB
        while cl.get_max_offset() < target_bytes:
            q = batch_no % PRODUCER_QUEUES
            r = store.put_messages(MessageExtBatch(TOPIC, q, [make(i + k, q) for k in range(BUILD_BATCH)]))
            if r.status is not _OK:
                raise BenchError(f"building the recovery log: put_messages returned {r.status.name}")
            i += BUILD_BATCH
            batch_no += 1
            if cl.get_max_offset() >= next_note:
                say(f"  built {size_label(next_note)} of {size_label(target_bytes)}")
                next_note += 256 * MiB
        _must_dispatch(store)
        # The checkpoint as the periodic thorough flush writes it, then a tail written after it: a
        # crash now leaves exactly these files with this checkpoint (the page cache keeps the tail).
        store.flush_cq_service.do_flush(0)
        crash_checkpoint = (root / "checkpoint").read_bytes()
        tail_start = cl.get_max_offset()
        while cl.get_max_offset() < tail_start + CRASH_TAIL_BYTES:
            q = batch_no % PRODUCER_QUEUES
            r = store.put_messages(MessageExtBatch(TOPIC, q, [make(i + k, q) for k in range(BUILD_BATCH)]))
            if r.status is not _OK:
                raise BenchError(f"building the recovery log: put_messages returned {r.status.name}")
            i += BUILD_BATCH
            batch_no += 1
        _must_dispatch(store)
        build_s = time.perf_counter() - t0
        log_bytes = cl.get_max_offset() - max(0, cl.get_min_offset())
        files = len(list(cl.mapped_file_queue.iter_files()))
    if not store.shutdown_normally:
        raise BenchError("the store that built the recovery log did not shut down cleanly")
    out: dict[str, Any] = {"log_bytes": log_bytes, "messages": i, "commitlog_files": files,
                           "build_s": round(build_s, 3)}
    say("  recovery after a clean shutdown")
    normal = _timed_recovery(root, True, i)
    say(f"  recovery after a crash {size_label(CRASH_TAIL_BYTES)} past the checkpoint")
    (root / "checkpoint").write_bytes(crash_checkpoint)
    create_abort_file(root)
    ckpt = _timed_recovery(root, False, i)
    say("  the same crash, RocketMQ 4.9.8's rule (file older than the checkpoint time)")
    (root / "checkpoint").write_bytes(crash_checkpoint)
    create_abort_file(root)
    ckpt_rmq = _timed_recovery(root, False, i, recover_from_checkpoint_offset=False)
    say("  recovery without checkpoint and consume queues (full scan)")
    (root / "checkpoint").unlink()
    shutil.rmtree(root / "consumequeue")
    create_abort_file(root)
    full = _timed_recovery(root, False, i)
    out.update(
        normal_s=normal["s"], abnormal_checkpoint_s=ckpt["s"], full_scan_s=full["s"],
        full_scan_bytes_per_s=_rate(log_bytes, full["s"]),
        abnormal_checkpoint_redispatched_msgs=ckpt["redispatched_msgs"],
        abnormal_checkpoint_rocketmq_rule_s=ckpt_rmq["s"],
        abnormal_checkpoint_rocketmq_rule_redispatched_msgs=ckpt_rmq["redispatched_msgs"],
        crash_tail_bytes=CRASH_TAIL_BYTES,
        full_scan_redispatched_msgs=full["redispatched_msgs"],
        commitlog_resident_bytes=normal["commitlog_resident_bytes"],
    )
    return out


# ---- the whole run -------------------------------------------------------------------------------

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


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 4) if a is not None and b else None


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
    r.update(append_async_msgs_per_s=keyed["msgs_per_s"],
             append_async_dispatched_msgs_per_s=keyed["dispatched_msgs_per_s"],
             append_async_nokey_msgs_per_s=nokey["msgs_per_s"],
             append_async_nokey_dispatched_msgs_per_s=nokey["dispatched_msgs_per_s"],
             append_async_no_prop_crc_msgs_per_s=no_crc["msgs_per_s"],
             prop_crc_vs_none_ratio=_ratio(keyed["msgs_per_s"], no_crc["msgs_per_s"]),
             append_async={"keyed": keyed, "nokey": nokey, "no_prop_crc": no_crc})

    sync: dict[str, Any] = {}
    for threads in plan.sync_threads:
        say(f"append, SYNC_FLUSH, {threads} writer thread(s) for {plan.sync_duration_s:g} s")
        with _phase_dir(base, f"append-sync-{threads}") as root:
            s = bench_append_sync(root, threads, plan.sync_duration_s)
        say(f"  {s['msgs_per_s']:,.0f} msg/s")
        sync[str(threads)] = s
        r[f"append_sync_{threads}_msgs_per_s"] = s["msgs_per_s"]
    r["sync64_vs_async_ratio"] = _ratio(r.get("append_sync_64_msgs_per_s"), r["append_async_msgs_per_s"])
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
    r[f"queues_{many}_vs_1_ratio"] = _ratio(r[f"queues_{many}_msgs_per_s"], r["queues_1_msgs_per_s"])
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
