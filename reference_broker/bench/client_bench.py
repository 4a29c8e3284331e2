"""This module owns ``bench producer`` and ``bench consumer``, modelled on RocketMQ's benchmark tools
(example/.../benchmark/Producer.java and Consumer.java, 4.9.8): the same options and the same
periodic line, plus the percentiles RocketMQ's tools do not print, the client's CPU per message, and a JSON
summary. ``--processes`` runs several producer processes and merges their samples (exact percentiles), so
the load generator is not what limits the figure.

Latency samples are kept as microseconds in ``array('I')`` (4 bytes each); percentiles are exact (sorted).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import sys
import threading
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from reference_broker.bench.producer_stats import (
    PERCENTILES,
    SEND_NS_PROPERTY,
    ProducerOptions,
    Window,
    percentile,
    producer_line,
)
from reference_broker.client import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    MQBrokerError,
    MQClientError,
    Producer,
    PushConsumer,
    SendResult,
)


def run_producer(opts: ProducerOptions, out: Callable[[str], None] = print) -> dict[str, Any]:
    """One producer process; returns its summary (with the raw samples under ``samples_us``)."""
    if opts.lean:
        from reference_broker.bench.lean_producer import run_lean_producer

        return run_lean_producer(opts, out)
    producer = Producer(opts.group, opts.namesrv, instance_name=f"bench-{os.getpid()}")
    producer.start()
    body = bytes(random.getrandbits(8) for _ in range(min(opts.size, 64))) * (opts.size // 64 + 1)
    body = body[:opts.size]
    lock = threading.Lock()
    total = Window()
    window = Window()
    stop = threading.Event()
    seq = [0]

    def next_message() -> Message:
        with lock:
            seq[0] += 1
            n = seq[0]
        tags = f"tag{n % opts.tag_count}" if opts.tag_count else None
        keys = f"{os.getpid()}-{n}" if opts.key_enable else None
        # Wall-clock ns at creation, so a consumer on this machine can time send-to-consume finer than the
        # born timestamp's milliseconds.
        return Message(opts.topic, body, tags=tags, keys=keys, properties={SEND_NS_PROPERTY: str(time.time_ns())})

    def record(rt_us: int, ok: bool, send_failed: bool) -> None:
        with lock:
            for w in (total, window):
                if ok:
                    w.add(rt_us)
                elif send_failed:
                    w.send_failed += 1
                else:
                    w.response_failed += 1

    def limit_reached() -> bool:
        return bool(opts.quantity) and seq[0] >= opts.quantity

    def sync_worker() -> None:
        while not stop.is_set() and not limit_reached():
            msgs = [next_message() for _ in range(opts.batch_size)]
            t0 = time.perf_counter_ns()
            try:
                if opts.batch_size > 1:
                    producer.send_batch(msgs)
                else:
                    producer.send(msgs[0])
            except MQClientError as exc:  # the tools: a broker's answer → Response Failed, else Send Failed
                record(0, False, not isinstance(exc, MQBrokerError))
                continue
            record((time.perf_counter_ns() - t0) // 1000, True, False)

    def async_worker() -> None:
        sem = threading.Semaphore(opts.in_flight)
        start_ns = time.perf_counter_ns()
        sent = 0
        while not stop.is_set() and not limit_reached():
            if opts.rate > 0:
                # Open loop: each send has an intended time; its latency counts from then, so a slow
                # broker cannot hide behind a client that waited (coordinated omission).
                intended = start_ns + int(sent * 1e9 / opts.rate)
                delay = intended - time.perf_counter_ns()
                if delay > 0:
                    time.sleep(delay / 1e9)
                sent += 1
            sem.acquire()
            msg = next_message()
            t0 = intended if opts.rate > 0 else time.perf_counter_ns()

            def done(result: SendResult | None, error: MQClientError | None, t0: int = t0) -> None:
                record((time.perf_counter_ns() - t0) // 1000, error is None,
                       error is not None and not isinstance(error, MQBrokerError))
                sem.release()

            try:
                producer.send_async(msg, done)
            except MQClientError:
                record(0, False, True)
                sem.release()
        for _ in range(opts.in_flight):  # wait for the last answers
            sem.acquire(timeout=producer.send_msg_timeout_s + 1)

    workers = [threading.Thread(target=async_worker if opts.async_send else sync_worker, daemon=True)
               for _ in range(1 if opts.async_send else opts.threads)]
    cpu0 = time.process_time()
    t_start = time.monotonic()
    for t in workers:
        t.start()
    last = t_start
    deadline = t_start + opts.duration_s if opts.duration_s > 0 else float("inf")
    try:
        while any(t.is_alive() for t in workers):
            now = time.monotonic()
            if now >= deadline:
                stop.set()
            wake = min(last + opts.report_interval_s, deadline if not stop.is_set() else now + 0.1)
            time.sleep(max(0.0, min(0.1, wake - now)))
            now = time.monotonic()
            if now - last >= opts.report_interval_s:
                with lock:
                    w, window = window, Window()
                out(producer_line(time.time(), w, now - last, opts.batch_size))
                last = now
    except KeyboardInterrupt:
        stop.set()
    for t in workers:
        t.join(producer.send_msg_timeout_s + 2)
    if window.ok or window.send_failed or window.response_failed:  # the last, partial period
        out(producer_line(time.time(), window, time.monotonic() - last, opts.batch_size))
    elapsed = time.monotonic() - t_start
    cpu = time.process_time() - cpu0
    producer.shutdown()
    msgs = total.ok * opts.batch_size
    return {"sent_ok_requests": total.ok, "messages": msgs, "send_failed": total.send_failed,
            "response_failed": total.response_failed, "elapsed_s": elapsed, "rt_total_us": total.rt_total_us,
            "rt_max_us": total.rt_max_us, "client_cpu_s": cpu, "samples_us": total.samples}


def _child(opts: ProducerOptions, conn: Any) -> None:
    summary = run_producer(opts, out=lambda line: print(f"[{os.getpid()}] {line}", file=sys.stderr, flush=True))
    summary["samples_us"] = summary["samples_us"].tobytes()
    if "pace_lag_us" in summary:
        summary["pace_lag_us"] = summary["pace_lag_us"].tobytes()
    conn.send(summary)
    conn.close()


def _merged(parts: list[dict[str, Any]], key: str) -> list[int]:
    """The parts' microsecond samples under ``key`` (arrays, or bytes from a child process), sorted."""
    samples: array[int] = array("I")
    for p in parts:
        s = p.get(key)
        if s is None:
            continue
        if isinstance(s, bytes):
            arr: array[int] = array("I")
            arr.frombytes(s)
            s = arr
        samples.extend(s)
    return sorted(samples)


