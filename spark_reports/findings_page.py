"""The page `OUT/findings.html`: findings about Apache RocketMQ, beside the claims.

Each behaviour of RocketMQ that an experiment or a differential test showed to lose, wedge, stall or differ
is a line in the runs directory's ``findings.jsonl`` (harness/records/findings.py). The page shows each finding once
(by its key): what was seen the last time, how often and when, on which broker version, the command that
reproduces it and the run record. No Spark here: the list is small. Lines that are not findings are listed
under the table rather than failing the page.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from harness.records.findings import Finding, read
from spark_reports.html_report import Page

PAGE: Final = "findings.html"


@dataclass
class Seen:
    """One finding's key, with its observations oldest first."""

    key: str
    observations: list[Finding] = field(default_factory=list)

    @property
    def last(self) -> Finding:
        return self.observations[-1]


def group(findings: list[Finding]) -> list[Seen]:
    """One ``Seen`` per key, most recently seen first."""
    by_key: dict[str, Seen] = {}
    for f in sorted(findings, key=lambda f: f.seen_at):
        by_key.setdefault(f.key, Seen(f.key)).observations.append(f)
    return sorted(by_key.values(), key=lambda s: s.last.seen_at, reverse=True)


def write_findings_page(out_dir: Path, runs_dir: Path | None) -> tuple[Path, int]:
    """Write OUT/findings.html from ``runs_dir``'s findings.jsonl; returns the page and how many findings."""
    found, problems = read(runs_dir) if runs_dir is not None else ([], [])
    seen = group(found)
    page = Page("Findings about Apache RocketMQ")
    page.paragraph(
        "Behaviours of RocketMQ that the lab's experiments and differential tests showed to lose, wedge, stall or "
        "differ from the reference broker, each with the command that shows it again. A RocketMQ cell of the "
        "chaos matrix is judged by the same rules as the reference broker's (a loss its flush mode allows is no "
        "finding); a violation is written here instead of failing the gate. The project's docs/findings.md "
        "explains each finding found so far in prose.", note=True)
    if runs_dir is None:
        page.paragraph("No runs directory given: nothing to read.")
    elif not seen:
        page.paragraph(f"None recorded in {runs_dir}.")
    else:
        page.table(["finding", "kind", "broker", "seen", "first seen", "last seen", "what was seen last",
                    "reproduce", "run record"],
                   [(s.last.title, s.last.kind.value, s.last.broker, len(s.observations), s.observations[0].seen_at,
                     s.last.seen_at, s.last.detail, s.last.reproduce, s.last.run_dir or "–") for s in seen],
                   text_columns=9)
    if problems:
        page.heading("Lines that are not findings")
        for problem in problems[:50]:
            page.paragraph(problem, note=True)
    path = out_dir / PAGE
    out_dir.mkdir(parents=True, exist_ok=True)
    page.write(path)
    return path, len(seen)
