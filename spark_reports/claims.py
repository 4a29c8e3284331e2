"""This module owns the seed claims the lab tests and the findings contract between the reports and the front page.

Each report that holds evidence for a claim writes ``OUT/<report>/findings.json``: a list of findings, one per
claim it can judge from the runs it read. The front page (``spark_reports.site``) reads every report's findings
and shows one row per claim; a claim no report judged is "not measured yet". A report judges a claim only from
run records (never from constants), states the figure it measured, the runs it used and why it decided.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

FINDINGS_FILE: Final = "findings.json"


class ClaimId(StrEnum):
    SYNC_NO_LOSS = "sync-no-loss"
    ASYNC_KILL9_NO_LOSS = "async-kill9-no-loss"
    ASYNC_POWER_LOSS_TAIL = "async-power-loss-tail"
    RECOVERY_CHECKPOINT = "recovery-checkpoint"
    DISK_FULL_PROTECTION = "disk-full-protection"
    QUEUES_10K = "queues-10k"
    COLD_BACKLOG_READ = "cold-backlog-read"
    PAGE_CACHE_CAPACITY = "page-cache-capacity"
    OFFSET_616_YEARS = "offset-616-years"
    REPLICATION_MASTER_LOSS = "replication-master-loss"
    PEER_ASYNC_VS_NATS = "peer-async-vs-nats"
    PEER_SYNC_VS_RABBITMQ = "peer-sync-vs-rabbitmq"


class Verdict(StrEnum):
    HELD = "held"
    NOT_HELD = "not held"
    NOT_MEASURED = "not measured yet"
    # Measured, but the runs hold too little of what the claim is about to judge it (e.g. too few promised sends).
    INCONCLUSIVE = "inconclusive"
    # Judged run by run, the runs disagree: shown with the runs instead of flipping with the pooled figure.
    UNSETTLED = "unsettled"


@dataclass(frozen=True)
class Claim:
    id: ClaimId
    text: str  # the claim as the seed makes it
    source: str  # where docs/claims.md paraphrases the seed's claim
    experiment: str  # the command(s) that produce the runs which test it


# The seed documents' claims, in the order of the front page (docs/claims.md).
CLAIMS: Final[tuple[Claim, ...]] = (
    Claim(ClaimId.SYNC_NO_LOSS, "SYNC_FLUSH loses no acknowledged message on abnormal shutdown "
          "(kill -9, OS crash, power loss).", "docs/claims.md#sync-no-loss",
          "python -m chaos matrix --flush sync --faults kill9,power_loss"),
    Claim(ClaimId.ASYNC_KILL9_NO_LOSS, "ASYNC_FLUSH loses nothing on kill -9: the data is in the page cache.",
          "docs/claims.md#async-kill9-no-loss", "python -m chaos matrix --flush async --faults kill9"),
    Claim(ClaimId.ASYNC_POWER_LOSS_TAIL, "ASYNC_FLUSH loses only the unflushed tail on power loss "
          "(\"tens of KB\").", "docs/claims.md#async-power-loss-tail",
          "python -m chaos matrix --flush async --faults power_loss"),
    Claim(ClaimId.RECOVERY_CHECKPOINT, "An abnormal restart recovers the consume queues from the checkpoint "
          "(only the tail is scanned); without the checkpoint a full scan is needed, and is slow.",
          "docs/claims.md#recovery-checkpoint", "python -m chaos recovery-bench"),
    Claim(ClaimId.DISK_FULL_PROTECTION, "With the disk above 90 % the broker refuses writes while reads go on, "
          "and accepts writes again once space is back.", "docs/claims.md#disk-full-protection",
          "python -m chaos disk-fill"),
    Claim(ClaimId.QUEUES_10K, "10,000+ queues per broker without write degradation.", "docs/claims.md#queues-10k",
          "locust -f scenarios/queues.py --headless -t 60s"),
    Claim(ClaimId.COLD_BACKLOG_READ, "Reading a cold backlog (from disk) is no worse than ~5,000 msg/s.",
          "docs/claims.md#cold-backlog-read", "locust -f scenarios/backlog.py --headless --cold"),
    Claim(ClaimId.PAGE_CACHE_CAPACITY, "RAM caches the backlog: 96 GB holds about 10^8 messages of 1 KiB.",
          "docs/claims.md#page-cache-capacity", "locust -f scenarios/backlog.py --headless"),
    Claim(ClaimId.OFFSET_616_YEARS, "A signed 64-bit commit-log offset overflows only after 616 years at 10^10 "
          "messages of 4 KiB a day.", "docs/claims.md#offset-616-years", "python -m spark_reports offset-overflow"),
    Claim(ClaimId.REPLICATION_MASTER_LOSS, "With synchronous double-write (SYNC_MASTER) no acknowledged message is "
          "lost when a master's disk is destroyed; with asynchronous replication (ASYNC_MASTER) about 99 % survive.",
          "docs/claims.md#replication-master-loss",
          "python -m chaos replication --replication sync,async --faults master_disk_destroyed"),
    # Issue 20's target, not a seed claim: where the reference broker stands against what users would pick instead.
    Claim(ClaimId.PEER_ASYNC_VS_NATS, "With ASYNC_FLUSH the reference broker is at or above NATS JetStream (both "
          "acknowledge from the page cache) in throughput, at equal or better p99 send latency.",
          "docs/claims.md#peer-async-vs-nats", "python -m harness compare --report OUT"),
    Claim(ClaimId.PEER_SYNC_VS_RABBITMQ, "With SYNC_FLUSH the reference broker is at or above RabbitMQ quorum queues "
          "(both confirm after fsync) in throughput, at equal or better p99 send latency.",
          "docs/claims.md#peer-sync-vs-rabbitmq", "python -m harness compare --report OUT"),
)
CLAIM_BY_ID: Final = {c.id: c for c in CLAIMS}

# The figure (a key of ``Finding.figures``) each claim's verdict turns on, and its unit: a claim judged over
# repeated runs shows this figure's spread (min–max over the runs) beside "held in k of n".
HEADLINE: Final[dict[ClaimId, tuple[str, str]]] = {
    ClaimId.SYNC_NO_LOSS: ("lost", "acknowledged lost"),
    ClaimId.ASYNC_KILL9_NO_LOSS: ("lost", "acknowledged lost"),
    ClaimId.ASYNC_POWER_LOSS_TAIL: ("window_max_bytes", "B unflushed at the worst crash"),
    ClaimId.RECOVERY_CHECKPOINT: ("checkpointed_growth", "× checkpointed kill -9 recovery, largest ÷ smallest log"),
    ClaimId.DISK_FULL_PROTECTION: ("refused", "sends refused while full"),
    ClaimId.QUEUES_10K: ("worst_rate_share", "× the fewest-queue phase's rate"),
    ClaimId.COLD_BACKLOG_READ: ("read_rate_msgs_per_s", "msg/s from disk"),
    ClaimId.PAGE_CACHE_CAPACITY: ("messages_in_96_gib", "messages of 1 KiB in 96 GiB"),
    ClaimId.OFFSET_616_YEARS: ("years_4k_1e10_per_day", "years"),
    ClaimId.REPLICATION_MASTER_LOSS: ("async_kept_share", "of ASYNC_MASTER's acknowledged kept"),
}

# Claims a single failing run decides: a lost acknowledged message, or a write accepted on a full disk, is
# evidence, not noise, so runs that disagree keep the pooled "not held" (with "held in k of n") instead of
# reading "unsettled". The timing claims (recovery, queues, cold reads) are the ones noise can flip.
ANY_RUN_DECIDES: Final = frozenset({ClaimId.SYNC_NO_LOSS, ClaimId.ASYNC_KILL9_NO_LOSS, ClaimId.ASYNC_POWER_LOSS_TAIL,
                                    ClaimId.DISK_FULL_PROTECTION, ClaimId.REPLICATION_MASTER_LOSS})

# Why one run is enough for a claim the main job does not repeat (harness/pipeline.py runs it once): shown on the
# page in place of a spread when a claim was judged from a single run.
ONE_RUN_SUFFICES: Final[dict[ClaimId, str]] = {
    ClaimId.SYNC_NO_LOSS: "every acknowledged message of every crash cycle is a trial, and one lost message "
                          "decides it: more runs add trials, not a second opinion",
    ClaimId.ASYNC_KILL9_NO_LOSS: "every acknowledged message of every kill -9 cycle is a trial, and one lost message "
                                 "decides it",
    ClaimId.ASYNC_POWER_LOSS_TAIL: "each crash cycle is a trial of the rule (loss within the unflushed window)",
    ClaimId.OFFSET_616_YEARS: "the seed's table is arithmetic, the same on every run; the measured peak only places "
                              "this machine on the chart",
    ClaimId.PAGE_CACHE_CAPACITY: "bytes per message follow the store's record format for a message size, not the "
                                 "machine's load",
    ClaimId.DISK_FULL_PROTECTION: "each fill cycle is a trial of refusing writes and accepting them again",
    ClaimId.REPLICATION_MASTER_LOSS: "judged from one SYNC_MASTER and one ASYNC_MASTER run; every acknowledged "
                                     "message is a trial",
}


@dataclass(frozen=True)
class Finding:
    """One report's judgement of one claim."""

    claim: ClaimId
    verdict: Verdict
    measured: str  # the figure measured on this machine, in words ("0 of 41,233 acknowledged lost")
    report: str  # the report whose page holds the evidence (its directory name under OUT)
    runs: tuple[str, ...] = ()  # run ids used
    detail: str = ""  # why this verdict (threshold, caveats)
    figures: dict[str, float] = field(default_factory=dict)  # machine-readable figures behind `measured`
    per_run: dict[str, str] = field(default_factory=dict)  # run id -> that run's own verdict (``settle``)
    per_run_figures: dict[str, float] = field(default_factory=dict)  # run id -> its HEADLINE figure (``settle``)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["claim"] = self.claim.value
        d["verdict"] = self.verdict.value
        d["runs"] = list(self.runs)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Finding:
        return cls(claim=ClaimId(d["claim"]), verdict=Verdict(d["verdict"]), measured=str(d["measured"]),
                   report=str(d["report"]), runs=tuple(str(r) for r in d.get("runs", ())),
                   detail=str(d.get("detail", "")),
                   figures={str(k): float(v) for k, v in dict(d.get("figures", {})).items()},
                   per_run={str(k): Verdict(v).value for k, v in dict(d.get("per_run", {})).items()},
                   per_run_figures={str(k): float(v) for k, v in dict(d.get("per_run_figures", {})).items()})

    def repeats(self) -> tuple[int, int]:
        """(k, n): held in k of the n runs judged one by one; a finding not judged run by run counts its runs as
        one judgement each with its own verdict when it has one run, else (0, 0)."""
        judged = [v for v in self.per_run.values() if v in (Verdict.HELD.value, Verdict.NOT_HELD.value)]
        if not judged and len(self.runs) == 1 and self.verdict in (Verdict.HELD, Verdict.NOT_HELD):
            return (1 if self.verdict is Verdict.HELD else 0), 1
        return sum(1 for v in judged if v == Verdict.HELD.value), len(judged)

    def spread(self) -> tuple[float, float] | None:
        """Min and max of the headline figure over the runs judged one by one (None without per-run figures)."""
        values = list(self.per_run_figures.values())
        if not values:
            key = HEADLINE.get(self.claim, ("", ""))[0]
            values = [self.figures[key]] if len(self.runs) == 1 and key in self.figures else []
        return (min(values), max(values)) if values else None


