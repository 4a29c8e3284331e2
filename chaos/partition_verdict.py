"""This module owns the verdict of a partition experiment (chaos/replication_partition.py): a broker group under
load was cut (master <-> slave, or clients <-> master) and healed, and the topic was read back from the master,
which stayed alive throughout. Pure: figures in, verdict out (the same ReplicationVerdict the master-loss faults
get, so the matrix's table and the reports read both alike).

What must hold after the heal (issue 18, "Partitions"):

- no acknowledged message lost: every key the producer heard an answer for — SEND_OK, FLUSH_SLAVE_TIMEOUT or
  SLAVE_NOT_AVAILABLE alike, since the master stores the message in every case (CommitLog.handleHA, 4.9.8) — is
  in the master's log;
- the slave caught up: once the group settled its log ends where the master's does;
- a SYNC_MASTER cut from its slave promises nothing it cannot keep: a record the master wrote after the cut
  began (at or beyond its end sampled just after the rules went in) cannot have reached the slave before the
  heal, so an answer heard before the heal must not be SEND_OK;
- keys below the master's commit-log min offset once the run is over were deleted with their files by the
  store's cleaning (past diskSpaceCleanForciblyRatio, 85 % of the disk, 4.9.8's CleanCommitLogService deletes
  the oldest files at once, whatever their age: a partition cannot move the start of the log), so they are
  counted apart (``cleaned``), not as lost;
- duplicates are counted, not judged: a send whose answer was lost in the cut is retried by the producer and
  may be stored twice (at-least-once), which the drain sees as a second copy of its key.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from chaos.replication_verdict import (
    AckLike,
    CheckLike,
    ReplicationMode,
    ReplicationVerdict,
    readback_violations,
    run_violations,
)
from reference_broker.client import SendStatus


@dataclass(frozen=True)
class CutWindow:
    """One cut: when the rules were in force (wall-clock ns, the run record's clock), and the master's commit-log
    end sampled just after they went in (-1: unknown, as when the clients were the side cut off)."""

    cut_ns: int
    healed_ns: int
    master_end: int = -1
    lag_bytes: int = -1  # the master's end minus the slave's just before the cut


class TimedAck(AckLike, Protocol):
    """An acknowledged send with its end time (chaos.load.Ack)."""

    @property
    def end_ns(self) -> int: ...


def answers_during(acks: Iterable[TimedAck], errors: Iterable[tuple[int, int, str]],
                   window: CutWindow) -> dict[str, int]:
    """The answers the producer heard while the cut was in force: SendStatus names for results, ``error <code>``
    for failures (the workload's recent errors: ``(end_ns, code, remark)``)."""
    out: Counter[str] = Counter()
    for a in acks:
        if window.cut_ns <= a.end_ns <= window.healed_ns:
            out[a.status.value] += 1
    for end_ns, code, _remark in errors:
        if window.cut_ns <= end_ns <= window.healed_ns:
            out[f"error {code}"] += 1
    return dict(sorted(out.items()))


def promised_while_cut(acks: Mapping[str, TimedAck], windows: Sequence[CutWindow]) -> list[str]:
    """Keys answered SEND_OK before a master <-> slave cut healed for a record the master wrote after the cut
    began: a slave that cannot be reached cannot have acknowledged it."""
    return sorted(k for k, a in acks.items()
                  if a.status is SendStatus.SEND_OK and a.commit_log_offset >= 0
                  and any(0 <= w.master_end <= a.commit_log_offset and a.end_ns < w.healed_ns for w in windows))


def judge_partition(mode: ReplicationMode, check: CheckLike | None, acks: Mapping[str, AckLike], drained: set[str],
                    master_end: int, slave_end: int, lag_bytes: int, *, min_offset: int = 0,
                    promised_cut: Sequence[str] = (),
                    corrupted: int = 0, drain_complete: bool = True, drain_problems: Sequence[str] = (),
                    cycle_errors: Sequence[str] = (), error: str | None = None) -> ReplicationVerdict:
    """``drained``: the keys read back from the master; ``master_end``/``slave_end``: their logs' ends once the
    group settled (-1: unknown); ``lag_bytes``: the lag when the last cut began; ``min_offset``: the master's
    commit-log min offset after the drain."""
    missing = {k: a for k, a in acks.items() if k not in drained}
    cleaned = sorted(k for k, a in missing.items() if 0 <= a.commit_log_offset < min_offset)
    absent = {k: a for k, a in missing.items() if not 0 <= a.commit_log_offset < min_offset}
    promised = sorted(k for k, a in absent.items() if a.status is SendStatus.SEND_OK)
    master_only = sorted(k for k, a in absent.items()
                         if a.status in (SendStatus.FLUSH_SLAVE_TIMEOUT, SendStatus.SLAVE_NOT_AVAILABLE))
    unreplicated = master_end - slave_end if master_end >= 0 and slave_end >= 0 else -1
    v = ReplicationVerdict(ok=True, mode=mode.value, acknowledged=len(acks), absent=len(absent),
                           absent_promised=len(promised), absent_master_only=len(master_only),
                           absent_below_slave_end=0,
                           lost_share=round(len(absent) / len(acks), 6) if acks else 0.0,
                           lag_bytes=lag_bytes, unreplicated_bytes=unreplicated, cleaned=len(cleaned),
                           examples={"absent": sorted(absent)[:10], "promised_while_cut": list(promised_cut[:10]),
                                     "cleaned": cleaned[:10]})
    out = v.violations
    out += run_violations(error, cycle_errors, check)
    if absent:
        out.append(f"{len(absent)} acknowledged keys are not in the master's log after the heal "
                   f"(e.g. {', '.join(sorted(absent)[:3])})")
    if unreplicated > 0:
        out.append(f"the slave did not catch up after the heal: {unreplicated} bytes behind the master")
    elif unreplicated < 0:
        out.append("the settled ends of the master and the slave are unknown")
    if promised_cut and mode is ReplicationMode.SYNC:
        out.append(f"{len(promised_cut)} sends started during a master <-> slave cut were answered SEND_OK "
                   f"before the heal (e.g. {', '.join(promised_cut[:3])})")
    out += readback_violations("master", corrupted, drain_complete, drain_problems)
    v.ok = not out
    return v