def merge_producer_summaries(parts: list[dict[str, Any]], batch_size: int) -> dict[str, Any]:
    ordered = _merged(parts, "samples_us")
    lags = _merged(parts, "pace_lag_us")
    ok = sum(p["sent_ok_requests"] for p in parts)
    msgs = sum(p["messages"] for p in parts)
    elapsed = max(p["elapsed_s"] for p in parts) if parts else 0.0
    cpu = sum(p["client_cpu_s"] for p in parts)
    return {
        "send_tps": msgs / elapsed if elapsed else 0.0,
        "messages": msgs,
        "requests": ok,
        "batch_size": batch_size,
        "send_failed": sum(p["send_failed"] for p in parts),
        "response_failed": sum(p["response_failed"] for p in parts),
        "avg_rt_ms": sum(p["rt_total_us"] for p in parts) / ok / 1000 if ok else 0.0,
        "max_rt_ms": max((p["rt_max_us"] for p in parts), default=0) / 1000,
        **{f"p{str(q).replace('.0', '').replace('.', '')}_ms": percentile(ordered, q) for q in PERCENTILES},
        "elapsed_s": elapsed,
        "processes": len(parts),
        "client_cpu_us_per_msg": cpu / msgs * 1e6 if msgs else None,
        # Paced lean sends: how late the client wrote its frames (the latencies count from the write).
        **({"pace_lag_p99_ms": percentile(lags, 99), "pace_lag_max_ms": lags[-1] / 1000} if lags else {}),
    }


