"""This module owns the verdict of a replication experiment (chaos/replication.py): a broker group lost its master
(kill -9 for good, or kill -9 and its store deleted) and the topic was drained from the slave. Pure: figures in,
verdict out.

What each mode promises (CommitLog.handleHA, 4.9.8):

- SYNC_MASTER answers SEND_OK only after a slave acknowledged the record (HAService.GroupTransferService), so
  every key with a SEND_OK must be on the slave: ``lost_promised`` (the checker's, over the events) and
  ``absent_promised`` (acknowledged with SEND_OK, not found by the drain from the slave) must both be 0. A
  FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE answer promises nothing beyond the master, whose loss is allowed.
- ASYNC_MASTER answers SEND_OK once the master has the record; the slave trails by the replication lag. Loss
  is allowed and reported: the lag at the crash, and the share of acknowledged messages the slave lacks.

When the master lives on (the slave was killed or paused: ``master_alive``) the drain reads the master, and
every acknowledged send must be there whatever its answer: the master stores the message in every case.

A master that lost power and came back on its crashed image may recover to an end behind the slave's (the
slave had bytes only the master's page cache held). 4.9.8's master then resumes the transfer at the slave's
reported offset (HAConnection.WriteSocketService) and counts that offset as acknowledged
(GroupTransferService), so the two logs hold different records between the master's recovered end and the
slave's, the slave's next frames start mid-record, and a SYNC_MASTER's SEND_OK for a record in that range is
not backed by the slave. The reference broker does the same, deliberately (it replicates 4.9.8's protocol). A
run with such a cycle (``diverged`` > 0) reports the loss that follows as ``findings`` (docs/findings.md), not as
violations: the promise it would break is one neither broker makes after diverged logs.

In both modes the slave's log is a byte copy of the master's, so a key whose acknowledged commit-log offset
lies below the slave's end must be there: a key absent below it is a violation (the slave holds the bytes but
does not serve them), as are corrupted bodies, unexpected keys, an incomplete drain and a fault that did not run.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from reference_broker.client import SendStatus


class ReplicationMode(enum.StrEnum):
    SYNC = "SYNC_MASTER"
    ASYNC = "ASYNC_MASTER"

    @property
    def short(self) -> str:
        return "sync" if self is ReplicationMode.SYNC else "async"

    @classmethod
    def parse(cls, text: str) -> ReplicationMode:
        t = text.strip().upper()
        for m in cls:
            if t in (m.value, m.short.upper()):
                return m
        raise ValueError(f"replication mode {text!r}: expected sync or async")


class AckLike(Protocol):
    @property
    def commit_log_offset(self) -> int: ...

    @property
    def status(self) -> SendStatus: ...


class CheckLike(Protocol):
    @property
    def lost(self) -> int: ...

    @property
    def lost_promised(self) -> int: ...

    @property
    def acked_master_only(self) -> int: ...

    @property
    def unexpected(self) -> int: ...


@dataclass
class ReplicationVerdict:
    ok: bool
    mode: str
    acknowledged: int  # keys the producer heard an answer with a SendResult for
    absent: int  # acknowledged, not on the slave at the end
    absent_promised: int  # of those, acknowledged with SEND_OK
    absent_master_only: int  # of those, acknowledged only with FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE
    absent_below_slave_end: int  # of those, at an offset the slave's log had reached
    lost_share: float  # absent / acknowledged
    lag_bytes: int  # master's max offset - slave's, sampled just before the final fault (-1: unknown)
    unreplicated_bytes: int  # master's written end at the crash - the slave's end once settled (-1: unknown)
    diverged: int = 0  # master_power_loss: cycles whose recovered master was behind the slave
    cleaned: int = 0  # partitions: acknowledged keys below the master's min offset, deleted by disk-space cleaning
    violations: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)  # what follows from diverged logs (see the module doc)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def judge(mode: ReplicationMode, check: CheckLike | None, acks: Mapping[str, AckLike], drained: set[str],
          slave_end: int, lag_bytes: int, unreplicated_bytes: int, *, corrupted: int = 0,
          drain_complete: bool = True, drain_problems: Sequence[str] = (), cycle_errors: Sequence[str] = (),
          error: str | None = None, master_alive: bool = False, diverged: int = 0) -> ReplicationVerdict:
    absent = {k: a for k, a in acks.items() if k not in drained}
    promised = sorted(k for k, a in absent.items() if a.status is SendStatus.SEND_OK)
    master_only = sorted(k for k, a in absent.items()
                         if a.status in (SendStatus.FLUSH_SLAVE_TIMEOUT, SendStatus.SLAVE_NOT_AVAILABLE))
    below = sorted(k for k, a in absent.items() if 0 <= a.commit_log_offset < slave_end)
    v = ReplicationVerdict(ok=True, mode=mode.value, acknowledged=len(acks), absent=len(absent),
                           absent_promised=len(promised), absent_master_only=len(master_only),
                           absent_below_slave_end=len(below),
                           lost_share=round(len(absent) / len(acks), 6) if acks else 0.0,
                           lag_bytes=lag_bytes, unreplicated_bytes=unreplicated_bytes, diverged=diverged,
                           examples={"absent_promised": promised[:10], "absent_master_only": master_only[:10],
                                     "absent_below_slave_end": below[:10]})
    out = v.violations
    out += run_violations(error, cycle_errors, check)
    out += readback_violations("slave", corrupted, drain_complete, drain_problems)
    # Loss: a violation, or a finding once the logs diverged.
    out = v.findings if diverged else v.violations
    if check is not None and mode is ReplicationMode.SYNC and check.lost_promised:
        out.append(f"{check.lost_promised} keys acknowledged SEND_OK by a SYNC_MASTER were never delivered")
    if mode is ReplicationMode.SYNC and promised:
        out.append(f"{len(promised)} keys acknowledged SEND_OK by a SYNC_MASTER are not on the slave "
                   f"(e.g. {', '.join(promised[:3])})")
    if master_alive and absent:
        out.append(f"{len(absent)} acknowledged keys are absent from the master, which lived on "
                   f"(e.g. {', '.join(sorted(absent)[:3])})")
    elif below:
        out.append(f"{len(below)} acknowledged keys are absent though the slave's log reached their offset "
                   f"(e.g. {', '.join(below[:3])})")
    if diverged:
        v.findings.insert(0, f"in {diverged} cycle(s) the restarted master recovered behind the slave: the logs "
                             "diverged (4.9.8 HAConnection resumes at the slave's offset)")
    v.ok = not v.violations
    return v


def run_violations(error: str | None, cycle_errors: Sequence[str], check: CheckLike | None) -> list[str]:
    """What fails any replication experiment before its figures are read: it failed, a fault did not run, the
    checker found no result or keys nobody sent."""
    out = [] if error is None else [f"the experiment failed: {error}"]
    out += [f"fault: {e}" for e in cycle_errors]
    if check is None:
        out.append("no check result")
    elif check.unexpected:
        out.append(f"{check.unexpected} keys received that were never sent")
    return out


def readback_violations(source: str, corrupted: int, drain_complete: bool, drain_problems: Sequence[str]) -> list[str]:
    """What fails the read-back from ``source`` (the broker drained): corrupted bodies, an incomplete drain."""
    out = [f"{corrupted} bodies read back corrupted"] if corrupted else []
    if not drain_complete:
        out.append(f"the drain from the {source} did not complete: " + "; ".join(drain_problems[:3]))
    return out
