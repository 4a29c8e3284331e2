"""The offset-overflow report reproduces the seed's table digit for digit and projects measured peak rates."""

import csv

import pytest

from spark_reports import offset_math as om
from spark_reports.jobs.offset_overflow import measured_rows, seed_table
from spark_reports.run_records import discover_runs

# The seed's table (docs/claims.md, `offset-616-years`), as printed: (message size, messages a day in 亿, years).
SEED = [
    (256, 10, "98709.03293"), (512, 10, "49354.51646"), (1024, 10, "24677.25823"), (2048, 10, "12338.62912"),
    (4096, 10, "6169.314558"),
    (256, 100, "9870.903293"), (512, 100, "4935.451646"), (1024, 100, "2467.725823"), (2048, 100, "1233.862912"),
    (4096, 100, "616.9314558"),
    (256, 1000, "987.0903293"), (512, 1000, "493.5451646"), (1024, 1000, "246.7725823"), (2048, 1000, "123.3862912"),
    (4096, 1000, "61.69314558"),
]


def test_pure_formula_matches_the_seed_to_its_printed_digits():
    for size, count, printed in SEED:
        assert om.format_seed(om.years_until_overflow(size, count * 10**8)) == printed


def test_spark_seed_table_equals_the_seed_row_for_row(spark):
    rows = seed_table(spark)
    assert [(r.message_bytes, int(r.seed_count), om.format_seed(r.years)) for r in rows] == \
        [(s, c, p) for s, c, p in SEED]


def test_4k_at_ten_billion_a_day_lasts_616_93_years(spark):
    row = next(r for r in seed_table(spark) if r.message_bytes == 4096 and r.messages_per_day == 10**10)
    assert f"{row.years:.2f}" == "616.93"


def test_consume_queue_horizon_counts_20_bytes_per_message(spark):
    for r in seed_table(spark):
        assert r.consume_queue_years == pytest.approx(om.years_until_overflow(20, r.messages_per_day), rel=1e-12)


def test_assumed_record_size_is_91_plus_body_topic_and_properties():
    # KEYS\x01w0-000000001\x02UNIQ_KEY\x01<32 hex>\x02WAIT\x01true
    props = "KEYS\x01w0-000000001\x02UNIQ_KEY\x01" + "0" * 32 + "\x02WAIT\x01true"
    assert om.assumed_properties_bytes(len("w0-000000001")) == len(props)
    assert om.commitlog_record_bytes(1024, len("TopicTest"), len(props)) == 91 + 1024 + 9 + len(props)


def test_measured_peak_rate_and_horizon_match_the_synthetic_runs(spark, synth):
    rows = {r.run_id: r for r in measured_rows(spark, discover_runs(synth.runs_dir))}
    assert set(rows) == set(synth.expected)
    for run_id, expected in synth.expected.items():
        row = rows[run_id]
        assert row.acknowledged == expected.check["acknowledged"]
        # Counted per 10 ms and summed over 100 buckets: never above the exact peak, and short of it by at
        # most one bucket's acks.
        assert expected.peak_acks_per_s - expected.peak_bucket_max <= row.peak_acks_per_s <= expected.peak_acks_per_s
        assert row.mean_body_bytes == pytest.approx(expected.mean_body_bytes)
        key_len = len("w0-000000001")
        record = om.commitlog_record_bytes(expected.mean_body_bytes, len("SynthTopic"),
                                           om.assumed_properties_bytes(key_len))
        assert row.record_bytes == pytest.approx(record)
        per_day = row.peak_acks_per_s * om.SECONDS_PER_DAY
        assert row.commitlog_years == pytest.approx(om.years_until_overflow(record, per_day))
        assert row.consume_queue_years == pytest.approx(om.years_until_overflow(20, per_day))


def test_report_files_carry_the_seed_digits(reports):
    out = reports.out_dir / "offset-overflow"
    with (out / "seed_table.csv").open(encoding="utf-8") as f:
        printed = [row["years_seed_format"] for row in csv.DictReader(f)]
    assert printed == [p for _, _, p in SEED]
    page = (out / "index.html").read_text(encoding="utf-8")
    assert all(p in page for _, _, p in SEED)


def test_finding_holds_on_the_spark_row_and_adds_the_fastest_measured_run(spark, synth):
    from dataclasses import replace

    from spark_reports.claims import ClaimId, Verdict
    from spark_reports.jobs.offset_overflow import overflow_finding

    seed = seed_table(spark)
    measured = measured_rows(spark, discover_runs(synth.runs_dir))
    finding = overflow_finding(seed, measured)
    assert finding.claim is ClaimId.OFFSET_616_YEARS and finding.verdict is Verdict.HELD
    assert finding.figures["years_4k_1e10_per_day"] == pytest.approx(616.9314558, abs=1e-7)
    fastest = max(measured, key=lambda m: m.peak_acks_per_s)
    assert finding.figures["peak_acks_per_s"] == fastest.peak_acks_per_s
    assert finding.figures["peak_commitlog_years"] == pytest.approx(fastest.commitlog_years)
    # Had the arithmetic given fewer years, the claim would not hold.
    shrunk = [replace(r, years=r.years / 2) for r in seed]
    assert overflow_finding(shrunk, []).verdict is Verdict.NOT_HELD
