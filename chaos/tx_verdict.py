"""This module owns the transactional chaos load's plan (what each key's transaction decides, readable from the
key alone, so that any producer process of the group answers a check-back the same way) and the verdict of a
transaction cell (pure: no I/O).

Key: ``<worker>-<seq:09d>-<plan>``; the body is chaos.payload's body of the whole key.

====  ==========================  ===================  ============================================
plan  executeLocalTransaction     checkLocalTransaction  expected
====  ==========================  ===================  ============================================
c     COMMIT_MESSAGE              COMMIT_MESSAGE       delivered (at least once)
r     ROLLBACK_MESSAGE            ROLLBACK_MESSAGE     never delivered
uc    UNKNOW                      COMMIT_MESSAGE       resolved by check-back, then delivered
ur    UNKNOW                      ROLLBACK_MESSAGE     resolved by check-back, never delivered
n     UNKNOW                      UNKNOW               never resolved (past transactionCheckMax the broker
                                                       discards it), never delivered
====  ==========================  ===================  ============================================

The check answers what the local transaction decided (an application's check reads its own database), so a
lost END_TRANSACTION (the broker killed before it arrived, or the producer killed before it sent it) is made
good by the check-back with the same decision.

Verdict rules (the issue's "what must hold"), from the run's events (send rows = half messages, tx rows = the
decisions, receive/read rows = deliveries of the real topic):

1. ``leaked``: no key without a commit decision is delivered (the checker's atomicity rule, tx_leaked).
2. ``early``: no key is delivered before its first commit decision was taken: a delivery earlier than that
   is a half message visible on the real topic.
3. ``lost``: every key with an acknowledged half message and a commit decision is delivered — under
   SYNC_FLUSH always; under ASYNC_FLUSH with power loss a key is excused when what the crash took was in the
   unflushed window (as the flush matrix's rule 3a; chaos.verdict), charged to the first crash whose restart
   completed after the event: its half message lay at or past the flushed offset sampled right before the
   crash, or its commit did — the real-topic message END_TRANSACTION writes comes after every record
   acknowledged before the commit decision, so it lay in the window when one of those did. (The check-back
   does not bring such a commit back: the check service's progress through the half queue, kept in the
   consumer offsets, had passed the half message before the crash.) A broker that reports no flushed offset
   (4.9.8) has no window: its ASYNC power-loss loss stands as the flush mode allows.
4. ``unresolved``: every key whose check answers a decision (plans c, r, uc, ur) and whose half message was
   acknowledged is resolved (some tx row ok or fail) — an UNKNOW is resolved by check-back, and so is a
   transaction whose producer died before END_TRANSACTION. Excused like rule 3 under ASYNC power loss.
5. ``wrong``: no decision contradicts the key's plan (a check-back answered by the wrong process or for the
   wrong message).
6. No corrupted or unexpected delivery; every fault cycle recovered.
"""

from __future__ import annotations

import bisect
import enum
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from chaos.payload import make_key


class TxPlan(enum.StrEnum):
    COMMIT = "c"
    ROLLBACK = "r"
    UNKNOWN_COMMIT = "uc"
    UNKNOWN_ROLLBACK = "ur"
    NEVER = "n"

    @property
    def local(self) -> str:
        """The local transaction's decision as a tx row's outcome."""
        return {TxPlan.COMMIT: "ok", TxPlan.ROLLBACK: "fail"}.get(self, "unknown")

    @property
    def check(self) -> str:
        """The check-back's answer as a tx row's outcome."""
        if self in (TxPlan.COMMIT, TxPlan.UNKNOWN_COMMIT):
            return "ok"
        if self in (TxPlan.ROLLBACK, TxPlan.UNKNOWN_ROLLBACK):
            return "fail"
        return "unknown"

    @property
    def commits(self) -> bool:
        return self.check == "ok"

    @property
    def resolvable(self) -> bool:
        return self is not TxPlan.NEVER


# The chaos load's mix, one plan per sequence number modulo 10: 4 commits, 2 rollbacks, 2 UNKNOW-then-commit,
# 1 UNKNOW-then-rollback, 1 never resolved.
DEFAULT_MIX: tuple[TxPlan, ...] = (TxPlan.COMMIT,) * 4 + (TxPlan.ROLLBACK,) * 2 + (
    TxPlan.UNKNOWN_COMMIT,) * 2 + (TxPlan.UNKNOWN_ROLLBACK, TxPlan.NEVER)
# What a producer killed between prepare and END_TRANSACTION held: its local transactions never finished.
HELD_MIX: tuple[TxPlan, ...] = (TxPlan.COMMIT, TxPlan.ROLLBACK)