def settle(pooled: Finding, per_run: Mapping[str, Finding]) -> Finding:
    """A claim judged over repeated runs: ``pooled`` is the judgement over all of them, ``per_run`` each run's
    own. Runs that disagree (some held, some not) make the claim "unsettled", with the count, rather than let
    the pooled figure decide (except a claim in ``ANY_RUN_DECIDES``, where one failing run is evidence); runs that
    agree keep the pooled verdict, and the page says "held in k of n"."""
    verdicts = {rid: f.verdict for rid, f in per_run.items()}
    key = HEADLINE.get(pooled.claim, ("", ""))[0]
    figures = {rid: f.figures[key] for rid, f in per_run.items() if key in f.figures}
    judged = [v for v in verdicts.values() if v in (Verdict.HELD, Verdict.NOT_HELD)]
    held = sum(1 for v in judged if v is Verdict.HELD)
    verdict, measured = pooled.verdict, pooled.measured
    if len(judged) > 1 and 0 < held < len(judged) and pooled.claim not in ANY_RUN_DECIDES:
        verdict = Verdict.UNSETTLED
        measured = f"pooled over the runs, {measured}"
    detail = pooled.detail
    if len(verdicts) > 1:
        detail += " Run by run: " + ", ".join(f"{rid} {v.value}" for rid, v in sorted(verdicts.items())) + "."
    return replace(pooled, verdict=verdict, measured=measured, detail=detail,
                   per_run={rid: v.value for rid, v in verdicts.items()}, per_run_figures=figures)


