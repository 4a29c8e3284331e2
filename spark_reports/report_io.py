"""What every report job does at its edges: its output directory, the number cells of its tables, and its ending
(the runs it used, the page written as ``index.html``, the ``ReportOutput`` the command line prints).

A job's ``run`` makes the directory with ``make_report_dir``, builds its page and files, and returns
``finish_report(...)``.
"""

from collections.abc import Iterable, Sequence
from pathlib import Path

from spark_reports.claims import Finding, Verdict, repeats_text, write_findings
from spark_reports.claims_html import findings_section
from spark_reports.html_report import Page, ReportOutput, runs_section
from spark_reports.run_records import RunInfo

INDEX_FILE = "index.html"


def make_report_dir(out_dir: Path, name: str) -> Path:
    """``OUT/<report>/``, made if missing."""
    path = out_dir / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def csv_links(page: Page, files: Iterable[Path]) -> None:
    """A link to each CSV file the report wrote."""
    page.links([(p.name, p.name) for p in files if p.suffix == ".csv"])


def report_findings(page: Page, directory: Path, findings: Sequence[Finding]) -> Path:
    """The claims this report judged: its page's section and ``directory/findings.json`` (the front page's
    input; an empty list when the report judges none)."""
    findings_section(page, findings)
    return write_findings(directory, list(findings))


def claims_sentence(findings: Sequence[Finding]) -> str | None:
    """A page's one-sentence finding from the claims it judged: each judged claim's verdict, how it fared over the
    runs and the first clause of its measured figure (the claims table below has the rest; None when it judged
    none)."""
    judged = [f for f in findings if f.verdict is not Verdict.NOT_MEASURED]
    if not judged:
        return None
    return "; ".join(f"{f.claim.value} {f.verdict.value} ({repeats_text(f, run_by_run=False)}): "
                     f"{first_clause(f.measured)}" for f in judged) + "."


def first_clause(text: str) -> str:
    """``text`` up to its first "; " outside parentheses (a figure's parenthesised context stays whole)."""
    depth = 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and text.startswith("; ", i):
            return text[:i]
    return text


def finish_report(page: Page, directory: Path, name: str, runs: Sequence[RunInfo], files: Sequence[Path], *,
                  link_csvs: bool = False, findings: Sequence[Finding] | None = None) -> ReportOutput:
    """End the page — a link to each CSV in ``files`` (``link_csvs``), the claims judged (``findings``, see
    ``report_findings``), the runs used — write it as ``directory/index.html`` and say what the report wrote.
    A page that set no finding of its own opens with the claims it judged (``claims_sentence``), or with how
    many runs it read when it judged none."""
    if page.lead is None:
        page.finding(claims_sentence(findings or ()) or (
            f"{len(runs)} run{'s' if len(runs) != 1 else ''} read; none holds what this report measures."
            if not runs else f"{len(runs)} run{'s' if len(runs) != 1 else ''} read: the figures are below."))
    if link_csvs:
        csv_links(page, files)
    if findings is not None:
        report_findings(page, directory, findings)
    runs_section(page, runs)
    index = directory / INDEX_FILE
    page.write(index)
    return ReportOutput(name, index, tuple(files))


def fixed(value: float | None, digits: int = 0) -> str | None:
    """A table cell with thousands separators and ``digits`` decimals; None (shown as "–") stays None."""
    return None if value is None else f"{value:,.{digits}f}"
