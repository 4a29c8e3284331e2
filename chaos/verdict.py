"""This module owns the chaos gate: what a fault experiment must show, judged from the checker's counts, the
cycles' offsets and the lost keys (pure: no I/O).

Rules (the issue's "tox -e crash fails when ..."):

1. No unexpected and no corrupted delivery, under any fault (a corrupted body is recorded under a key the
   workload never sent, so the checker's ``unexpected`` counts it too).
2. Every fault cycle recovered: the broker came back and acknowledged a send again within the deadline; the
   final drain read every queue to its end.
3. Loss of acknowledged messages, judged on *absent* messages: acknowledged and not in the broker when the
   final drain read every queue from its min offset — whether or not a consumer received them before the
   fault (the checker's ``lost``, Jepsen's, counts only those never delivered; a message delivered and then
   erased by a power loss is not lost to the consumer but is lost to the store) — plus any never delivered.
   Delivered messages below where the log begins at the end were deleted by cleaning and do not count.
   - SYNC_FLUSH, any fault: none. (A send acknowledged with FLUSH_DISK_TIMEOUT was stored but not promised
     durable; one lost to a power loss is reported apart, not counted against the flush mode.)
   - ASYNC_FLUSH with kill -9, pause or disk fill: none — the page cache survives the process.
   - ASYNC_FLUSH with power loss: each lost message is charged to the crash of the cycle it was acknowledged
     in — the first crash whose restart completed after the acknowledgement was recorded (no broker answers
     between a kill and the restart, so an acknowledgement recorded then came from before the kill) — and
     (a) must lie at or past the flushed offset sampled right before that crash (nothing flushed may be
     lost), and (b) the commit-log bytes lost at that crash (lost messages x record size) must not exceed the
     unflushed window at that crash: ``written_bound - flushed_offset``, where ``written_bound`` is the larger
     of the sampled written offset and the end of the last send acknowledged before the kill (the sample is
     taken a moment before the kill; sends acknowledged in between are covered by the second term).
     A broker that reports no flushed offset (Apache RocketMQ 4.9.8's runtime info has none:
     ``flushed_reported=False``) has no window to hold its loss to: (a) and (b) cannot be judged, and the
     loss stands as its flush mode allows (the per-crash rows keep window -1, "unknown").
4. kill -9 (docs/claims.md): the recovered commit log ends no earlier than the written offset sampled before
   the kill — only a half-written last record may be cut.
5. The chaos accounting and the checker agree on the number of lost (never delivered) messages.
6. No acknowledged message is in the commit log but unreachable through its consume queue (looked up by its
   commit-log offset after the drain missed it): whatever the fault, that is a broken index, not lost power.
7. After each restart after a crash, every sampled acknowledged message is found by key, by UNIQ_KEY and by
   offsetMsgId (chaos.lookups) — unless the final drain did not find it either: a message the crash took is
   judged by rule 3, not here. A probe that could not run at all fails the verdict too.
8. An experiment whose final drain did not complete (it stopped early with the broker down, or the drain
   failed) is "incomplete: not drained": it fails the gate, but rules 3 and 7 are not judged and nothing is
   called lost — an acknowledged message its consumer had not yet received may well still be in the broker.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from chaos.lookups import LookupCheck, LookupTotals, total

FLUSH_TIMEOUT_STATUS = "FLUSH_DISK_TIMEOUT"
INCOMPLETE = "incomplete"  # the first word of rule 8's violation


class CycleLike(Protocol):
    @property
    def cycle(self) -> int: ...

    @property
    def kind(self) -> str: ...

    @property
    def fault_ns(self) -> int: ...

    @property
    def restored_ns(self) -> int | None: ...

    @property
    def ok(self) -> bool: ...

    @property
    def error(self) -> str | None: ...

    @property
    def written_offset(self) -> int: ...

    @property
    def flushed_offset(self) -> int: ...

    @property
    def written_bound(self) -> int: ...

    @property
    def recovered_offset(self) -> int: ...

    @property
    def window_bytes(self) -> int: ...

    @property
    def quarantined_bytes(self) -> int: ...

    @property
    def quarantined_intact_records(self) -> int: ...


class AckLike(Protocol):
    @property
    def commit_log_offset(self) -> int: ...

    @property
    def end_ns(self) -> int: ...

    @property
    def status(self) -> Any: ...


class CheckLike(Protocol):
    @property
    def lost(self) -> int: ...

    @property
    def unexpected(self) -> int: ...


@dataclass
class CrashLoss:
    """The acknowledged messages lost at one crash, against that crash's unflushed window."""

    cycle: int
    lost: int = 0
    lost_log_bytes: int = 0
    window_bytes: int = -1
    flushed_offset: int = -1
    min_lost_offset: int = -1
    below_flushed: int = 0  # lost messages that lay before the flushed offset: must be 0