def run_producers(opts: ProducerOptions, processes: int, out: Callable[[str], None] = print) -> dict[str, Any]:
    if processes <= 1:
        return merge_producer_summaries([run_producer(opts, out)], opts.batch_size)
    return merge_producer_summaries(_in_processes(_child, opts, processes, "producer", out), opts.batch_size)


def _in_processes(child: Callable[[Any, Any], None], opts: Any, processes: int, what: str,
                  out: Callable[[str], None]) -> list[dict[str, Any]]:
    """Run ``child(opts, pipe)`` in ``processes`` spawned processes at once; the parts they sent back."""
    ctx = mp.get_context("spawn")
    pipes, procs = [], []
    for _ in range(processes):
        parent, end = ctx.Pipe(duplex=False)
        p = ctx.Process(target=child, args=(opts, end), daemon=True)
        p.start()
        end.close()
        pipes.append(parent)
        procs.append(p)
    parts = []
    for parent, p in zip(pipes, procs, strict=True):
        try:
            parts.append(parent.recv())
        except EOFError:
            out(f"{what} process {p.pid} ended without a summary (exit code {p.exitcode})")
        p.join(10)
    return parts


def complete_line(s: dict[str, Any]) -> str:
    return (f"[Complete] Send Total: {s['messages']} Send TPS: {int(s['send_tps'])} Max RT(ms): "
            f"{int(s['max_rt_ms'])} Average RT(ms): {s['avg_rt_ms']:7.3f} Send Failed: {s['send_failed']} "
            f"Response Failed: {s['response_failed']} p50(ms): {s['p50_ms']:.3f} p99(ms): {s['p99_ms']:.3f} "
            f"p999(ms): {s['p999_ms']:.3f} client CPU/msg(us): {_fmt(s['client_cpu_us_per_msg'])}")


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


# ---- consumer -------------------------------------------------------------------------------------------
@dataclass
class ConsumerOptions:
    namesrv: str
    topic: str = "BenchmarkTest"
    group: str = "benchmark_consumer"
    threads: int = 20
    expression: str = "*"
    from_first: bool = False
    duration_s: float = 30.0
    report_interval_s: float = 10.0
    commit: bool = True


def run_consumer(opts: ConsumerOptions, out: Callable[[str], None] = print) -> dict[str, Any]:
    """A push consumer printing the Consumer tool's line (B2C = born to consume, S2C = store to consume)."""
    return merge_consumer_summaries([_consume(opts, out)])


def run_consumers(opts: ConsumerOptions, processes: int, out: Callable[[str], None] = print) -> dict[str, Any]:
    """``processes`` push consumers of one group (clustering: they share the queues), each in its own process, so
    one interpreter's consume CPU does not bound the figure; their counts and samples merged."""
    if processes <= 1:
        return run_consumer(opts, out)
    return merge_consumer_summaries(_in_processes(_consumer_child, opts, processes, "consumer", out))


def _consumer_child(opts: ConsumerOptions, conn: Any) -> None:
    part = _consume(opts, out=lambda line: print(f"[{os.getpid()}] {line}", file=sys.stderr, flush=True))
    part["e2e_samples_us"] = part["e2e_samples_us"].tobytes()
    conn.send(part)
    conn.close()


