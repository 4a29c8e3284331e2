"""The backlog-capacity report measures the known per-message footprint and judges the seed's backlog claims."""

import csv
import json
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark_reports.backlog_runs import BacklogRow, backlog_rows
from spark_reports.claims import ClaimId, Verdict
from spark_reports.html_report import local_references
from spark_reports.jobs import backlog_capacity as bc
from spark_reports.run_records import discover_runs, read_run
from spark_reports.synthetic_backlog import BacklogSpec, ExpectedBacklog, generate, variety_specs

GIB_96 = 96 * 2**30


@dataclass(frozen=True)
class Capacity:
    out_dir: Path
    by_name: dict[str, ExpectedBacklog]
    prints: dict[str, bc.Footprint]  # by spec name
    rows: dict[str, BacklogRow]  # by spec name


@pytest.fixture(scope="module")
def capacity(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Capacity:
    runs_dir = tmp_path_factory.mktemp("capacity_runs")
    specs = variety_specs()
    expected = generate(runs_dir, specs)
    by_name = {spec.name: e for spec, e in zip(specs, expected.values(), strict=True)}
    names = {e.run_id: name for name, e in by_name.items()}
    out_dir = tmp_path_factory.mktemp("capacity_out")
    bc.run(spark, runs_dir, out_dir)
    runs = discover_runs(runs_dir)
    prints, excluded = bc.footprints(spark, runs)
    assert excluded == {}
    rows, _ = backlog_rows(spark, runs, with_series=False)
    return Capacity(out_dir, by_name, {names[f.run_id]: f for f in prints}, {names[r.plan.run_id]: r for r in rows})


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _expected_total(e: ExpectedBacklog) -> float:
    return e.record_bytes + 20 + e.index_entries * 21.000002  # (40 + 5e6 × 4) / 2e7 = 1.000002 B of slots per entry


def test_commit_log_bytes_per_message_and_index_entries_equal_the_written_ones(capacity):
    for name, e in capacity.by_name.items():
        f = capacity.prints[name]
        assert f.acknowledged == e.acknowledged
        assert f.record_bytes == pytest.approx(e.record_bytes, rel=1e-12)
        assert f.body_bytes == pytest.approx(e.body_bytes)
        assert f.index_entries == e.index_entries
        assert f.total_bytes == pytest.approx(_expected_total(e), rel=1e-12)
        assert f.read_path_bytes == pytest.approx(e.record_bytes + 20)
    assert [capacity.prints[n].index_entries for n in ("hot", "cold-slow", "cold-cached")] == [2, 3, 0]


def test_messages_a_disk_and_a_ram_hold(capacity):
    f = capacity.prints["hot"]
    per_message = _expected_total(capacity.by_name["hot"])  # the run's body is 1 KiB already
    assert f.total_bytes_1k == pytest.approx(per_message)
    assert f.disk_messages == pytest.approx(256e9 * 0.85 / per_message)
    assert f.disk_room_messages == pytest.approx((100e9 - 0.15 * 256e9) / per_message)
    assert capacity.prints["cold-cached"].disk_messages is None  # meta.host.disk has no size
    rows = {r["run_id"]: r for r in csv.DictReader(_lines(capacity.out_dir / bc.NAME / "footprint.csv"))}
    hot = rows[capacity.by_name["hot"].run_id]
    assert float(hot["messages_in_ram_1k"]) == pytest.approx(24 * 2**30 / per_message)
    assert float(hot["messages_in_96_gib_1k"]) == pytest.approx(GIB_96 / per_message)


def test_page_cache_capacity_verdicts(capacity):
    lean = bc.page_cache_finding([capacity.prints["cold-cached"]])  # 1,084 B record, no index: 1,104 B a message
    assert lean.verdict is Verdict.HELD
    assert lean.figures["messages_in_96_gib"] == pytest.approx(GIB_96 / 1104)
    usual = bc.page_cache_finding([capacity.prints["hot"]])  # 1,232 B record + 20 + 2 index entries: 0.80 × 10^8
    assert usual.verdict is Verdict.NOT_HELD
    assert usual.figures["messages_in_96_gib"] == pytest.approx(GIB_96 / _expected_total(capacity.by_name["hot"]))
    assert usual.figures["messages_in_96_gib"] < 0.9e8 <= lean.figures["messages_in_96_gib"]
    assert bc.page_cache_finding([]).verdict is Verdict.NOT_MEASURED


def test_cold_read_verdicts(capacity):
    r = capacity.rows
    held = bc.cold_read_finding([r["hot"], r["cold-disk"]])
    assert held.verdict is Verdict.HELD and held.runs == (r["cold-disk"].plan.run_id,)
    assert held.figures["read_rate_msgs_per_s"] == pytest.approx(8_000, rel=1e-3)
    slow = bc.cold_read_finding(list(r.values()))  # the slowest cold drain from disk read 4,000 msg/s
    assert slow.verdict is Verdict.NOT_HELD
    assert slow.figures["read_rate_msgs_per_s"] == pytest.approx(capacity.by_name["cold-slow"].read_rate)
    cached = bc.cold_read_finding([r["hot"], r["cold-cached"], r["cold-not-root"]])
    assert cached.verdict is Verdict.NOT_MEASURED
    assert "100% of the backlog's commit-log bytes were still resident" in cached.detail
    assert "not dropped (not root (euid 1000))" in cached.detail and "mmap" in cached.detail
    hot_only = bc.cold_read_finding([r["hot"]])
    assert hot_only.verdict is Verdict.NOT_MEASURED and "no cold backlog run" in hot_only.detail
    assert bc.cold_read_finding([]).verdict is Verdict.NOT_MEASURED


def test_report_writes_both_findings_and_the_fio_limit(capacity):
    out = capacity.out_dir / bc.NAME
    findings = {f["claim"]: f for f in json.loads((out / "findings.json").read_text(encoding="utf-8"))}
    assert set(findings) == {ClaimId.COLD_BACKLOG_READ.value, ClaimId.PAGE_CACHE_CAPACITY.value}
    # Two cold runs read from disk, one at 4,000 msg/s, one above 5,000: judged run by run they disagree, so the
    # claim reads "unsettled" with each run's verdict and figure rather than the slowest run deciding it.
    cold = findings[ClaimId.COLD_BACKLOG_READ.value]
    assert cold["verdict"] == Verdict.UNSETTLED.value
    slow_id, disk_id = capacity.by_name["cold-slow"].run_id, capacity.by_name["cold-disk"].run_id
    assert cold["per_run"] == {slow_id: Verdict.NOT_HELD.value, disk_id: Verdict.HELD.value}
    assert cold["per_run_figures"][slow_id] == pytest.approx(capacity.by_name["cold-slow"].read_rate)
    pooled = sum(_expected_total(e) * e.acknowledged for e in capacity.by_name.values()) / sum(
        e.acknowledged for e in capacity.by_name.values())
    assert findings[ClaimId.PAGE_CACHE_CAPACITY.value]["figures"]["bytes_per_message"] == pytest.approx(pooled)
    reads = {r["run_id"]: r for r in csv.DictReader(_lines(out / "read_rates.csv"))}
    hot = reads[capacity.by_name["hot"].run_id]
    assert float(hot["fio_limit_msgs_per_s"]) == pytest.approx(12_000 / (1 + 1231 / 4096))
    assert reads[capacity.by_name["cold-slow"].run_id]["fio_limit_msgs_per_s"] == ""
    page = (out / "index.html").read_text(encoding="utf-8")
    assert all((out / ref).is_file() for ref in local_references(page))
    assert "fio not measured" not in page and "Runs used" in page


def test_a_cold_run_that_kept_its_cache_is_not_measured_end_to_end(spark, tmp_path):
    generate(tmp_path / "runs", [BacklogSpec("cold-cached", cold=True)])
    bc.run(spark, tmp_path / "runs", tmp_path / "out")
    findings = {f["claim"]: f for f in json.loads((tmp_path / "out" / bc.NAME / "findings.json").read_text())}
    cold = findings[ClaimId.COLD_BACKLOG_READ.value]
    assert cold["verdict"] == Verdict.NOT_MEASURED.value and "read from the page cache" in cold["detail"]
    assert "fio not measured in these runs" in (tmp_path / "out" / bc.NAME / "index.html").read_text()


def test_runs_with_faults_do_not_measure_the_footprint(tmp_path):
    generate(tmp_path, [BacklogSpec("cold", cold=True)])
    run = discover_runs(tmp_path)[0]
    assert bc.footprint_exclusion(run) is None  # drop_caches does not change what is written
    with (run.path / "faults.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps({"ts_ns": 1, "kind": "kill9", "target": "broker-a", "params": {}}) + "\n")
    assert "kill9" in (bc.footprint_exclusion(read_run(run.path)) or "")


def test_pages_a_record_touches_and_the_fio_limit():
    assert bc.pages_per_record(1) == 1.0
    assert bc.pages_per_record(4097) == 2.0
    assert bc.fio_limit(8_000.0, 2049.0) == pytest.approx(8_000 / 1.5)
    assert bc.fio_limit(None, 1000.0) is None


def _beyond_cache(row: BacklogRow, limit: int) -> BacklogRow:
    """The same drain, as a run whose broker sat in a memory cgroup of ``limit`` bytes (--memory-max)."""
    plan = replace(row.plan, cold_requested=False, cache_dropped=False, memory_limit_bytes=limit,
                   cache_max_in_drain_bytes=limit // 2, major_faults_in_drain=1234, oom_kills=0,
                   head_p99_ms={"build": 40.0, "drain": 250.0}, head_p50_ms={"drain": 9.0})
    return replace(row, plan=plan)


def test_a_backlog_beyond_the_brokers_cgroup_is_what_the_cold_read_claim_is_judged_on(capacity):
    r = capacity.rows
    backlog = r["cold-disk"].plan.backlog_bytes
    assert backlog is not None
    large = _beyond_cache(r["cold-disk"], backlog // 4)
    assert large.plan.beyond_cache and not r["cold-disk"].plan.beyond_cache
    f = bc.cold_read_finding([r["hot"], r["cold-slow"], large])  # the slow --cold run is not what decides now
    assert f.verdict is Verdict.HELD and f.runs == (large.plan.run_id,)
    assert f"the broker in a {backlog / 4 / 2**30:.2f} GiB memory cgroup" in f.measured
    assert "1234 major faults" in f.detail and "p99 of 250 ms (during the build: 40 ms)" in f.detail
    assert f.figures["memory_limit_bytes"] == backlog // 4 and f.figures["head_p99_ms_in_drain"] == 250.0
    # Messages larger than the seed's 1 KiB: a rate under 5,000 msg/s does not judge the claim, one above it does.
    slow = replace(large, plan=replace(large.plan, message_bytes=16384), receives_in_drain=1)
    big = bc.cold_read_finding([slow])
    assert big.verdict is Verdict.INCONCLUSIVE and "--message-size 1024" in big.detail
    fast_big = bc.cold_read_finding([replace(large, plan=replace(large.plan, message_bytes=16384))])
    assert fast_big.verdict is Verdict.HELD
    # A limit above the backlog does not make the drain read from disk: the --cold runs decide, and it says so.
    roomy = _beyond_cache(r["cold-disk"], backlog * 2)
    fallback = bc.cold_read_finding([r["hot"], r["cold-disk"], roomy])
    assert fallback.runs == (r["cold-disk"].plan.run_id,)
    assert "Judged from small backlogs" in fallback.detail and "tox -e backlog-large" in fallback.detail


def test_page_cache_capacity_says_which_backlog_it_was_judged_at(capacity):
    r, prints = capacity.rows, capacity.prints
    backlog = r["hot"].plan.backlog_bytes
    assert backlog is not None
    large = _beyond_cache(r["hot"], backlog // 4)
    f = bc.page_cache_finding(list(prints.values()), [large, *(v for k, v in r.items() if k != "hot")])
    assert f.runs == (prints["hot"].run_id,)  # only the run beyond its cgroup
    assert f"Judged at a {backlog / 2**30:.2f} GiB (" in f.detail and "backlog, the broker in a" in f.detail
    assert "the broker's cache peaked at" in f.detail
    small = bc.page_cache_finding(list(prints.values()), list(r.values()))
    assert len(small.runs) == len(prints)
    assert "no run had a backlog larger than the broker's memory cgroup" in small.detail
