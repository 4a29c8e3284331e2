"""The offset-overflow report judges the 616-year claim from its Spark table and adds the measured peak horizon."""

import json

from spark_reports import offset_math as om
from spark_reports.claims import ClaimId, Verdict
from spark_reports.jobs.offset_overflow import MeasuredRow, SeedRow, overflow_finding


def test_findings_file_holds_616_years_and_the_fastest_runs_horizon(reports, synth):
    items = json.loads((reports.out_dir / "offset-overflow" / "findings.json").read_text(encoding="utf-8"))
    assert [f["claim"] for f in items] == [ClaimId.OFFSET_616_YEARS.value]
    finding = items[0]
    assert finding["verdict"] == Verdict.HELD.value
    assert finding["measured"].startswith("616.9314558 years at 4 KiB × 10^10 messages a day")
    peak = int(finding["figures"]["peak_acks_per_s"])
    fastest = max(synth.expected.values(), key=lambda e: e.peak_acks_per_s)
    # The fastest run's peak, counted per 10 ms bucket: within one bucket's acks below the exact figure.
    assert max(e.peak_acks_per_s - e.peak_bucket_max for e in synth.expected.values()) <= peak
    assert peak <= fastest.peak_acks_per_s
    assert f"{peak:,} msg/s" in finding["measured"]
    assert set(finding["runs"]) == set(synth.expected)


def _seed(years: float) -> list[SeedRow]:
    return [SeedRow(4096, 10**10, years, 1.0)]


def test_verdict_follows_the_computed_row_and_needs_no_runs():
    held = overflow_finding(_seed(om.years_until_overflow(4096, 10**10)), [])
    assert held.verdict is Verdict.HELD and "peak" not in held.measured and held.runs == ()
    assert overflow_finding(_seed(615.9), []).verdict is Verdict.NOT_HELD


def test_the_fastest_run_gives_the_measured_horizon():
    def row(run_id: str, peak: int) -> MeasuredRow:
        return MeasuredRow(run_id, 10, peak, 0, 1024.0, 9.0, 76.0, 1200.0,
                           om.years_until_overflow(1200.0, peak * om.SECONDS_PER_DAY) if peak else 0.0, 1.0)

    finding = overflow_finding(_seed(616.93), [row("slow", 100), row("fast", 4_000), row("idle", 0)])
    assert finding.figures["peak_acks_per_s"] == 4_000
    assert finding.figures["peak_commitlog_years"] == om.years_until_overflow(1200.0, 4_000 * 86_400)
    assert "(fast)" in finding.measured and finding.runs == ("slow", "fast", "idle")
