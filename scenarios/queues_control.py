"""Phases for ``scenarios/queues.py``: one rate spread over more and more queues (the seed's "10,000+ queues per
broker without write degradation").

A phase per queue count; a count above ``--max-queues-per-topic`` (the reference broker allows 1,024 queues per
topic, as a created topic is validated) is split over several topics of equal size, so 10,000 queues are 10
topics of 1,000 (RocketMQ's claim is per broker, not per topic). The producers send round-robin over the
phase's topics and, within a topic, over its queues (the client's own queue selection). Consumers subscribe to
a phase's topics when it begins and keep the earlier ones (so everything sent is drained at the end).
"""

from __future__ import annotations

from harness.scaling import split_queues
from scenarios.contract import Phase
from scenarios.options import Settings
from scenarios.spec import RunContext

DEFAULT_PHASE_S = 10.0


def queue_phases(settings: Settings, tag: str, scenario: str) -> list[Phase]:
    phases = []
    for n in settings.queue_counts:
        sizes = split_queues(n, settings.max_queues_per_topic)
        topics = tuple((f"lab_{scenario}_{tag}_n{n}_t{i}", q) for i, q in enumerate(sizes))
        phases.append(Phase(f"q={n}", topics))
    return phases


def control(ctx: RunContext) -> None:
    phases = ctx.info.phases
    remaining = ctx.remaining_s()
    duration = ctx.settings.phase_s or (remaining / len(phases) if remaining else DEFAULT_PHASE_S)
    rows: list[dict[str, object]] = []
    ctx.results["phases"] = rows
    for i, phase in enumerate(phases):
        if i > 0:
            ctx.hub.command("set_phase", index=i)
        start = ctx.now_ns()
        rows.append({"label": phase.label, "queues": phase.queues, "topics": len(phase.topics), "start_ns": start})
        ctx.say(f"phase {phase.label}: {phase.queues} queues over {len(phase.topics)} topic(s) for {duration:.1f} s")
        ended = not ctx.sleep(duration)
        rows[-1]["end_ns"] = ctx.now_ns()
        if ended:
            break
