"""The seed's claims and the reports' findings as HTML: the front page's claims table and each report's
"claims judged here" section.

Verdicts are coloured (held green, not held red, not measured yet amber, inconclusive grey) with inline styles,
so the page needs no stylesheet beyond the one ``html_report.Page`` writes. Every value is escaped here; the
parts are appended to a ``Page`` as ready HTML.
"""

import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from spark_reports.claims import CLAIM_BY_ID, CLAIMS, Claim, ClaimId, Finding, Verdict, repeats_text
from spark_reports.html_report import Page

VERDICT_STYLE: Final = {
    Verdict.HELD: "background:#d8f0d8;color:#14501e;font-weight:bold",
    Verdict.NOT_HELD: "background:#f6d5d5;color:#7a1010;font-weight:bold",
    Verdict.NOT_MEASURED: "background:#fdf0c8;color:#5c4a00",
    Verdict.INCONCLUSIVE: "background:#e4e4ec;color:#303048",
    Verdict.UNSETTLED: "background:#f3e0c8;color:#6a3a00;font-weight:bold",
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
    repeats = repeats_text(finding)
    runs = f'<br><b class="repeats">{_e(repeats)}</b>' if repeats else ""
    detail = f'<br><span class="note">{_e(finding.detail)}</span>' if finding.detail else ""
    return f'<td style="{_LEFT}">{_e(finding.measured)}{runs}{detail}</td>'


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


def claim_verdict(findings: Sequence[Finding], claim: ClaimId) -> Verdict:
    """One claim's verdict: not held if any finding says so, else unsettled if a finding's runs disagree, else
    held if any finding holds it (a report that could not judge it takes nothing away), else inconclusive if one
    measured it without enough evidence, else not measured yet."""
    verdicts = {f.verdict for f in findings if f.claim == claim}
    if Verdict.NOT_HELD in verdicts:
        return Verdict.NOT_HELD
    if Verdict.UNSETTLED in verdicts:
        return Verdict.UNSETTLED
    if Verdict.HELD in verdicts:
        return Verdict.HELD
    if Verdict.INCONCLUSIVE in verdicts:
        return Verdict.INCONCLUSIVE
    return Verdict.NOT_MEASURED


def verdict_counts(findings: Sequence[Finding]) -> dict[Verdict, int]:
    """Claims by verdict (``claim_verdict``)."""
    out = dict.fromkeys(Verdict, 0)
    for claim in CLAIMS:
        out[claim_verdict(findings, claim.id)] += 1
    return out


def brokers_table(by_broker: Mapping[str, Sequence[Finding]], labels: Mapping[str, str],
                  links: Mapping[str, str], out_dir: Path) -> str:
    """One row per seed claim, a column per implementation (its verdict and the figures measured, linking to
    its report), and whether they agree. Two verdicts differ only when both were judged: a claim measured on
    one broker alone is "one side only", not a difference."""
    header = ["claim", *(labels[b] for b in by_broker), "the brokers"]
    rows = ["<tr>" + "".join(f'<th class="text">{_e(h)}</th>' for h in header) + "</tr>"]
    for claim in CLAIMS:
        cells = []
        verdicts = []
        for broker, findings in by_broker.items():
            verdict = claim_verdict(findings, claim.id)
            verdicts.append(verdict)
            measured = "; ".join(f.measured for f in findings if f.claim == claim.id) or "no runs"
            reports = sorted({f.report for f in findings if f.claim == claim.id})
            where = "".join(f' <a href="{_e(links[broker])}{_e(r)}/index.html">{_e(r)}</a>' for r in reports
                            if (out_dir / f"{links[broker]}{r}" / "index.html").is_file())
            cells.append(f'<td style="{VERDICT_STYLE[verdict]};{_LEFT}">{_e(verdict.value)}'
                         f'<br><span class="note">{_e(measured)}</span>{where}</td>')
        judged = [v for v in verdicts if v is not Verdict.NOT_MEASURED]
        if len(judged) < len(verdicts):
            agree = "one side only" if judged else "not measured"
        else:
            agree = "agree" if len(set(judged)) == 1 else "DIFFER: a finding about RocketMQ, or a defect of ours"
        rows.append(f'<tr><td style="{_LEFT}"><a href="#{_e(claim.id.value)}">{_e(claim.text)}</a></td>'
                    + "".join(cells) + f'<td style="{_LEFT}">{_e(agree)}</td></tr>')
    return '<table class="brokers">' + "\n".join(rows) + "</table>"


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
                    f'<td style="{_LEFT}">{_e(f.measured)}'
                    + (f'<br><b class="repeats">{_e(r)}</b>' if (r := repeats_text(f)) else "")
                    + f'</td><td style="{_LEFT}">{_e(f.detail)}</td>'
                    f"{runs_cell(f.runs)}</tr>")
    page.parts.append('<table class="findings">' + "\n".join(rows) + "</table>")