@dataclass
class Verdict:
    ok: bool
    violations: list[str]
    complete: bool = True  # False: the experiment was not drained, so its loss was not judged (rule 8)
    corrupted: int = 0
    unreachable: int = 0
    absent: int = 0  # acknowledged, not in the broker at the end
    vanished: int = 0  # of those, delivered before they disappeared
    absent_body_bytes: int = 0
    absent_offsets: tuple[int, int] | None = None  # (lowest, highest) commit-log offset of the absent
    lost_log_bytes: int = 0
    lost_flush_timeout: int = 0
    per_crash: list[CrashLoss] = field(default_factory=list)
    lookups: LookupTotals | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _status_name(status: Any) -> str:
    return str(getattr(status, "value", status))


def charge_to_crashes(lost: Mapping[str, AckLike], crashes: Sequence[CycleLike],
                      record_size: int) -> tuple[list[CrashLoss], list[str]]:
    """Charge each lost key to the first crash whose restart completed after its acknowledgement (a crash that
    never restarted counts as restarting at the end of time); keys acknowledged after the last restart are
    returned apart (they cannot have been lost to a crash)."""
    ordered = sorted(crashes, key=lambda c: c.fault_ns)
    losses = {c.cycle: CrashLoss(c.cycle, window_bytes=c.window_bytes, flushed_offset=c.flushed_offset)
              for c in ordered}
    after_last: list[str] = []
    times = [c.restored_ns if c.restored_ns is not None else 2**63 for c in ordered]
    for key, ack in lost.items():
        i = bisect.bisect_left(times, ack.end_ns)
        if i >= len(ordered):
            after_last.append(key)
            continue
        c = ordered[i]
        cl = losses[c.cycle]
        cl.lost += 1
        cl.lost_log_bytes += record_size
        if ack.commit_log_offset >= 0:
            if cl.min_lost_offset < 0 or ack.commit_log_offset < cl.min_lost_offset:
                cl.min_lost_offset = ack.commit_log_offset
            if c.flushed_offset >= 0 and ack.commit_log_offset < c.flushed_offset:
                cl.below_flushed += 1
    return [losses[c.cycle] for c in ordered], sorted(after_last)


