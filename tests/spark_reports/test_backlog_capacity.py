"""The backlog-capacity report: the per-message footprint measured from synthetic runs with known record sizes and
index entries, and its two claims (cold reads ≥ 5,000 msg/s; 96 GiB of page cache ≈ 10^8 messages of 1 KiB)
judged held, not held or not measured as the runs allow."""

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark_reports.claims import ClaimId, Verdict
from spark_reports.html_report import local_references
from spark_reports.jobs import backlog_capacity as bc
from spark_reports.jobs.accumulation import backlog_rows
from spark_reports.run_records import discover_runs
from spark_reports.synthetic_backlog import BacklogSpec, ExpectedBacklog, generate, variety_specs

SLOT_SHARE = (bc.INDEX_HEADER_BYTES + 5_000_000 * bc.SLOT_BYTES) / 20_000_000  # the synthetic broker's index


def _generate(root: Path, specs: list[BacklogSpec]) -> dict[str, ExpectedBacklog]:
    expected = generate(root, specs)
    return {spec.name: e for spec, e in zip(specs, expected.values(), strict=True)}


@pytest.fixture(scope="module")
def variety(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, ExpectedBacklog]]:
    root = tmp_path_factory.mktemp("capacity_runs")
    return root, _generate(root, variety_specs())


def test_footprint_is_the_known_record_cq_unit_and_index_entries(spark: SparkSession, variety) -> None:
    root, by_name = variety
    prints, excluded = bc.footprints(spark, discover_runs(root))
    assert not excluded
    got = {f.run_id: f for f in prints}
    for e in by_name.values():
        f = got[e.run_id]
        assert f.record_bytes == pytest.approx(e.record_bytes)
        assert f.body_bytes == pytest.approx(e.body_bytes)
        assert f.index_entries == e.index_entries
        assert f.total_bytes == pytest.approx(e.record_bytes + bc.CQ_UNIT_BYTES
                                              + e.index_entries * (bc.INDEX_ENTRY_BYTES + SLOT_SHARE))


def test_cold_read_verdicts(spark: SparkSession, variety) -> None:
    root, by_name = variety
    rows = {r.plan.run_id: r for r in backlog_rows(spark, discover_runs(root))[0]}

    def judge(*names: str):
        return bc.cold_read_finding([rows[by_name[n].run_id] for n in names])

    # The slowest cold drain from disk (4,000 deliveries/s) is under the seed's 5,000: not held.
    assert judge("hot", "cold-disk", "cold-slow").verdict is Verdict.NOT_HELD
    held = judge("hot", "cold-disk")
    assert held.verdict is Verdict.HELD and held.claim is ClaimId.COLD_BACKLOG_READ
    assert held.figures  # the measured rate is machine-readable too
    # A "cold" run that still read from the page cache, or one whose cache was never dropped, shows nothing.
    assert judge("hot", "cold-cached", "cold-not-root").verdict is Verdict.NOT_MEASURED
    assert judge().verdict is Verdict.NOT_MEASURED


def test_page_cache_capacity_verdicts(spark: SparkSession, tmp_path: Path) -> None:
    # 1,232 B records + a 20 B unit + 2 index entries ≈ 1.3 KB: 96 GiB holds ~0.79 × 10^8, under 0.9 × 10^8.
    heavy = _generate(tmp_path / "heavy", [BacklogSpec("hot")])
    prints, _ = bc.footprints(spark, discover_runs(tmp_path / "heavy"))
    finding = bc.page_cache_finding(prints)
    per = 1232 + 20 + 2 * (20 + SLOT_SHARE)
    assert finding.figures["bytes_per_message"] == pytest.approx(per)
    assert finding.figures["messages_in_96_gib"] == pytest.approx(96 * 2**30 / per)
    assert finding.verdict is Verdict.NOT_HELD and heavy
    # A lean record without an index: 1,084 + 20 B, 96 GiB holds 0.93 × 10^8: held.
    _generate(tmp_path / "lean", [BacklogSpec("lean", index_enabled=False, record_bytes=1084)])
    prints, _ = bc.footprints(spark, discover_runs(tmp_path / "lean"))
    lean = bc.page_cache_finding(prints)
    assert lean.figures["bytes_per_message"] == pytest.approx(1104)
    assert lean.verdict is Verdict.HELD
    assert bc.page_cache_finding([]).verdict is Verdict.NOT_MEASURED


def test_page_and_findings_file(spark: SparkSession, variety, tmp_path: Path) -> None:
    root, by_name = variety
    output = bc.run(spark, root, tmp_path / "out")
    page = output.index.read_text(encoding="utf-8")
    assert all((output.index.parent / r).is_file() for r in local_references(page))
    assert all(e.run_id in page for e in by_name.values())
    findings = json.loads((output.index.parent / "findings.json").read_text(encoding="utf-8"))
    assert {f["claim"] for f in findings} == {ClaimId.COLD_BACKLOG_READ.value, ClaimId.PAGE_CACHE_CAPACITY.value}


def test_fio_limit_counts_the_pages_a_record_spans() -> None:
    assert bc.pages_per_record(1) == 1
    assert bc.pages_per_record(4097) == 2
    assert bc.fio_limit(12_000.0, 4097) == pytest.approx(6_000)
    assert bc.fio_limit(None, 1000) is None
