"""This module owns the dispatch-cost measurement (``python -m harness dispatch-cost``): what the broker's dispatch
thread costs per message, and what moving dispatch out of the broker's interpreter could save at most (issue 23's
"dispatch out of the broker's interpreter" lever; docs/dispatch.md).

Two brokers run at once, each with its own name server (as ab-bench runs two revisions): the reference broker,
and the same broker with its ReputMessageService never started (harness/no_dispatch_broker.py: the control,
no consume queue, index or dispatch hook at all). The same lean load (broker-bench's lean single sends, 64 in
flight, and lean batches of 32) goes to one and then the other, the order swapped every round, so drift hits
both alike. For the reference broker the CPU of each of its threads is read from /proc over the run
(harness/thread_cpu.py), so each round gives

- the dispatch thread's CPU per message, and its share of the broker's;
- the fraction of wall-clock time the dispatch thread ran: while it runs Python it holds the interpreter lock,
  so this is the event loop's time it takes when the event loop is the bound (its GIL "steal");
- the control's CPU per message and rate: the ceiling of the lever, with the dispatch thread's work *and* its
  lock hand-offs gone. The dispatch process (``dispatchInSeparateProcess``, built since: docs/dispatch.md) lands
  between the two: it still costs the broker the publication of the written offset, the refresh of the
  consume-queue views and the arrival wake-ups, and its own CPU competes for this 2-core machine's cores with
  the broker and the load generator (``ab-bench HEAD HEAD --new-conf dispatchInSeparateProcess=true`` measures it).
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from harness import thread_cpu
from harness.broker_bench import run_producer
from harness.launcher import Topology
from harness.no_dispatch_broker import launcher

Progress = Callable[[str], None]

# broker-bench's lean loads: 2 processes × 32 in flight, and batches of 32 with 2 × 4 in flight
LOADS: Final = {
    "single_64": ["--in-flight", "32"],
    "batch_32": ["-b", "32", "--in-flight", "4"],
}
PAYS_SHARE: Final = 0.10  # the bar: build the dispatch process only if it can save >= 10 % of a single send
# Far above any run's message count: the control dispatches nothing, so the put throttle must never engage.
NO_THROTTLE: Final = {"putMsgIndexHightWater": 2**31 - 1}  # the largest the broker accepts


def run(rounds: int = 3, seconds: float = 8.0, size: int = 1024, processes: int = 2,
        progress: Progress = print, root: Path | None = None,
        broker_conf: dict[str, str] | None = None) -> dict[str, Any]:
    """``broker_conf``: more broker.conf keys for both brokers (e.g. ``dispatchIdleIntervalMillis``: run the
    command once per value, alternating, to compare them)."""
    conf = {"flushDiskType": "ASYNC_FLUSH", **NO_THROTTLE, **(broker_conf or {})}
    runs: dict[str, list[dict[str, Any]]] = {f"{load}_{side}": [] for load in LOADS for side in ("broker", "control")}
    with tempfile.TemporaryDirectory(prefix="rmq-lab-dispatch-cost-", dir=root) as tmp:
        base = Path(tmp)
        with Topology(base / "broker", broker_conf=conf) as broker, \
                Topology(base / "control", broker_conf=conf, python=str(launcher(base))) as control:
            sides = {"broker": broker, "control": control}
            for topo in sides.values():  # creates the topics and maps the first files
                for load, extra in LOADS.items():
                    run_producer(topo, ["-t", f"Dispatch_{load}", "--lean", "-p", "1", "-s", str(size), "-d", "1",
                                        *extra], progress)
            for r in range(rounds):
                order = ("broker", "control") if r % 2 == 0 else ("control", "broker")
                for load, extra in LOADS.items():
                    for side in order:
                        args = ["-t", f"Dispatch_{load}", "--lean", "-p", str(processes), "-s", str(size),
                                "-d", str(seconds), *extra]
                        res = run_producer(sides[side], args, progress)
                        runs[f"{load}_{side}"].append(_figures(res))
                        progress(f"round {r + 1} {load} {side}: {res['send_tps']:,.0f} msg/s, "
                                 f"{res['broker_cpu_us_per_msg']:.1f} us/msg")
    plan = {"rounds": rounds, "seconds": seconds, "size": size, "processes": processes,
            "broker_conf": dict(broker_conf or {})}
    return {"plan": plan, "runs": runs, "summary": {load: summarize(runs[f"{load}_broker"], runs[f"{load}_control"])
                                                     for load in LOADS}}


def _figures(res: dict[str, Any]) -> dict[str, Any]:
    threads: dict[str, float] = res.get("broker_thread_cpu_us_per_msg") or {}
    dispatch = threads.get(thread_cpu.DISPATCH, 0.0)
    main = threads.get(thread_cpu.MAIN, 0.0)
    tps = float(res["send_tps"])
    return {"send_tps": tps, "broker_cpu_us_per_msg": float(res["broker_cpu_us_per_msg"]),
            "threads_us_per_msg": threads, "dispatch_us_per_msg": dispatch, "main_us_per_msg": main,
            "other_us_per_msg": sum(threads.values()) - dispatch - main,
            # CPU seconds per wall second the dispatch thread ran: the share of time the lock was its
            "dispatch_wall_share": dispatch * tps / 1e6}


def summarize(broker: list[dict[str, Any]], control: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the rounds, and the lever's ceilings: the dispatch thread's share of the broker's CPU, and the
    measured gain of the control (its CPU per message and rate against the broker's, round by round)."""
    def med(rows: list[dict[str, Any]], key: str) -> float:
        return statistics.median(float(x[key]) for x in rows)

    pairs = list(zip(broker, control, strict=True))  # round by round: both sides ran within seconds of each other
    cpu_gain = [1 - c["broker_cpu_us_per_msg"] / b["broker_cpu_us_per_msg"] for b, c in pairs]
    tps_gain = [c["send_tps"] / b["send_tps"] - 1 for b, c in pairs]
    share = [b["dispatch_us_per_msg"] / b["broker_cpu_us_per_msg"] for b in broker]
    out = {
        "broker_cpu_us_per_msg": med(broker, "broker_cpu_us_per_msg"),
        "send_tps": med(broker, "send_tps"),
        "dispatch_us_per_msg": med(broker, "dispatch_us_per_msg"),
        "main_us_per_msg": med(broker, "main_us_per_msg"),
        "other_us_per_msg": med(broker, "other_us_per_msg"),
        "dispatch_share": statistics.median(share),
        "dispatch_wall_share": med(broker, "dispatch_wall_share"),
        "control_cpu_us_per_msg": med(control, "broker_cpu_us_per_msg"),
        # the event loop's own CPU with and without a dispatch thread beside it: what the lock's hand-offs cost it
        "control_main_us_per_msg": med(control, "main_us_per_msg"),
        "control_send_tps": med(control, "send_tps"),
        "control_cpu_gain": statistics.median(cpu_gain),
        "control_cpu_gain_range": [min(cpu_gain), max(cpu_gain)],
        "control_tps_gain": statistics.median(tps_gain),
        "control_tps_gain_range": [min(tps_gain), max(tps_gain)],
    }
    # The lever pays only if even its ceiling clears the bar: the larger of the two upper bounds decides.
    out["can_pay"] = max(out["dispatch_share"], out["control_cpu_gain"]) >= PAYS_SHARE
    return out


