"""Static HTML pages for the reports: headings, tables, figures, links, and the "runs used" section.

A page refuses to be written if it references a local file that does not exist, so a report never
links a missing figure or CSV.
"""

import csv
import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlparse

from spark_reports.run_records import RunInfo

_STYLE = """
body { font-family: sans-serif; max-width: 72rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
table { border-collapse: collapse; margin: 0.5rem 0 1.5rem; font-size: 0.9rem; }
th, td { border: 1px solid #bbb; padding: 0.2rem 0.5rem; text-align: right; }
th { background: #eee; } td.text, th.text { text-align: left; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.5rem 0; }
.note { color: #555; font-size: 0.9rem; }
p.finding { font-size: 1.15rem; border-left: 4px solid #2b7bba; padding: 0.3rem 0.8rem; background: #f3f7fb; }
"""


_FIGURE = '<p class="figure">'


class MissingReferenceError(RuntimeError):
    """A page references a local file that does not exist."""


@dataclass(frozen=True)
class ReportOutput:
    """What a report wrote: its page and the other files (figures, CSVs) it links."""

    name: str
    index: Path
    files: tuple[Path, ...]


class _RefCollector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.refs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("href", "src") and value is not None:
                self.refs.append(value)


def local_references(page_html: str) -> list[str]:
    """The relative href/src targets of a page (external URLs and anchors left out)."""
    collector = _RefCollector()
    collector.feed(page_html)
    local = []
    for ref in collector.refs:
        parsed = urlparse(ref)
        if parsed.scheme or parsed.netloc or not parsed.path:
            continue
        local.append(parsed.path)
    return local


def _cell(value: object) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.3f}"
    return str(value)


@dataclass
class Page:
    """An HTML page assembled from escaped parts.

    A page opens with its finding: one sentence computed from the data (``finding``), then its main figure
    (the one marked ``main``, else the first), then the other parts in the order they were added, so the tables
    come below what they support.
    """

    title: str
    parts: list[str] = field(default_factory=list)
    lead: str | None = None
    main_part: int | None = None  # index into ``parts`` of the main figure

    def finding(self, sentence: str) -> None:
        """The page's one-sentence finding, shown first (the last call wins)."""
        self.lead = sentence

    def heading(self, text: str, level: int = 2) -> None:
        self.parts.append(f"<h{level}>{html.escape(text)}</h{level}>")

    def paragraph(self, text: str, *, note: bool = False) -> None:
        cls = ' class="note"' if note else ""
        self.parts.append(f"<p{cls}>{html.escape(text)}</p>")

    def table(self, header: Sequence[str], rows: Iterable[Sequence[object]], *,
              text_columns: int = 1) -> None:
        """A table; the first ``text_columns`` columns are left-aligned labels, the rest numbers."""
        def row_html(cells: Sequence[str], tag: str) -> str:
            out = []
            for i, cell in enumerate(cells):
                cls = ' class="text"' if i < text_columns else ""
                out.append(f"<{tag}{cls}>{html.escape(cell)}</{tag}>")
            return "<tr>" + "".join(out) + "</tr>"
        body = [row_html(list(header), "th")]
        body.extend(row_html([_cell(v) for v in row], "td") for row in rows)
        self.parts.append("<table>" + "\n".join(body) + "</table>")

    def figure(self, src: str, alt: str, *, main: bool = False) -> None:
        """An image; ``main`` makes it the figure shown under the finding (else the first figure is)."""
        if main or self.main_part is None:
            self.main_part = len(self.parts)
        self.parts.append(f'{_FIGURE}<img src="{html.escape(src)}" alt="{html.escape(alt)}"></p>')

    def links(self, items: Iterable[tuple[str, str]]) -> None:
        lis = "".join(f'<li><a href="{html.escape(href)}">{html.escape(text)}</a></li>' for href, text in items)
        self.parts.append(f"<ul>{lis}</ul>")

    def ordered_parts(self) -> list[str]:
        """The body in page order: the finding, the main figure, then the rest as added."""
        parts = list(self.parts)
        head = []
        if self.lead is not None:
            head.append(f'<p class="finding">{html.escape(self.lead)}</p>')
            if self.main_part is not None:
                head.append(parts.pop(self.main_part))
        return head + parts

    def render(self) -> str:
        title = html.escape(self.title)
        return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
                f"<style>{_STYLE}</style></head><body>\n<h1>{title}</h1>\n" + "\n".join(self.ordered_parts())
                + "\n</body></html>\n")

    def write(self, path: Path) -> None:
        text = self.render()
        missing = [ref for ref in local_references(text) if not (path.parent / ref).exists()]
        if missing:
            raise MissingReferenceError(f"{path}: references missing files {missing}")
        path.write_text(text, encoding="utf-8")


def runs_section(page: Page, runs: Sequence[RunInfo]) -> None:
    """State which runs a report used, how each was configured and on which machine."""
    page.heading("Runs used")
    if not runs:
        page.paragraph("No runs with records were found; only the parts that need no measurement are shown.")
        return
    page.table(
        ["run", "scenario", "flush mode", "sysctl profile in force", "broker", "machine", "git rev"],
        [(r.run_id, r.scenario, r.flush_mode, r.sysctl_profile, r.broker_impl, r.host_summary,
          r.meta.get("git_rev") or "–") for r in runs],
        text_columns=7,
    )
    with_values = [r for r in runs if r.sysctl_values]
    if with_values:
        page.table(["run", "sysctl values in force"], [(r.run_id, r.sysctl_values) for r in with_values],
                   text_columns=2)


def write_csv(path: Path, header: Sequence[str], rows: Iterable[Sequence[object]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return path
