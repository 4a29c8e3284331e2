"""This module owns the judgement of a peer broker's losses under power loss against its own acknowledgement
promise (meta.json ``ack_promise``): pure functions over the run's events and the crash times.

The reference broker's ASYNC_FLUSH loss is bounded by bytes (the commit log's unflushed window, chaos.verdict);
a peer's store exposes no flushed offset, so its loss is bounded by time instead:

=============  ===========================  =============================================================
promise        window before each crash     why
=============  ===========================  =============================================================
``fsync``      none                         the acknowledgement came after fsync (RabbitMQ's confirms):
                                            a power loss may not lose it
``page_cache`` ``PAGE_CACHE_WINDOW_S``      NATS JetStream 2.9 syncs its message blocks on a 2-minute timer
                                            (docs/interop.md, "Peer brokers"); what it acknowledged more than
                                            one interval before the crash was synced by then
=============  ===========================  =============================================================

A lost message (acknowledged, never delivered) is *allowed* when its acknowledgement came within the window
before some crash, and *beyond the promise* otherwise — for example a message acknowledged after the last crash
and never delivered, which no promise excuses.
"""

# mypy: disable-error-code="import-untyped"

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from harness.peer_drivers import AckPromise
from harness.records.schema import Op, Outcome

# nats-server 2.9's file store syncs every 2 minutes; 5 s of slack for the timer and the restart between crashes.
PAGE_CACHE_WINDOW_S: Final = 125.0
SAMPLES: Final = 5


def exposure_window_s(promise: str | None) -> float:
    """How long before a crash an acknowledged message may still be only in the page cache, by promise."""
    return PAGE_CACHE_WINDOW_S if promise == AckPromise.PAGE_CACHE else 0.0


def lost_acks(events: pa.Table) -> dict[str, int]:
    """Acknowledged keys no delivery brought, with the end of their latest acknowledged send (ns)."""
    op, outcome = events["op"], events["outcome"]
    ok = pc.equal(outcome, Outcome.OK.value)
    sends = events.filter(pc.and_(pc.equal(op, Op.SEND.value), ok))
    received = set(events.filter(pc.and_(pc.equal(op, Op.RECEIVE.value), ok))["key"].to_pylist())
    out: dict[str, int] = {}
    for key, end in zip(sends["key"].to_pylist(), sends["end_ns"].to_pylist(), strict=True):
        if key not in received:
            out[key] = max(end, out.get(key, end))
    return out


@dataclass(frozen=True)
class LossVerdict:
    lost: int
    allowed: int  # acknowledged within the window before a crash: what the promise lets a power loss take
    beyond_promise: int
    window_s: float
    samples_beyond: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.beyond_promise == 0


def judge_losses(lost: Mapping[str, int], crashes_ns: Sequence[int], window_s: float) -> LossVerdict:
    """Split ``lost`` (key -> acknowledgement time) into what the crashes at ``crashes_ns`` may take under a
    ``window_s`` promise and what they may not. ``crashes_ns``: when each crashed server was already dead (no
    acknowledgement can come from it later)."""
    window_ns = int(window_s * 1e9)
    beyond = []
    for key, acked in lost.items():
        if window_ns <= 0 or not any(c - window_ns <= acked <= c for c in crashes_ns):
            beyond.append(key)
    beyond.sort(key=lambda k: lost[k])
    return LossVerdict(lost=len(lost), allowed=len(lost) - len(beyond), beyond_promise=len(beyond),
                       window_s=window_s, samples_beyond=beyond[:SAMPLES])
