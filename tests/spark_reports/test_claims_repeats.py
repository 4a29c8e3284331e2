"""Claims over repeated runs: each claim row shows "held in k of n" and the spread of its headline figure; runs
that disagree make it "unsettled" with each run's figure; a claim judged from one run says why one suffices."""

from pathlib import Path

from spark_reports.claims import (
    HEADLINE,
    ONE_RUN_SUFFICES,
    ClaimId,
    Finding,
    Verdict,
    read_findings,
    repeats_text,
    settle_each,
    write_findings,
)
from spark_reports.claims_html import claim_verdict, claims_table, findings_section
from spark_reports.html_report import Page

COLD = ClaimId.COLD_BACKLOG_READ
KEY = HEADLINE[COLD][0]
THRESHOLD = 5_000.0


def judge(rates: dict[str, float]) -> Finding:
    """A stand-in report judge: held when the slowest run read at least 5,000 msg/s."""
    slowest = min(rates.values())
    return Finding(COLD, Verdict.HELD if slowest >= THRESHOLD else Verdict.NOT_HELD, f"{slowest:,.0f} msg/s",
                   "backlog-capacity", tuple(sorted(rates)), "rule", {KEY: slowest})


def settled(rates: dict[str, float]) -> Finding:
    (finding,) = settle_each([judge(rates)], lambda rid: [judge({rid: rates[rid]})])
    return finding


def test_runs_that_agree_show_held_in_n_of_n_and_the_spread():
    f = settled({"r1": 16_000.0, "r2": 9_000.0, "r3": 12_500.0})
    assert f.verdict is Verdict.HELD
    assert f.repeats() == (3, 3) and f.spread() == (9_000.0, 16_000.0)
    text = repeats_text(f)
    assert "held in 3 of 3 runs" in text and "spread 9,000–16,000 msg/s from disk" in text


def test_runs_that_disagree_read_unsettled_with_each_runs_figure():
    f = settled({"r1": 16_000.0, "r2": 4_000.0, "r3": 12_500.0})
    assert f.verdict is Verdict.UNSETTLED  # pooled it would be "not held" (slowest 4,000)
    text = repeats_text(f)
    assert "held in 2 of 3 runs" in text
    assert "r1 held at 16,000" in text and "r2 not held at 4,000" in text and "r3 held at 12,500" in text
    assert claim_verdict([f], COLD) is Verdict.UNSETTLED


def test_a_claim_from_one_run_says_why_one_suffices():
    f = Finding(ClaimId.SYNC_NO_LOSS, Verdict.HELD, "0 of 9,000 lost", "loss", ("r1",), "", {"lost": 0.0})
    text = repeats_text(f)
    assert text.startswith("held in 1 of 1 run; 0 acknowledged lost")
    assert ONE_RUN_SUFFICES[ClaimId.SYNC_NO_LOSS] in text


def test_per_run_figures_survive_the_findings_file(tmp_path: Path):
    f = settled({"r1": 16_000.0, "r2": 4_000.0})
    write_findings(tmp_path / "backlog-capacity", [f])
    (back,) = read_findings(tmp_path)
    assert back == f


def test_the_claims_page_and_the_reports_section_show_the_repeats(tmp_path: Path):
    f = settled({"r1": 16_000.0, "r2": 4_000.0, "r3": 12_500.0})
    row = claims_table([f], tmp_path)
    assert '<b class="repeats">held in 2 of 3 runs; spread 4,000–16,000 msg/s from disk' in row
    page = Page("t")
    findings_section(page, [f])
    assert '<b class="repeats">held in 2 of 3 runs' in page.render()


def test_a_loss_in_one_run_is_evidence_not_noise():
    def lost(n: int, rid: str) -> Finding:
        return Finding(ClaimId.SYNC_NO_LOSS, Verdict.NOT_HELD if n else Verdict.HELD, f"{n} lost", "loss", (rid,), "",
                       {"lost": float(n)})
    pooled = Finding(ClaimId.SYNC_NO_LOSS, Verdict.NOT_HELD, "1 lost", "loss", ("a", "b"), "", {"lost": 1.0})
    (f,) = settle_each([pooled], lambda rid: [lost(1 if rid == "b" else 0, rid)])
    assert f.verdict is Verdict.NOT_HELD
    assert repeats_text(f).startswith("held in 1 of 2 runs; spread 0–1 acknowledged lost")
