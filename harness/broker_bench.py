"""This module owns the broker benchmark (``python -m harness broker-bench``): the figures the broker issue names,
each measured by ``python -m reference_broker bench producer|consumer`` against a fresh embedded topology
(real name server and broker processes), side by side with its baseline (SYNC_FLUSH next to ASYNC_FLUSH, half
rate next to maximum rate) and printed next to its target.

The load generator runs in ``--processes`` separate processes and reports its own CPU per message, so a
figure bounded by the client says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import load_cost, thread_cpu
from harness.launcher import Process, Topology
from harness.ports import free_port
from harness.rocketmq import BrokerImpl

BARE_TOPIC = "BareBenchmark"

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Plan:
    duration_s: float = 10.0
    size: int = 1024
    processes: int = 2
    in_flight: int = 32  # per process: 2 × 32 = 64 in flight

    @classmethod
    def quick(cls) -> Plan:
        return cls(duration_s=3.0)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (harness.load_cost.cpu_seconds); ProcessLookupError once gone."""
    value = load_cost.cpu_seconds(pid)
    if value is None:
        raise ProcessLookupError(pid)
    return value


def _set_affinity(pid: int, cpus: set[int]) -> None:
    """Every thread of a process onto ``cpus`` (``taskset -a``); threads it starts later inherit it."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cpus)
        except (ProcessLookupError, FileNotFoundError):  # a thread that just ended
            pass


def separate_cores() -> tuple[set[int], set[int]] | None:
    """(broker's cores, load generator's cores) for a pinned run: the broker alone on the last usable core,
    as a broker on its own machine would be; None with fewer than two usable cores."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    return {cpus[-1]}, set(cpus[:-1])


