"""spark_reports/findings_page.py: OUT/findings.html shows each recorded finding once, with how often it was seen
and the command that reproduces it; the front page links it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from harness.records.findings import FINDINGS_FILE, Finding, FindingKind, record
from spark_reports.findings_page import PAGE, group, write_findings_page
from spark_reports.site import write_site_index

LOSS = Finding(key="chaos/kill9/sync/default: loss", kind=FindingKind.LOSS, broker="V4_9_8",
               title="kill9 under SYNC_FLUSH: 3 acknowledged messages missing", detail="3 absent <at the end>",
               reproduce="python -m chaos kill9 --broker-impl rocketmq --flush sync --seed 7",
               source="chaos matrix", run_dir="runs/20261126T1")
WEDGE = Finding(key="wire/send-back NUL group", kind=FindingKind.WEDGE, broker="V4_9_8",
                title="dispatch stops for every topic", detail="second message not pullable",
                reproduce="python scripts/findings/send_back_nul_group.py HOST:PORT", source="differential test")


def test_each_key_once_most_recent_first_with_its_count() -> None:
    seen = group([replace(LOSS, seen_at="2026-11-26T10:00:00Z"), replace(WEDGE, seen_at="2026-11-26T11:00:00Z"),
                  replace(LOSS, seen_at="2026-11-26T12:00:00Z", detail="5 absent")])
    assert [(s.key, len(s.observations)) for s in seen] == [(LOSS.key, 2), (WEDGE.key, 1)]
    assert seen[0].last.detail == "5 absent" and seen[0].observations[0].seen_at == "2026-11-26T10:00:00Z"


def test_the_page_lists_findings_escaped_and_the_index_links_it(tmp_path: Path) -> None:
    runs, out = tmp_path / "runs", tmp_path / "out"
    record(runs, LOSS)
    record(runs, LOSS)
    record(runs, WEDGE)
    with (runs / FINDINGS_FILE).open("a", encoding="utf-8") as f:
        f.write("garbage\n")
    page, n = write_findings_page(out, runs)
    assert n == 2 and page == out / PAGE
    text = page.read_text()
    assert text.count(LOSS.title) == 1 and WEDGE.title in text
    assert "3 absent &lt;at the end&gt;" in text and LOSS.reproduce in text and "runs/20261126T1" in text
    assert f"{FINDINGS_FILE}:4: not a finding" in text
    index = write_site_index(out, runs).read_text()
    assert f'href="{PAGE}"' in index and "2 recorded" in index


def test_no_findings_says_so(tmp_path: Path) -> None:
    page, n = write_findings_page(tmp_path / "out", tmp_path)
    assert n == 0 and f"None recorded in {tmp_path}" in page.read_text()