def format_result(result: dict[str, Any]) -> str:
    s = result["summary"]
    p = result["plan"]
    extra = "".join(f", {k}={v}" for k, v in p.get("broker_conf", {}).items())
    lines = [f"dispatch cost: medians of {p['rounds']} rounds of {p['seconds']:g} s, {p['size']} B bodies, "
             f"lean generator in {p['processes']} processes, ASYNC_FLUSH{extra}; µs of broker CPU per message",
             f"{'':<44}{'single sends':>16}{'batches of 32':>16}"]

    def row(label: str, fmt: Callable[[dict[str, Any]], str]) -> None:
        lines.append(f"{label:<44}{fmt(s['single_64']):>16}{fmt(s['batch_32']):>16}")

    row("broker, whole process", lambda x: f"{x['broker_cpu_us_per_msg']:.1f}")
    row("  event loop (main thread)", lambda x: f"{x['main_us_per_msg']:.1f}")
    row("  dispatch thread (ReputMessageService)", lambda x: f"{x['dispatch_us_per_msg']:.1f}")
    row("  other threads", lambda x: f"{x['other_us_per_msg']:.1f}")
    row("dispatch share of the broker's CPU", lambda x: f"{x['dispatch_share']:.1%}")
    row("dispatch thread's share of wall time (GIL)", lambda x: f"{x['dispatch_wall_share']:.1%}")
    row("broker msg/s", lambda x: f"{x['send_tps']:,.0f}")
    row("control (no dispatch at all), CPU per msg", lambda x: f"{x['control_cpu_us_per_msg']:.1f}")
    row("  its event loop", lambda x: f"{x['control_main_us_per_msg']:.1f}")
    row("control msg/s", lambda x: f"{x['control_send_tps']:,.0f}")
    row("ceiling: CPU saved per message", lambda x: f"{x['control_cpu_gain']:.1%}")
    row("  (range over the rounds)", lambda x: "{:.0%}..{:.0%}".format(*x["control_cpu_gain_range"]))
    row("ceiling: msg/s gained", lambda x: f"{x['control_tps_gain']:+.1%}")
    row("  (range over the rounds)", lambda x: "{:+.0%}..{:+.0%}".format(*x["control_tps_gain_range"]))
    single = s["single_64"]
    verdict = "can" if single["can_pay"] else "cannot"
    lines.append(f"verdict: the lever {verdict} pay >= {PAYS_SHARE:.0%} of a single send's broker CPU "
                 f"(ceiling {max(single['dispatch_share'], single['control_cpu_gain']):.1%})")
    return "\n".join(lines)