def tx_key(worker: str, seq: int, plan: TxPlan) -> str:
    return f"{make_key(worker, seq)}-{plan.value}"


def plan_of(key: str) -> TxPlan | None:
    """The plan a key carries; None for a key of no transaction of this load."""
    _, sep, suffix = key.rpartition("-")
    if not sep:
        return None
    try:
        return TxPlan(suffix)
    except ValueError:
        return None


@dataclass
class KeyFacts:
    """One key's history, gathered from the events."""

    plan: TxPlan | None
    acked: bool = False
    half_offset: int = -1  # commit-log offset of the half message (-1 unknown)
    ack_ns: int = -1  # when the half message's SendResult arrived
    prepare_ns: int = -1  # when the half message was sent
    decisions: list[tuple[int, str, str]] = field(default_factory=list)  # (end_ns, outcome, session)
    first_delivery_ns: int = -1
    deliveries: int = 0

    @property
    def first_commit_ns(self) -> int:
        ts = [t for t, d, _ in self.decisions if d == "ok"]
        return min(ts) if ts else -1

    @property
    def committed(self) -> bool:
        return any(d == "ok" for _, d, _ in self.decisions)

    @property
    def resolved(self) -> bool:
        return any(d in ("ok", "fail") for _, d, _ in self.decisions)

    @property
    def check_resolution_ns(self) -> int:
        """When a check-back first resolved it (-1: none did)."""
        ts = [t for t, d, s in self.decisions if s == "check" and d in ("ok", "fail")]
        return min(ts) if ts else -1


def gather(rows: Iterable[Mapping[str, Any]], half_offsets: Mapping[str, int] | None = None) -> dict[str, KeyFacts]:
    """Per key of this load (keys that carry a plan), from event rows (op, key, outcome, start_ns, end_ns,
    session); ``half_offsets``: the commit-log offsets of acknowledged half messages, where known."""
    offsets = half_offsets or {}
    facts: dict[str, KeyFacts] = {}
    for r in rows:
        key = str(r["key"])
        f = facts.get(key)
        if f is None:
            plan = plan_of(key)
            if plan is None:
                continue
            f = facts[key] = KeyFacts(plan)
        op, outcome = r["op"], r["outcome"]
        if op == "send":
            if f.prepare_ns < 0 or r["start_ns"] < f.prepare_ns:
                f.prepare_ns = int(r["start_ns"])
            if outcome == "ok" and not f.acked:
                f.acked, f.ack_ns = True, int(r["end_ns"])
                f.half_offset = offsets.get(key, -1)
        elif op == "tx":
            f.decisions.append((int(r["end_ns"]), str(outcome), str(r.get("session", ""))))
        elif op in ("receive", "read") and outcome == "ok":
            f.deliveries += 1
            t = int(r["end_ns"])
            if f.first_delivery_ns < 0 or t < f.first_delivery_ns:
                f.first_delivery_ns = t
    return facts


@dataclass(frozen=True)
class Crash:
    """A power-loss crash: when, the flushed offset sampled right before it (-1: not reported), and when the
    broker was back (no answer comes between the kill and the restart, so whatever was recorded before the
    restart completed happened before the crash)."""

    fault_ns: int
    flushed_offset: int
    restored_ns: int


@dataclass
class TxVerdict:
    ok: bool
    committed: int = 0
    rolled_back: int = 0
    unresolved_never: int = 0  # plan n: never resolved, as planned
    resolved_by_check: int = 0
    check_latency_ms_median: float | None = None
    check_latency_ms_max: float | None = None
    leaked: int = 0
    early: int = 0
    lost: int = 0
    lost_excused: int = 0
    unresolved: int = 0
    unresolved_excused: int = 0
    wrong: int = 0
    held: int = 0  # keys held by a killed producer (producer_kill9)
    held_resolved: int = 0
    violations: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    samples: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class _Window:
    """Which keys an ASYNC_FLUSH power loss may have taken (rule 3)."""

    def __init__(self, crashes: Sequence[Crash], facts: Mapping[str, KeyFacts]) -> None:
        self.crashes = sorted(crashes, key=lambda c: c.restored_ns)
        self.restored = [c.restored_ns for c in self.crashes]
        acks = sorted((f.ack_ns, f.half_offset) for f in facts.values() if f.ack_ns >= 0 and f.half_offset >= 0)
        self.ack_ns = [t for t, _ in acks]
        self.log_end: list[int] = []  # the highest half-message offset acknowledged by each ack_ns
        for _, offset in acks:
            self.log_end.append(max(offset, self.log_end[-1] if self.log_end else -1))

    def _crash_after(self, t: int) -> Crash | None:
        i = bisect.bisect_left(self.restored, t)
        return self.crashes[i] if t >= 0 and i < len(self.crashes) else None

    def _end_at(self, t: int) -> int:
        i = bisect.bisect_right(self.ack_ns, t)
        return self.log_end[i - 1] if i else -1

    def excuses(self, f: KeyFacts) -> bool:
        """The half message lay at or past the flushed offset of the first crash after its acknowledgement, or
        the commit's real message did: it was written after every record acknowledged before the commit
        decision, so it lay past the flushed offset when one of those did. No flushed offset reported: excused."""
        c = self._crash_after(f.ack_ns)
        if c is not None and (c.flushed_offset < 0 or f.half_offset < 0 or f.half_offset >= c.flushed_offset):
            return True
        c = self._crash_after(f.first_commit_ns)
        return c is not None and (c.flushed_offset < 0 or self._end_at(f.first_commit_ns) >= c.flushed_offset)


