"""The report of an offline store check (``store/check.py``): what was checked, what is wrong, and how to print it.

Pure data and formatting, no I/O: ``check.py`` fills a ``CheckReport`` while it reads the store, and the CLI
(``tools/admin_cli.py``, ``admin checkStore``) prints ``render_text`` or ``to_json`` and exits with
``exit_code``.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final

MAX_PER_KIND: Final = 50  # problems listed per kind; the totals count them all


class ProblemKind(enum.StrEnum):
    """What is wrong; one list (capped) and one total per kind."""

    NOT_A_STORE = "not-a-store"  # the directory is missing, or holds no commitlog/
    UNREADABLE = "unreadable"  # a file that cannot be opened or mapped
    LOG_FILES = "commitlog-files"  # names not contiguous, a size that differs, a file missing from the middle
    LOG_RECORD = "commitlog-record"  # a record that does not decode, or whose CRC does not match
    LOG_TAIL = "commitlog-tail"  # bytes after the end of the data that are not zeros; a master's log that ends
    # inside a record after a clean stop (a torn tail, which recovery would cut)
    CQ_FILES = "consumequeue-files"  # a queue's files: names, sizes, zeros in the middle
    CQ_UNIT = "consumequeue-unit"  # a unit that names no record of its queue, the wrong one, or out of order
    CQ_INCOMPLETE = "consumequeue-incomplete"  # records of a queue that no unit covers
    INDEX_FILE = "index-file"  # an index file whose layout or header does not add up
    INDEX_ENTRY = "index-entry"  # an entry whose record does not carry a key of that hash
    CHECKPOINT = "checkpoint"  # a checkpoint time or offset past the data


class Outcome(enum.IntEnum):
    """The exit code of ``admin checkStore``."""

    CLEAN = 0
    PROBLEMS = 1
    NOT_A_STORE = 2  # or unreadable: nothing could be judged


@dataclass(frozen=True, slots=True)
class Problem:
    kind: ProblemKind
    file: str  # relative to the store root
    offset: int  # within the file; -1 when the problem is the file as a whole
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "file": self.file, "offset": self.offset, "reason": self.reason}

    def line(self) -> str:
        where = self.file if self.offset < 0 else f"{self.file} @ {self.offset}"
        return f"{where}: {self.reason}"


@dataclass
class CheckReport:
    root: str
    max_per_kind: int = MAX_PER_KIND
    clean_stop: bool = True  # no ``abort`` file: the checks that need a clean stop ran in full
    # A slave's store (checkStore --slave): its log may end inside a record its master had not sent whole.
    slave: bool = False
    counts: Counter[str] = field(default_factory=Counter)
    problems: list[Problem] = field(default_factory=list)
    totals: Counter[ProblemKind] = field(default_factory=Counter)
    warnings: list[str] = field(default_factory=list)
    relaxed: list[str] = field(default_factory=list)  # checks relaxed because the broker did not stop cleanly
    seconds: float = 0.0
    log_bytes: int = 0  # commit-log bytes read

    def add(self, kind: ProblemKind, file: str, offset: int, reason: str) -> None:
        self.totals[kind] += 1
        if self.totals[kind] <= self.max_per_kind:
            self.problems.append(Problem(kind, file, offset, reason))

    def warn(self, text: str) -> None:
        if len(self.warnings) < self.max_per_kind:
            self.warnings.append(text)
        self.counts["warnings"] += 1

    @property
    def outcome(self) -> Outcome:
        if self.totals[ProblemKind.NOT_A_STORE] or self.totals[ProblemKind.UNREADABLE]:
            return Outcome.NOT_A_STORE
        return Outcome.PROBLEMS if sum(self.totals.values()) else Outcome.CLEAN

    @property
    def exit_code(self) -> int:
        return int(self.outcome)

    @property
    def mb_per_s(self) -> float:
        return self.log_bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "outcome": self.outcome.name.lower(),
            "exit_code": self.exit_code,
            "clean_stop": self.clean_stop,
            "relaxed": list(self.relaxed),
            "counts": dict(sorted(self.counts.items())),
            "problem_totals": {k.value: n for k, n in sorted(self.totals.items()) if n},
            "problems": [p.to_json() for p in self.problems],
            "warnings": list(self.warnings),
            "seconds": round(self.seconds, 3),
            "commitlog_mb_per_s": round(self.mb_per_s, 1),
        }

    def summary(self) -> dict[str, Any]:
        """A short form for run records (chaos.json): outcome, counts, totals, the first few problems."""
        return {"outcome": self.outcome.name.lower(), "exit_code": self.exit_code, "clean_stop": self.clean_stop,
                "counts": dict(sorted(self.counts.items())),
                "problem_totals": {k.value: n for k, n in sorted(self.totals.items()) if n},
                "problems": [p.line() for p in self.problems[:10]], "seconds": round(self.seconds, 3)}


_COUNT_LABELS: Final = (
    ("commitlog_files", "commit-log files"), ("commitlog_records", "commit-log records"),
    ("commitlog_bytes", "commit-log bytes of data"), ("cq_queues", "consume queues"),
    ("cq_files", "consume-queue files"),
    ("cq_units", "consume-queue units checked"), ("cq_units_expired", "consume-queue units below the log (expired)"),
    ("cq_units_pre_blank", "consume-queue pre-blank units"), ("index_files", "index files"),
    ("index_entries", "index entries checked"), ("index_entries_expired", "index entries below the log (expired)"),
)


def render_text(r: CheckReport) -> list[str]:
    """The human summary, one line per element (plain text, like the other admin commands)."""
    out = [f"checkStore {r.root}"]
    if not r.clean_stop:
        out.append("WARNING: the store was not cleanly stopped (abort file present); relaxed: "
                   + "; ".join(r.relaxed))
    width = max(len(label) for _, label in _COUNT_LABELS)
    for key, label in _COUNT_LABELS:
        out.append(f"  {label.ljust(width)} : {r.counts.get(key, 0):,}")
    out.append(f"  {'time'.ljust(width)} : {r.seconds:.2f} s ({r.mb_per_s:.0f} MB/s of commit log)")
    for w in r.warnings:
        out.append(f"warning: {w}")
    if r.counts.get("warnings", 0) > len(r.warnings):
        out.append(f"warning: ... {r.counts['warnings'] - len(r.warnings)} more warnings")
    for kind in ProblemKind:
        n = r.totals.get(kind, 0)
        if not n:
            continue
        out.append(f"{kind.value}: {n} problem{'s' if n != 1 else ''}")
        out.extend(f"  {p.line()}" for p in r.problems if p.kind is kind)
        if n > r.max_per_kind:
            out.append(f"  ... and {n - r.max_per_kind} more")
    verdict = {Outcome.CLEAN: "CLEAN: no problems found", Outcome.PROBLEMS: f"PROBLEMS: {sum(r.totals.values())} found",
               Outcome.NOT_A_STORE: "NOT A STORE or unreadable"}[r.outcome]
    out.append(verdict)
    return out