def merge_consumer_summaries(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One summary for consumers that ran side by side: counts summed over the longest run, samples merged."""
    ordered = _merged(parts, "e2e_samples_us")
    n = sum(p["n"] for p in parts)
    elapsed = max((p["elapsed_s"] for p in parts), default=0.0)
    active = max((p.get("active_s", 0.0) for p in parts), default=0.0)
    cpu = sum(p["cpu_s"] for p in parts)
    # active_tps: over the time to the last delivery (start-up and rebalance included), the rate of a consumer
    # that drained what there was before its time was up.
    return {"consumed": n, "tps": n / elapsed if elapsed else 0.0, "elapsed_s": elapsed,
            "active_s": active, "active_tps": n / active if active else 0.0, "processes": len(parts),
            "avg_b2c_ms": sum(p["b2c_total"] for p in parts) / n if n else 0.0,
            "avg_s2c_ms": sum(p["s2c_total"] for p in parts) / n if n else 0.0,
            "max_b2c_ms": max((p["b2c_max"] for p in parts), default=0),
            "max_s2c_ms": max((p["s2c_max"] for p in parts), default=0),
            **{f"e2e_p{str(q).replace('.0', '').replace('.', '')}_ms": percentile(ordered, q) for q in PERCENTILES},
            "client_cpu_us_per_msg": cpu / n * 1e6 if n else None}


def _consume(opts: ConsumerOptions, out: Callable[[str], None]) -> dict[str, Any]:
    """One consumer's run: its raw counts, CPU seconds and send-to-consume samples."""
    lock = threading.Lock()
    stats = {"n": 0, "b2c_total": 0, "s2c_total": 0, "b2c_max": 0, "s2c_max": 0}
    window = dict(stats)
    e2e_samples: array[int] = array("I")
    last_at = [0.0]  # monotonic time of the last delivery: a drained backlog's rate is n / (last - start)

    def listener(msgs: list[Any], _ctx: Any) -> ConsumeConcurrentlyStatus:
        now_ns = time.time_ns()
        now = now_ns // 1_000_000
        with lock:
            last_at[0] = time.monotonic()
            for m in msgs:
                b2c = max(0, now - m.born_timestamp)
                s2c = max(0, now - m.store_timestamp)
                stamp = m.properties.get(SEND_NS_PROPERTY)
                e2e_us = (now_ns - int(stamp)) // 1000 if stamp and stamp.isdigit() else b2c * 1000
                for d in (stats, window):
                    d["n"] += 1
                    d["b2c_total"] += b2c
                    d["s2c_total"] += s2c
                    d["b2c_max"] = max(d["b2c_max"], b2c)
                    d["s2c_max"] = max(d["s2c_max"], s2c)
                e2e_samples.append(max(0, min(e2e_us, 0xFFFFFFFF)))
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(opts.group, opts.namesrv, consume_thread_min=opts.threads,
                            consume_thread_max=opts.threads,
                            consume_from_where=(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET if opts.from_first
                                                else ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET))
    consumer.subscribe(opts.topic, opts.expression)
    consumer.register_message_listener(listener)
    cpu0 = time.process_time()
    consumer.start()
    t0 = last = time.monotonic()
    try:
        while time.monotonic() - t0 < opts.duration_s:
            time.sleep(min(0.2, opts.report_interval_s))
            now = time.monotonic()
            if now - last >= opts.report_interval_s:
                with lock:
                    w = dict(window)
                    window.update({k: 0 for k in window})
                n = w["n"]
                ts = datetime.now().strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
                out(f"Current Time: {ts} TPS: {int(n / (now - last))} FAIL: 0 AVG(B2C) RT(ms): "
                    f"{(w['b2c_total'] / n if n else 0):7.3f} AVG(S2C) RT(ms): {(w['s2c_total'] / n if n else 0):7.3f} "
                    f"MAX(B2C) RT(ms): {w['b2c_max']} MAX(S2C) RT(ms): {w['s2c_max']}")
                last = now
    except KeyboardInterrupt:
        pass
    elapsed = time.monotonic() - t0
    consumer.shutdown()
    return {**stats, "elapsed_s": elapsed, "active_s": max(0.0, last_at[0] - t0) if stats["n"] else 0.0,
            "cpu_s": time.process_time() - cpu0, "e2e_samples_us": e2e_samples}

