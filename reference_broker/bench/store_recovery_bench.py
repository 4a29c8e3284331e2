"""The store benchmark's recovery phase: build a log of a given size, then time load()+start() after a clean
exit, after a crash with a checkpoint (this lab's rule and RocketMQ 4.9.8's), and with neither checkpoint
nor consume queues (a full scan and re-dispatch).

The crash with a checkpoint is simulated as a clean shutdown (which flushes everything and writes the
checkpoint) followed by re-creating ``abort``: the state a broker killed right after a checkpoint leaves
behind, and the best case for abnormal recovery. Recovery timings run on a warm page cache (the log was
just written); the resident bytes of the commit-log files are reported next to them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from reference_broker.bench.store_plan import MiB, size_label
from reference_broker.bench.store_workload import (
    OK,
    PRODUCER_QUEUES,
    TOPIC,
    BenchError,
    MessageFactory,
    Progress,
    load_and_start,
    must_dispatch,
    new_store,
    queued_messages,
    rate,
    running_store,
)
from reference_broker.common.dispatch import DispatchRequest
from reference_broker.store.commit_log import MessageExtBatch

BUILD_BATCH: Final = 128  # messages per put_messages while building a recovery log
# Bytes written after the last checkpoint before the simulated crash (about half a second of load).
CRASH_TAIL_BYTES: Final = 32 * MiB


class DispatchCounter:
    """A dispatch hook counting records dispatched (recovery re-dispatch included)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, reqs: Sequence[DispatchRequest]) -> None:
        self.count += len(reqs)


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
            if r.status is not OK:
                raise BenchError(f"building the recovery log: put_messages returned {r.status.name}")
            i += BUILD_BATCH
            batch_no += 1
            if cl.get_max_offset() >= next_note:
                say(f"  built {size_label(next_note)} of {size_label(target_bytes)}")
                next_note += 256 * MiB
        must_dispatch(store)
        # The checkpoint as the periodic thorough flush writes it, then a tail written after it: a
        # crash now leaves exactly these files with this checkpoint (the page cache keeps the tail).
        store.flush_cq_service.do_flush(0)
        crash_checkpoint = (root / "checkpoint").read_bytes()
        tail_start = cl.get_max_offset()
        while cl.get_max_offset() < tail_start + CRASH_TAIL_BYTES:
            q = batch_no % PRODUCER_QUEUES
            r = store.put_messages(MessageExtBatch(TOPIC, q, [make(i + k, q) for k in range(BUILD_BATCH)]))
            if r.status is not OK:
                raise BenchError(f"building the recovery log: put_messages returned {r.status.name}")
            i += BUILD_BATCH
            batch_no += 1
        must_dispatch(store)
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
        full_scan_bytes_per_s=rate(log_bytes, full["s"]),
        abnormal_checkpoint_redispatched_msgs=ckpt["redispatched_msgs"],
        abnormal_checkpoint_rocketmq_rule_s=ckpt_rmq["s"],
        abnormal_checkpoint_rocketmq_rule_redispatched_msgs=ckpt_rmq["redispatched_msgs"],
        crash_tail_bytes=CRASH_TAIL_BYTES,
        full_scan_redispatched_msgs=full["redispatched_msgs"],
        commitlog_resident_bytes=normal["commitlog_resident_bytes"],
    )
    return out