def _run_tool(tool: str, count_key: str, topo: Topology, args: list[str], progress: Progress,
              cores: tuple[set[int], set[int]] | None = None, broker_pid: int | None = None) -> dict[str, Any]:
    """One ``bench producer|consumer`` run, with the serving broker's CPU per message (``count_key``) over it: with
    the client's, what bounds a 2-core machine. With ``cores`` the broker and the client run on separate cores
    (the broker's affinity is restored afterwards). ``broker_pid``: the process serving the topic, when it is not
    the topology's broker (the bare baseline)."""
    cmd = [sys.executable, "-m", "reference_broker", "bench", tool, "-n", topo.namesrv_addr, "--json",
           "-i", "1000", *args]
    progress(f"bench {tool} " + " ".join(args) + (" (broker and generator on separate cores)" if cores else ""))
    if broker_pid is None:
        broker_pid = topo.brokers[0].pid
    cpu0 = cpu_seconds(broker_pid)
    threads0 = thread_cpu.sample(broker_pid)
    if cores is None:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    else:
        everything = os.sched_getaffinity(0)
        broker_cores, client_cores = cores
        _set_affinity(broker_pid, broker_cores)
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                               preexec_fn=lambda: os.sched_setaffinity(0, client_cores))
        finally:
            _set_affinity(broker_pid, everything)
    if p.returncode != 0:
        raise RuntimeError(f"bench {tool} failed ({p.returncode}): {p.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(p.stdout)
    n = result.get(count_key) or 0
    threads = thread_cpu.delta_by_name(threads0, thread_cpu.sample(broker_pid))
    result["broker_cpu_us_per_msg"] = (cpu_seconds(broker_pid) - cpu0) / n * 1e6 if n else None
    # the same split thread by thread (harness/thread_cpu.py): the event loop ("main") against the dispatch
    # thread ("ReputMessageSer") and the rest, what moving dispatch out of the broker could save (docs/dispatch.md)
    result["broker_thread_cpu_us_per_msg"] = {k: v / n * 1e6 for k, v in sorted(threads.items())} if n else None
    return result


def run_producer(topo: Topology, args: list[str], progress: Progress,
              cores: tuple[set[int], set[int]] | None = None, broker_pid: int | None = None) -> dict[str, Any]:
    return _run_tool("producer", "messages", topo, args, progress, cores, broker_pid)


def run_consumer(topo: Topology, args: list[str], progress: Progress) -> dict[str, Any]:
    return _run_tool("consumer", "consumed", topo, args, progress)


def lean_args(plan: Plan, topic: str, *extra: str) -> list[str]:
    """A lean-generator run of ``plan``: ``--in-flight`` per process and the rest in ``extra``."""
    return ["-t", topic, "--lean", "-p", str(plan.processes), "-s", str(plan.size), "-d", str(plan.duration_s),
            *extra]


def run(plan: Plan, progress: Progress = print, root: Path | None = None, impl: BrokerImpl = "reference",
        rocketmq_home: Path | None = None) -> dict[str, Any]:
    """Every figure against ``impl``'s broker (the bare baseline only beside the reference broker: it is that
    broker's floor)."""
    d = str(plan.duration_s)
    size = str(plan.size)
    out: dict[str, Any] = {"plan": plan.__dict__, "broker_impl": impl}
    with tempfile.TemporaryDirectory(prefix="rmq-lab-broker-bench-", dir=root) as tmp:
        for mode in ("ASYNC_FLUSH", "SYNC_FLUSH"):
            with Topology(Path(tmp) / mode, broker_conf={"flushDiskType": mode}, impl=impl,
                          rocketmq_home=rocketmq_home) as topo:
                r: dict[str, Any] = {}
                # warm-up: creates the topic and maps the first files
                run_producer(topo, ["-t", "Warm", "-q", "200", "-w", "4", "-s", size], progress)
                r["single_64_in_flight"] = run_producer(
                    topo, ["-t", "Single", "-y", "--in-flight", str(plan.in_flight), "-p", str(plan.processes),
                           "-s", size, "-d", d], progress)
                lean_singles = lean_args(plan, "Lean", "--in-flight", str(plan.in_flight))
                r["single_64_lean"] = run_producer(topo, lean_singles, progress)
                r["one_in_flight"] = run_producer(topo, ["-t", "One", "-w", "1", "-s", size, "-d", d], progress)
                # The same round trip from the lean generator: the broker's own latency, without the client
                # library's Python and thread hand-offs (reported side by side, the issue asks that the client
                # not be the bound).
                r["one_in_flight_lean"] = run_producer(
                    topo, ["-t", "OneLean", "--lean", "--in-flight", "1", "-p", "1", "-s", size, "-d", d], progress)
                half = r["single_64_in_flight"]["send_tps"] / 2
                r["half_rate"] = run_producer(
                    topo, ["-t", "Half", "-r", f"{half / plan.processes:.0f}", "--in-flight", "1024",
                           "-p", str(plan.processes), "-s", size, "-d", d], progress)
                # The same open-loop test with the lean generator, at half its own maximum: the client
                # library's ~40 µs per message and its threads add their own tail on a 2-core machine.
                half_lean = r["single_64_lean"]["send_tps"] / 2
                half_lean_args = lean_args(plan, "HalfLean", "-r", f"{half_lean / plan.processes:.0f}",
                                       "--in-flight", "1024")
                r["half_rate_lean"] = run_producer(topo, half_lean_args, progress)
                # Once more with the broker alone on one core and the generator on the other: what the tail
                # owes to sharing two cores with the load (CFS time slices of several ms), rather than to
                # the broker itself.
                cores = separate_cores()
                if cores is not None:
                    r["half_rate_lean_pinned"] = run_producer(topo, half_lean_args, progress, cores)
                if mode == "ASYNC_FLUSH":
                    r["batch_32"] = run_producer(
                        topo, ["-t", "Batch", "-b", "32", "-w", "4", "-p", str(plan.processes), "-s", size, "-d", d],
                        progress)
                    r["batch_32_lean"] = run_producer(
                        topo, lean_args(plan, "LeanBatch", "-b", "32", "--in-flight", "4"), progress)
                    # Consumers in as many processes as the producers, so one interpreter's consume CPU (~20 µs
                    # per message) does not bound the broker's figure.
                    r["consume_with_commits"] = run_consumer(
                        topo, ["-t", "Batch", "-g", "bench_drain", "--from-first", "-p", str(plan.processes),
                               "-d", d], progress)
                    r["send_to_consume_1000"] = _send_to_consume(topo, plan, progress)
                    if cores is not None:
                        r["single_64_lean_pinned"] = run_producer(topo, lean_singles, progress, cores)
                    if impl == "reference":
                        r.update(_bare_baseline(topo, plan, Path(tmp), progress))
                out[mode] = r
    a, s = out["ASYNC_FLUSH"], out["SYNC_FLUSH"]
    single_a = a["single_64_in_flight"]["send_tps"]
    single_s = s["single_64_in_flight"]["send_tps"]
    lean_a = a["single_64_lean"]["send_tps"]
    lean_s = s["single_64_lean"]["send_tps"]
    out["figures"] = [
        ("single sends, 64 in flight (ASYNC)", f"{single_a:,.0f} msg/s", ">= 50,000 msg/s", single_a >= 50_000),
        ("... with the lean load generator", f"{lean_a:,.0f} msg/s", ">= 50,000 msg/s", lean_a >= 50_000),
        ("batches of 32 (ASYNC)", f"{a['batch_32']['send_tps']:,.0f} msg/s", ">= 150,000 msg/s",
         a["batch_32"]["send_tps"] >= 150_000),
        ("... with the lean load generator", f"{a['batch_32_lean']['send_tps']:,.0f} msg/s", ">= 150,000 msg/s",
         a["batch_32_lean"]["send_tps"] >= 150_000),
        ("one in flight, p50 (ASYNC)", f"{a['one_in_flight']['p50_ms']:.3f} ms", "<= 0.2 ms",
         a["one_in_flight"]["p50_ms"] <= 0.2),
        ("... with the lean load generator", f"{a['one_in_flight_lean']['p50_ms']:.3f} ms", "<= 0.2 ms",
         a["one_in_flight_lean"]["p50_ms"] <= 0.2),
        ("SYNC / ASYNC, 64 in flight", f"{single_s / single_a:.2f} ({single_s:,.0f} msg/s)",
         ">= 0.5 and >= 25,000 msg/s", single_s / single_a >= 0.5 and single_s >= 25_000),
        ("... with the lean load generator", f"{lean_s / lean_a:.2f} ({lean_s:,.0f} msg/s)",
         ">= 0.5 and >= 25,000 msg/s", lean_s / lean_a >= 0.5 and lean_s >= 25_000),
        ("p99 at half the max rate (ASYNC)", f"{a['half_rate']['p99_ms']:.2f} ms", "<= 2 ms",
         a["half_rate"]["p99_ms"] <= 2),
        ("... with the lean load generator", _half_lean(a), "<= 2 ms", a["half_rate_lean"]["p99_ms"] <= 2),
        *_pinned_row(a, 2),
        ("p99 at half the max rate (SYNC)", f"{s['half_rate']['p99_ms']:.2f} ms", "<= 5 ms",
         s["half_rate"]["p99_ms"] <= 5),
        ("... with the lean load generator", _half_lean(s), "<= 5 ms", s["half_rate_lean"]["p99_ms"] <= 5),
        *_pinned_row(s, 5),
        ("send-to-consume p99 at 1,000 msg/s", f"{a['send_to_consume_1000']['e2e_p99_ms']:.1f} ms", "<= 10 ms",
         a["send_to_consume_1000"]["e2e_p99_ms"] <= 10),
        ("consumption with offset commits", f"{a['consume_with_commits']['tps']:,.0f} msg/s", ">= 50,000 msg/s",
         a["consume_with_commits"]["tps"] >= 50_000),
        ("consumer CPU / broker CPU per message consumed",
         f"{_us(a['consume_with_commits'].get('client_cpu_us_per_msg'))} / "
         f"{_us(a['consume_with_commits'].get('broker_cpu_us_per_msg'))}", "reported", None),
        *_baseline_rows(a),
        ("client CPU per message (async sends)",
         f"{a['single_64_in_flight']['client_cpu_us_per_msg']:.1f} us", "reported", None),
        ("client CPU per message (lean load generator)",
         f"{a['single_64_lean']['client_cpu_us_per_msg']:.1f} us", "reported", None),
        ("broker CPU per message (lean single sends)",
         f"{a['single_64_lean']['broker_cpu_us_per_msg']:.1f} us", "reported", None),
        ("broker CPU per message (async sends)",
         f"{a['single_64_in_flight']['broker_cpu_us_per_msg']:.1f} us", "reported", None),
        ("broker CPU per message (batches of 32)",
         f"{a['batch_32']['broker_cpu_us_per_msg']:.1f} us", "reported", None),
        *_dispatch_rows(a),
    ]
    return out


def _dispatch_rows(a: dict[str, Any]) -> list[tuple[str, str, str, bool | None]]:
    """The dispatch thread's CPU per message beside the broker's, for the lean loads (docs/dispatch.md)."""
    rows: list[tuple[str, str, str, bool | None]] = []
    for key, what in (("single_64_lean", "lean single sends"), ("batch_32_lean", "lean batches of 32")):
        threads = a.get(key, {}).get("broker_thread_cpu_us_per_msg")
        if not threads or thread_cpu.DISPATCH not in threads:  # RocketMQ: its threads are not ours
            continue
        dispatch, total = threads[thread_cpu.DISPATCH], sum(threads.values())
        rows.append((f"dispatch thread CPU per message ({what})",
                     f"{dispatch:.1f} us of {total:.1f} ({dispatch / total:.0%})", "reported", None))
    return rows


def _bare_baseline(topo: Topology, plan: Plan, tmp: Path, progress: Progress) -> dict[str, Any]:
    """The same lean sends against the bare broker (``bench bare-broker``: parse, append a record and a unit,
    answer), registered with the same name server: the floor of this interpreter on this machine, which the
    broker issue's prototype figures describe."""
    with bare_broker(topo, tmp) as pid:
        single = run_producer(topo, lean_args(plan, BARE_TOPIC, "--in-flight", str(plan.in_flight)), progress,
                              broker_pid=pid)
        batch = run_producer(topo, lean_args(plan, BARE_TOPIC, "-b", "32", "--in-flight", "4"), progress,
                             broker_pid=pid)
    return {"bare_single_64_lean": single, "bare_batch_32_lean": batch}


@contextmanager
def bare_broker(topo: Topology, root: Path) -> Iterator[int]:
    """The bare broker (``bench bare-broker``, serving BARE_TOPIC) registered with ``topo``'s name server, its
    store under ``root``; yields its PID and stops it after."""
    port = free_port()
    bare = Process("bare-broker", [sys.executable, "-m", "reference_broker", "bench", "bare-broker", "-n",
                                   topo.namesrv_addr, "-p", str(port), "--root", str(root / "bare"), "-t", BARE_TOPIC],
                   root / "bare-broker.log", "bare broker boot success")
    bare.start()
    try:
        yield bare.pid
    finally:
        bare.stop()


def _us(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} us"


def _baseline_rows(a: dict[str, Any]) -> list[tuple[str, str, str, bool | None]]:
    rows: list[tuple[str, str, str, bool | None]] = []
    if "single_64_lean_pinned" in a:
        rows.append(("lean single sends, broker and generator on separate cores",
                     f"{a['single_64_lean_pinned']['send_tps']:,.0f} msg/s", "reported", None))
    if "bare_single_64_lean" not in a:  # beside RocketMQ: the bare broker is the reference broker's floor
        return rows
    bs, bb = a["bare_single_64_lean"], a["bare_batch_32_lean"]
    rows += [
        ("baseline: bare broker, lean single sends", f"{bs['send_tps']:,.0f} msg/s "
         f"({bs['broker_cpu_us_per_msg']:.1f} us/msg)", "reported", None),
        ("baseline: bare broker, lean batches of 32", f"{bb['send_tps']:,.0f} msg/s "
         f"({bb['broker_cpu_us_per_msg']:.1f} us/msg)", "reported", None),
    ]
    return rows


def _pinned_row(mode: dict[str, Any], target_ms: float) -> list[tuple[str, str, str, bool | None]]:
    if "half_rate_lean_pinned" not in mode:
        return []
    return [("... lean, broker and generator on separate cores", _half_lean(mode, "half_rate_lean_pinned"),
             f"<= {target_ms:g} ms", mode["half_rate_lean_pinned"]["p99_ms"] <= target_ms)]


def _half_lean(mode: dict[str, Any], key: str = "half_rate_lean") -> str:
    h = mode[key]
    return (f"{h['p99_ms']:.2f} ms at {h['send_tps']:,.0f} msg/s (client pacing lag p99 "
            f"{h['pace_lag_p99_ms']:.2f} ms)")


def _send_to_consume(topo: Topology, plan: Plan, progress: Progress) -> dict[str, Any]:
    """A consumer on a topic while a producer sends 1,000 msg/s to it; send-to-consume times (stamped by the
    producer in ns)."""
    run_producer(topo, ["-t", "E2E", "-q", "1", "-w", "1"], progress)  # the topic exists before the consumer looks
    consumer = subprocess.Popen(
        [sys.executable, "-m", "reference_broker", "bench", "consumer", "-n", topo.namesrv_addr, "--json",
         "-t", "E2E", "-g", "bench_e2e", "-d", str(plan.duration_s + 6), "-i", "1000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        import time

        time.sleep(3)  # let the consumer subscribe and its first long poll park
        run_producer(topo, ["-t", "E2E", "-r", "1000", "-s", str(plan.size), "-d", str(plan.duration_s)], progress)
        out, err = consumer.communicate(timeout=120)
    finally:
        if consumer.poll() is None:
            consumer.kill()
    if consumer.returncode != 0:
        raise RuntimeError(f"bench consumer failed: {err[-2000:]}")
    result: dict[str, Any] = json.loads(out)
    return result


def format_figures(result: dict[str, Any]) -> str:
    rows = result["figures"]
    w = max(len(r[0]) for r in rows)
    lines = [f"{'figure':<{w}}  {'measured':>26}  {'target':<28} verdict"]
    for name, measured, target, ok in rows:
        verdict = "-" if ok is None else ("met" if ok else "MISSED")
        lines.append(f"{name:<{w}}  {measured:>26}  {target:<28} {verdict}")
    return "\n".join(lines)