def judge(facts: Mapping[str, KeyFacts], *, power_loss_async: Sequence[Crash] = (), held: Iterable[str] = (),
          corrupted: int = 0, unexpected: int = 0, cycle_errors: Sequence[str] = (), error: str | None = None,
          sample_size: int = 5) -> TxVerdict:
    """The cell's verdict (rules in the module docstring). ``power_loss_async``: the crashes of an ASYNC_FLUSH
    power-loss cell, in time order (none otherwise); ``held``: the keys a killed producer held."""
    v = TxVerdict(ok=False)
    window = _Window(power_loss_async, facts)
    bad: dict[str, list[str]] = {}
    latencies: list[float] = []
    held_set = set(held)
    for key, f in sorted(facts.items()):
        plan = f.plan
        assert plan is not None
        if f.committed:
            v.committed += 1
        elif any(d == "fail" for _, d, _ in f.decisions):
            v.rolled_back += 1
        elif plan is TxPlan.NEVER and f.acked:
            v.unresolved_never += 1
        if key in held_set:
            v.held += 1
            v.held_resolved += int(f.resolved)
        if f.check_resolution_ns >= 0 and f.prepare_ns >= 0:
            v.resolved_by_check += 1
            latencies.append((f.check_resolution_ns - f.prepare_ns) / 1e6)
        if any(d != plan.local if s == "local" else d not in (plan.check, "unknown") for _, d, s in f.decisions):
            bad.setdefault("wrong", []).append(key)
        if f.deliveries and not f.committed:
            bad.setdefault("leaked", []).append(key)
        elif f.deliveries and f.first_delivery_ns < f.first_commit_ns:
            bad.setdefault("early", []).append(key)
        excused = bool(power_loss_async) and window.excuses(f)
        if f.acked and f.committed and not f.deliveries:
            bad.setdefault("lost_excused" if excused else "lost", []).append(key)
        if f.acked and plan.resolvable and not f.resolved:
            bad.setdefault("unresolved_excused" if excused else "unresolved", []).append(key)
    for name, keys in bad.items():
        setattr(v, name, len(keys))
        v.samples[name] = keys[:sample_size]
    if latencies:
        v.check_latency_ms_median = round(statistics.median(latencies), 1)
        v.check_latency_ms_max = round(max(latencies), 1)
    rules = {"leaked": "rolled-back or unresolved transactions delivered",
             "early": "messages delivered before their commit (a half message visible on the real topic)",
             "lost": "committed transactions never delivered",
             "unresolved": "transactions not resolved by check-back",
             "wrong": "decisions that contradict the key's plan"}
    for name, text in rules.items():
        n = getattr(v, name)
        if n:
            v.violations.append(f"{n} {text} (e.g. {', '.join(v.samples[name][:3])})")
    if corrupted:
        v.violations.append(f"{corrupted} corrupted deliveries")
    if unexpected:
        v.violations.append(f"{unexpected} unexpected deliveries")
    if held_set and v.held < len(held_set):
        v.violations.append(f"only {v.held} of the {len(held_set)} held keys have a half message on record")
    v.violations += list(cycle_errors)
    if error:
        v.violations.append(error)
    if v.lost_excused or v.unresolved_excused:
        v.findings.append(f"ASYNC power loss took {v.lost_excused} committed and {v.unresolved_excused} "
                          "unresolved half messages within the unflushed window (allowed)")
    v.ok = not v.violations
    return v
