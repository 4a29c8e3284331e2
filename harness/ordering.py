"""Per-queue order rules for ordered workloads, vectorised over a run's receives (numpy, no per-row Python).

A *consumer session* is one consumer instance's lifetime: the (worker, session) pair of a receive row. Only
deliveries the listener accepted (receive rows with outcome "ok") take part. Two rules, each judged per
session, in the session's delivery order (receive ``end_ns``; ties keep recording order):

A. Offsets: for each (topic, queue_id) with known offsets, a receive violates order when an earlier receive in
   the same session and queue had a higher ``queue_offset``. RocketMQ's orderly consumer hands one queue's
   messages to one thread in offset order (ConsumeMessageOrderlyService); a retry of a batch the listener
   declined (SUSPEND_CURRENT_QUEUE_A_MOMENT) is recorded with outcome "fail" and so does not count.
B. Ack order: take each key's first acknowledged send (by ack time) with a known queue. For two keys sent to
   the same topic/queue by the same producer worker where send a was acknowledged before send b started, no
   session may deliver b before a: a receive violates order when an earlier receive in the same session came
   from a send (same producer, same queue) that started after this key's send was acknowledged. Sends that
   overlapped in time are not ordered by this rule (an async producer with several sends in flight promises
   no order between them); RocketMQ's ordered producers send synchronously, one at a time per sharding key.

The count per "topic/queue" is the number of receives that violate rule A or B (a receive violating both
counts once), i.e. messages delivered too late, not the number of descents: one rewind of 1,000 messages
counts 1,000.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
Bool = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Receives:
    """Accepted receives in recording order, as parallel arrays (codes are small non-negative ints)."""

    key: I64  # key code (indexes the per-key send arrays)
    session: I64  # (worker, session) code
    topic: I64  # topic code
    queue_id: I64
    queue_offset: I64
    end_ns: I64


@dataclass(frozen=True)
class FirstAcks:
    """Per key code: the first acknowledged send, or -1 where the key has none (or no known queue)."""

    worker: I64
    topic: I64
    queue_id: I64
    start_ns: I64
    end_ns: I64


_LIMIT = 2**62


def _delivery_order(group: I64, end_ns: I64) -> I64:
    """Permutation sorting by (group, end_ns), stable so equal times keep recording order."""
    by_time = np.argsort(end_ns, kind="stable")
    return by_time[np.argsort(group[by_time], kind="stable")]


def _compact(codes: I64) -> tuple[I64, int]:
    _, inverse = np.unique(codes, return_inverse=True)
    inverse = inverse.reshape(-1).astype(np.int64)
    return inverse, int(inverse.max()) + 1


def _group_codes(*columns: I64) -> tuple[I64, int]:
    """One code per distinct tuple of the (non-negative) columns, ordered like the tuples, and the code span."""
    combined = np.zeros(len(columns[0]), np.int64)
    span = 1
    for col in columns:
        width = int(col.max()) + 1
        if span * width >= _LIMIT:  # mixed radix would overflow: renumber what we have densely first
            combined, span = _compact(combined)
        combined = combined * width + col
        span *= width
    return combined, span


def _scaled(values: I64, span: int) -> tuple[I64, int]:
    """``values`` shifted to start at 0 (or densely ranked when ``span`` groups of that width would overflow),
    and their width; order and equality are preserved."""
    low = int(values.min())
    width = int(values.max()) - low + 1
    if span * width < _LIMIT:
        return values - low, width
    ranks, width = _compact(values)
    return ranks, width


def _late_after(group: I64, span: int, earlier: I64, own: I64, width: int) -> Bool:
    """For rows sorted by group: True where a previous row of the same group has ``earlier`` > this row's ``own``
    (both in [0, width)). A running maximum restarts per group because group g's keys, g * width + value,
    exceed every key of the groups before it."""
    if span * width >= _LIMIT:
        group, span = _compact(group)
    base = group * width
    running = np.maximum.accumulate(base + earlier)
    prev = np.empty_like(running)
    prev[0] = -1
    prev[1:] = running[:-1]
    same = np.zeros(len(group), np.bool_)
    same[1:] = group[1:] == group[:-1]
    return same & (prev > base + own)


def offset_violations(r: Receives) -> Bool:
    """Rule A, per receive (in the input order)."""
    idx = np.flatnonzero((r.queue_id >= 0) & (r.queue_offset >= 0))
    out = np.zeros(len(r.key), np.bool_)
    if len(idx) == 0:
        return out
    group, span = _group_codes(r.session[idx], r.topic[idx], r.queue_id[idx])
    order = _delivery_order(group, r.end_ns[idx])
    offsets, width = _scaled(r.queue_offset[idx][order], span)
    out[idx[order]] = _late_after(group[order], span, offsets, offsets, width)
    return out


def ack_order_violations(r: Receives, first: FirstAcks) -> Bool:
    """Rule B, per receive (in the input order)."""
    idx = np.flatnonzero(first.queue_id[r.key] >= 0)
    out = np.zeros(len(r.key), np.bool_)
    if len(idx) == 0:
        return out
    keys = r.key[idx]
    group, span = _group_codes(r.session[idx], first.worker[keys], first.topic[keys], first.queue_id[keys])
    order = _delivery_order(group, r.end_ns[idx])
    keys = keys[order]
    # Send starts and acks on one scale, so "started after acknowledged" survives the scaling.
    times, width = _scaled(np.concatenate([first.start_ns[keys], first.end_ns[keys]]), span)
    out[idx[order]] = _late_after(group[order], span, times[:len(keys)], times[len(keys):], width)
    return out