def evaluate(fault: str, flush: str, check: CheckLike | None, cycles: Sequence[CycleLike],
             lost: Mapping[str, AckLike], absent: Mapping[str, AckLike], record_size: int, body_size: int, *,
             corrupted: int = 0, unreachable: int = 0, drain_complete: bool = True,
             drain_problems: Sequence[str] = (), error: str | None = None,
             lookups: Sequence[LookupCheck] = (), flushed_reported: bool = True) -> Verdict:
    """Judge one experiment. ``fault`` is a FaultName value, ``flush`` SYNC_FLUSH or ASYNC_FLUSH; ``lost`` the
    acknowledged keys never delivered, ``absent`` those not in the broker at the end (rule 3)."""
    v: list[str] = []
    if error:
        v.append(f"experiment error: {error}")
    if check is None:
        v.append("no checker result")
    else:
        if check.unexpected:
            v.append(f"{check.unexpected} unexpected deliveries (never sent, or corrupted)")
        if check.lost != len(lost):
            v.append(f"accounting disagrees: checker lost {check.lost}, chaos lost {len(lost)}")
    if corrupted:
        v.append(f"{corrupted} corrupted deliveries (body does not match its key)")
    if unreachable:
        v.append(f"{unreachable} acknowledged messages are intact in the commit log but unreachable through their "
                 f"consume queue")
    for c in cycles:
        if not c.ok:
            v.append(f"{c.kind} cycle {c.cycle}: {c.error or 'did not recover'}")
    power_loss = fault.startswith("power_loss")
    # The loss rules judge every acknowledged message that is gone: never delivered, or not in the broker.
    absent = {**lost, **absent}
    crash_cycles = [c for c in cycles if c.cycle >= 0 and c.kind in ("kill9", "power_loss", "power_loss_torn")]
    if fault == "kill9":
        for c in crash_cycles:
            if c.recovered_offset >= 0 and c.written_offset >= 0 and c.recovered_offset < c.written_offset:
                v.append(f"kill9 cycle {c.cycle}: the log recovered to {c.recovered_offset}, before the written "
                         f"offset {c.written_offset} sampled before the kill")
            # No damage is injected by a kill: the only thing recovery may cut (and quarantine) is the one
            # record being written when the process died. Intact records cut, or more than one record's
            # bytes, mean the store itself damaged its log.
            if c.quarantined_intact_records > 0 or c.quarantined_bytes > record_size:
                v.append(f"kill9 cycle {c.cycle}: recovery quarantined {c.quarantined_bytes} bytes "
                         f"({c.quarantined_intact_records} intact records) though no damage was injected")
    if not drain_complete:
        # Rule 8: without a final drain, "not delivered yet" cannot be told from "gone": the experiment is
        # incomplete, and what its consumer had not received is counted, never called loss.
        v.append(f"{INCOMPLETE}: not drained ({'; '.join(drain_problems) or 'no drain'}); {len(absent)} "
                 f"acknowledged messages not seen by a consumer were not judged")
        offsets = [a.commit_log_offset for a in absent.values()]
        return Verdict(ok=False, violations=v, complete=False, corrupted=corrupted, unreachable=unreachable,
                       absent=len(absent), absent_offsets=(min(offsets), max(offsets)) if offsets else None)
    flush_timeouts = {k for k, a in absent.items() if _status_name(a.status) == FLUSH_TIMEOUT_STATUS}
    per_crash: list[CrashLoss] = []
    lost_log_bytes = 0
    if power_loss:
        per_crash, after_last = charge_to_crashes(absent, crash_cycles, record_size)
        lost_log_bytes = sum(c.lost_log_bytes for c in per_crash)
        if after_last:
            v.append(f"{len(after_last)} acknowledged messages missing with no crash after them "
                     f"(e.g. {after_last[:3]})")
    if flush == "SYNC_FLUSH":
        counted = len(absent) - (len(flush_timeouts) if power_loss else 0)
        if counted > 0:
            v.append(f"{counted} acknowledged messages missing from the broker under SYNC_FLUSH ({fault})")
    elif not power_loss:
        if absent:
            v.append(f"{len(absent)} acknowledged messages missing from the broker under ASYNC_FLUSH ({fault}); "
                     f"the page cache survives the process")
    else:
        for cl in per_crash:
            if cl.below_flushed:
                v.append(f"crash {cl.cycle}: {cl.below_flushed} lost messages lay before the flushed offset "
                         f"{cl.flushed_offset}")
            if cl.window_bytes < 0 and not flushed_reported:
                continue  # nothing to hold the loss to (rule 3, last paragraph)
            if cl.lost and (cl.window_bytes < 0 or cl.lost_log_bytes > cl.window_bytes):
                v.append(f"crash {cl.cycle}: lost {cl.lost_log_bytes} commit-log bytes ({cl.lost} messages), "
                         f"more than the unflushed window {cl.window_bytes}")
    looked = total(lookups, absent) if lookups else None
    if looked is not None:
        if looked.missed_total:
            missed = ", ".join(f"{n} by {way}" for way, n in looked.missed.items() if n)
            v.append(f"acknowledged messages still in the broker not found after recovery: {missed} "
                     f"(e.g. {looked.examples[:3]})")
        v.extend(f"lookup probe failed: {e}" for e in looked.errors)
    offsets = [a.commit_log_offset for a in absent.values()]
    return Verdict(ok=not v, violations=v, corrupted=corrupted, unreachable=unreachable, absent=len(absent),
                   absent_offsets=(min(offsets), max(offsets)) if offsets else None,
                   vanished=sum(1 for k in absent if k not in lost), absent_body_bytes=len(absent) * body_size,
                   lost_log_bytes=lost_log_bytes, lost_flush_timeout=len(flush_timeouts), per_crash=per_crash,
                   lookups=looked)
