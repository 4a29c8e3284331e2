"""This module owns what a fuzz run reports: its violations of the invariant, its figures (frames tried,
response codes seen, the probe's worst stall), the JSON written for BENCHMARKS.md, and the offline store
check it runs after a SIGTERM and after a kill -9 (``python -m reference_broker admin checkStore DIR``, when
this checkout has that command)."""

from __future__ import annotations

import enum
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from harness.store_check import run_check_store
from reference_broker.remoting.codes import ResponseCode


class ViolationKind(enum.Enum):
    NO_RESPONSE = "no_response"  # a request got no answer in time
    BAD_RESPONSE = "bad_response"  # not a response frame, not a RocketMQ code, or bytes the codec refuses
    DROPPED = "dropped"  # the broker closed a connection where an answer was due
    NOT_CLOSED = "not_closed"  # a malformed frame did not close the connection
    HANDLER_RAISED = "handler_raised"  # SYSTEM_ERROR from the server's safety net: a processor raised
    BROKER_DIED = "broker_died"
    PROBE_STALL = "probe_stall"  # a probe round took longer than the limit
    PROBE_FAILED = "probe_failed"  # a probe send or pull failed
    ACKED_MISSING = "acked_missing"  # an acknowledged probe message is not pullable / findable
    STORE_CHECK = "store_check"  # the offline store check failed
    RESTART_FAILED = "restart_failed"


@dataclass(frozen=True)
class Violation:
    kind: ViolationKind
    detail: str
    case: int | None = None
    request: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "case": self.case, "detail": self.detail, "request": self.request}


class StoreCheck(enum.Enum):
    PASSED = "passed"
    FAILED = "failed"


def check_store(store_root: Path, timeout_s: float = 600.0) -> tuple[StoreCheck, str]:
    """``admin checkStore`` on the store, as a user runs it (harness/store_check.py)."""
    summary = run_check_store(store_root, timeout_s=timeout_s)
    records = summary["counts"].get("commitlog_records", 0)
    detail = f"exit {summary['exit_code']}: {summary['outcome']}, {records:,} records"
    if summary["problems"]:
        detail += "; " + "; ".join(summary["problems"][:5])
    return (StoreCheck.PASSED if summary["exit_code"] == 0 else StoreCheck.FAILED), detail


# RemotingServer's safety net answers an unexpected exception with its simple description ("ValueError: ...",
# "error: ..." for struct.error); the processors' own refusals read differently ("bad request: ...").
_RAISED: Final = re.compile(r"^(\w*(Error|Exception|Warning|Exit)|error)(: |$)")


def looks_raised(code: int, remark: str | None) -> bool:
    return code == ResponseCode.SYSTEM_ERROR and remark is not None and bool(_RAISED.match(remark))


def code_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return str(code)


@dataclass
class FuzzReport:
    seed: int
    seconds: float
    skip_known: bool
    cases: int = 0
    frames_tried: int = 0
    case_kinds: Counter[str] = field(default_factory=Counter)
    request_codes: Counter[str] = field(default_factory=Counter)
    codes_seen: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)  # closed as due, nothing due, parked held pulls...
    probe: dict[str, Any] = field(default_factory=dict)
    store_checks: list[dict[str, str]] = field(default_factory=list)
    broker_log: dict[str, Any] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)
    violation_counts: Counter[str] = field(default_factory=Counter)
    elapsed_s: float = 0.0

    MAX_KEPT: Final = 50  # violations of each kind kept in full; the rest are only counted

    def violate(self, kind: ViolationKind, detail: str, case: int | None = None, request: str = "") -> None:
        self.violation_counts[kind.value] += 1
        if self.violation_counts[kind.value] <= self.MAX_KEPT:
            self.violations.append(Violation(kind, detail, case, request))

    @property
    def ok(self) -> bool:
        return not self.violation_counts

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed, "seconds": self.seconds, "skip_known": self.skip_known, "ok": self.ok,
            "elapsed_s": round(self.elapsed_s, 1), "cases": self.cases, "frames_tried": self.frames_tried,
            "case_kinds": dict(self.case_kinds), "request_codes": dict(self.request_codes.most_common()),
            "codes_seen": dict(self.codes_seen.most_common()), "outcomes": dict(self.outcomes),
            "probe": self.probe, "store_checks": self.store_checks, "broker_log": self.broker_log,
            "violation_counts": dict(self.violation_counts),
            "violations": [v.to_json() for v in self.violations],
        }

    def write_json(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")

    def summary(self) -> str:
        probe = self.probe
        out = [
            f"fuzz seed {self.seed}: {self.cases:,} cases, {self.frames_tried:,} frames in {self.elapsed_s:.0f} s"
            + (" (known defects skipped)" if self.skip_known else ""),
            "  case kinds: " + ", ".join(f"{k} {n:,}" for k, n in self.case_kinds.most_common()),
            "  codes seen: " + ", ".join(f"{k} {n:,}" for k, n in self.codes_seen.most_common()),
            "  outcomes:   " + ", ".join(f"{k} {n:,}" for k, n in self.outcomes.most_common()),
            f"  probe: {probe.get('rounds', 0):,} rounds, worst stall {probe.get('worst_stall_ms', 0):.0f} ms"
            f" at {probe.get('worst_at_s', 0):.0f} s, longest without an answer"
            f" {probe.get('longest_unanswered_ms', 0):.0f} ms, {probe.get('over_limit', 0)} over the limit,"
            f" {probe.get('acked', 0):,} acknowledged",
        ]
        for check in self.store_checks:
            out.append(f"  store check {check['when']}: {check['result']} {check['detail'][:200]}")
        if self.broker_log:
            out.append(f"  broker log: {self.broker_log}")
        if self.ok:
            out.append("verdict: OK (every request answered, broker alive, probe in time, nothing lost)")
        else:
            out.append("verdict: VIOLATIONS " + ", ".join(f"{k} {n}" for k, n in self.violation_counts.items()))
            for v in self.violations[:25]:
                where = f" (replay: --seed {self.seed} --case {v.case})" if v.case is not None else ""
                out.append(f"  - {v.kind.value}{where}: {v.detail[:300]}")
                if v.request:
                    out.append(f"      request: {v.request[:400]}")
        return "\n".join(out)
