"""The seed's claims and the reports' findings as HTML: the front page's claims table and each report's
"claims judged here" section.

Verdicts are coloured (held green, not held red, not measured yet amber) with inline styles, so the page
needs no stylesheet beyond the one ``html_report.Page`` writes. Every value is escaped here; the parts are
appended to a ``Page`` as ready HTML.
"""

import html
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from spark_reports.claims import CLAIM_BY_ID, CLAIMS, Claim, Finding, Verdict
from spark_reports.html_report import Page

VERDICT_STYLE: Final = {
    Verdict.HELD: "background:#d8f0d8;color:#14501e;font-weight:bold",
    Verdict.NOT_HELD: "background:#f6d5d5;color:#7a1010;font-weight:bold",
    Verdict.NOT_MEASURED: "background:#fdf0c8;color:#5c4a00",
}
_LEFT: Final = "text-align:left;vertical-align:top"
MAX_RUNS_LISTED: Final = 50  # a claim judged on more runs lists the first ones and counts the rest


def _e(text: object) -> str:
    return html.escape(str(text))


def verdict_cell(verdict: Verdict, rowspan: int = 1) -> str:
    span = f' rowspan="{rowspan}"' if rowspan > 1 else ""
    return f'<td{span} class="verdict" style="{VERDICT_STYLE[verdict]};{_LEFT}">{_e(verdict.value)}</td>'


def runs_cell(runs: Sequence[str]) -> str:
    """The run count, with the run ids in a tooltip and a details list."""
    if not runs:
        return f'<td style="{_LEFT}">0</td>'
    shown = list(runs[:MAX_RUNS_LISTED])
    more = f"<li>… and {len(runs) - len(shown)} more</li>" if len(runs) > len(shown) else ""
    items = "".join(f"<li>{_e(r)}</li>" for r in shown)
    label = f"{len(runs)} run{'s' if len(runs) != 1 else ''}"
    return (f'<td style="{_LEFT}" title="{_e(", ".join(runs))}"><details><summary>{label}</summary>'
            f'<ul style="margin:0;padding-left:1rem;font-size:0.8rem">{items}{more}</ul></details></td>')


def _report_cell(finding: Finding | None, out_dir: Path) -> str:
    if finding is None:
        return f'<td style="{_LEFT}">–</td>'
    target = out_dir / finding.report / "index.html"
    if target.is_file():
        return f'<td style="{_LEFT}"><a href="{_e(finding.report)}/index.html">{_e(finding.report)}</a></td>'
    return f'<td style="{_LEFT}">{_e(finding.report)} (not written)</td>'


def _measured_cell(finding: Finding | None) -> str:
    if finding is None:
        return (f'<td style="{_LEFT}">no report judged this claim: its runs have not been made or its report '
                "has not been run</td>")
    detail = f'<br><span class="note">{_e(finding.detail)}</span>' if finding.detail else ""
    return f'<td style="{_LEFT}">{_e(finding.measured)}{detail}</td>'


def claims_table(findings: Sequence[Finding], out_dir: Path) -> str:
    """One row per seed claim (in ``CLAIMS`` order); a claim judged by several findings gets one row each."""
    by_claim: dict[str, list[Finding]] = {}
    for f in findings:
        by_claim.setdefault(f.claim.value, []).append(f)
    header = ("claim", "seed source", "experiment", "measured on this machine", "verdict", "runs used", "evidence")
    rows = ["<tr>" + "".join(f'<th class="text">{_e(h)}</th>' for h in header) + "</tr>"]
    for claim in CLAIMS:
        judged: list[Finding | None] = list(by_claim.get(claim.id.value, [])) or [None]
        span = f' rowspan="{len(judged)}"' if len(judged) > 1 else ""
        lead = (f'<td{span} style="{_LEFT}" id="{_e(claim.id.value)}">{_e(claim.text)}</td>'
                f'<td{span} style="{_LEFT}">{_e(claim.source)}</td>'
                f'<td{span} style="{_LEFT}"><code>{_e(claim.experiment)}</code></td>')
        for i, finding in enumerate(judged):
            verdict = Verdict.NOT_MEASURED if finding is None else finding.verdict
            cells = (_measured_cell(finding) + verdict_cell(verdict)
                     + runs_cell(() if finding is None else finding.runs) + _report_cell(finding, out_dir))
            rows.append("<tr>" + (lead if i == 0 else "") + cells + "</tr>")
    return '<table class="claims">' + "\n".join(rows) + "</table>"


def verdict_counts(findings: Sequence[Finding]) -> dict[Verdict, int]:
    """Claims by verdict: a claim counts as not held if any finding says so, else as held if any finding
    holds it (a report that could not judge it takes nothing away), else as not measured yet."""
    out = dict.fromkeys(Verdict, 0)
    for claim in CLAIMS:
        verdicts = {f.verdict for f in findings if f.claim == claim.id}
        if Verdict.NOT_HELD in verdicts:
            out[Verdict.NOT_HELD] += 1
        elif Verdict.HELD in verdicts:
            out[Verdict.HELD] += 1
        else:
            out[Verdict.NOT_MEASURED] += 1
    return out


def findings_section(page: Page, findings: Sequence[Finding]) -> None:
    """A report's own "claims judged here" section: what it decided, from which runs, and why."""
    page.heading("Claims judged from these runs")
    if not findings:
        page.paragraph("This report judges no seed claim from these runs.", note=True)
        return
    header = ("claim", "verdict", "measured", "why", "runs used")
    rows = ["<tr>" + "".join(f'<th class="text">{_e(h)}</th>' for h in header) + "</tr>"]
    for f in findings:
        claim: Claim = CLAIM_BY_ID[f.claim]
        rows.append(f'<tr><td style="{_LEFT}">{_e(claim.text)}</td>{verdict_cell(f.verdict)}'
                    f'<td style="{_LEFT}">{_e(f.measured)}</td><td style="{_LEFT}">{_e(f.detail)}</td>'
                    f"{runs_cell(f.runs)}</tr>")
    page.parts.append('<table class="findings">' + "\n".join(rows) + "</table>")