def _figure(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 or value == int(value) else f"{value:,.3g}"


def repeats_text(finding: Finding, *, run_by_run: bool = True) -> str:
    """How the claim fared over repeated runs, in words: "held in k of n runs", the spread of its headline figure
    (min–max over the runs), each run's figure and verdict when they disagree, and why one run suffices when the
    claim was judged from one (``run_by_run=False`` leaves the run list out). Empty for a claim nothing measured."""
    if finding.verdict is Verdict.NOT_MEASURED:
        return ""
    k, n = finding.repeats()
    unit = HEADLINE.get(finding.claim, ("", ""))[1]
    spread = finding.spread()
    if n == 0:
        text = f"pooled over {len(finding.runs)} runs, not judged run by run" if finding.runs else "no run"
    else:
        text = f"held in {k} of {n} run{'s' if n != 1 else ''}"
    if spread is not None:
        lo, hi = spread
        text += (f"; {_figure(lo)} {unit}" if n <= 1 else f"; {_figure(lo)} {unit} in every run" if lo == hi
                 else f"; spread {_figure(lo)}–{_figure(hi)} {unit}")
    if n == 1:
        text += f"; one run: {ONE_RUN_SUFFICES.get(finding.claim, 'not repeated by the main job')}"
    elif n == 0 and finding.claim in ONE_RUN_SUFFICES:
        text += f": {ONE_RUN_SUFFICES[finding.claim]}"
    if finding.verdict is Verdict.UNSETTLED and run_by_run:
        runs = [f"{rid} {finding.per_run[rid]}" + (f" at {_figure(finding.per_run_figures[rid])}"
                                                   if rid in finding.per_run_figures else "")
                for rid in sorted(finding.per_run)]
        text += "; run by run: " + ", ".join(runs)
    return text


def settle_each(pooled: Sequence[Finding], judge: Callable[[str], Sequence[Finding]]) -> list[Finding]:
    """``settle`` for every finding of a report: ``judge(run_id)`` judges the report's claims from that run alone.
    A finding made from one run, or judged NOT_MEASURED, is kept as it is."""
    cache: dict[str, Sequence[Finding]] = {}
    out = []
    for finding in pooled:
        if len(finding.runs) < 2 or finding.verdict is Verdict.NOT_MEASURED:
            out.append(finding)
            continue
        per_run = {}
        for rid in finding.runs:
            if rid not in cache:
                cache[rid] = judge(rid)
            mine = [f for f in cache[rid] if f.claim == finding.claim]
            if mine:
                per_run[rid] = mine[0]
        out.append(settle(finding, per_run))
    return out


def write_findings(report_dir: Path, findings: list[Finding]) -> Path:
    """Write ``report_dir/findings.json`` (an empty list when the report could judge nothing)."""
    report_dir.mkdir(parents=True, exist_ok=True)
    path = report_dir / FINDINGS_FILE
    path.write_text(json.dumps([f.to_json() for f in findings], indent=2) + "\n")
    return path


def read_findings(out_dir: Path) -> list[Finding]:
    """Every finding under ``OUT/*/findings.json``; a malformed file raises ValueError naming it."""
    found: list[Finding] = []
    for path in sorted(out_dir.glob(f"*/{FINDINGS_FILE}")):
        try:
            items = json.loads(path.read_text())
            found.extend(Finding.from_json(item) for item in items)
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}: not a findings file: {exc}") from exc
    return found
