"""The recovery report assigns restarts to log sizes, takes medians over runs, and judges RECOVERY_CHECKPOINT."""

import json

import pytest

from spark_reports.claims import ClaimId, Verdict
from spark_reports.html_report import local_references
from spark_reports.jobs import recovery as rc
from spark_reports.run_records import discover_runs
from spark_reports.synthetic_claims import MIB, write_recovery_run

SIZES = [32, 128]
# Checkpointed restarts flat, the full scan growing 2× and slower than the checkpointed ones.
HELD = {(32, "clean"): 0.25, (32, "kill9-flushed"): 0.30, (32, "kill9-tail"): 0.35, (32, "kill9-no-checkpoint"): 0.40,
        (128, "clean"): 0.40, (128, "kill9-flushed"): 0.35, (128, "kill9-tail"): 0.40,
        (128, "kill9-no-checkpoint"): 0.80}


def _finding(spark, runs_dir):
    rows = [row for r in discover_runs(runs_dir) for row in rc.rows_of(r)]
    return rc.judge(rc.aggregate(spark, rows) if rows else [], tuple(sorted({r.run_id for r in rows})))


def test_rows_are_assigned_to_the_size_asked_for(tmp_path):
    write_recovery_run(tmp_path, 0, HELD, SIZES)
    rows = rc.rows_of(discover_runs(tmp_path)[0])
    assert [(r.size_mib, r.case) for r in rows] == [(s, c) for s in SIZES for c in rc.CASES]
    tail = next(r for r in rows if r.size_mib == 128 and r.case == "kill9-tail")
    assert tail.log_bytes == 136 * MIB and tail.unflushed_bytes == 8 * MIB and tail.checkpoint
    assert not next(r for r in rows if r.case == "kill9-no-checkpoint").checkpoint


def test_without_sizes_in_params_rows_take_the_log_size_at_the_clean_stop(tmp_path):
    run_dir = tmp_path / write_recovery_run(tmp_path, 0, HELD, SIZES)
    meta = json.loads((run_dir / "meta.json").read_text())
    meta["params"] = {}
    (run_dir / "meta.json").write_text(json.dumps(meta))
    assert sorted({r.size_mib for r in rc.rows_of(discover_runs(tmp_path)[0])}) == SIZES


def test_flat_checkpointed_restarts_and_a_growing_full_scan_hold(spark, tmp_path):
    write_recovery_run(tmp_path, 0, HELD, SIZES)
    finding = _finding(spark, tmp_path)
    assert finding.claim is ClaimId.RECOVERY_CHECKPOINT and finding.verdict is Verdict.HELD
    assert finding.figures["no_checkpoint_large_s"] == pytest.approx(0.80)
    assert "0.40 → 0.80 s (×2.00" in finding.measured


def test_medians_over_runs_decide(spark, tmp_path):
    # Two runs hold and one run's full scan is flat: the median (middle of three) still grows.
    write_recovery_run(tmp_path, 0, HELD, SIZES)
    write_recovery_run(tmp_path, 1, {**HELD, (128, "kill9-no-checkpoint"): 0.90}, SIZES)
    write_recovery_run(tmp_path, 2, {**HELD, (128, "kill9-no-checkpoint"): 0.41}, SIZES)
    rows = [row for r in discover_runs(tmp_path) for row in rc.rows_of(r)]
    cells = {(c.size_mib, c.case): c for c in rc.aggregate(spark, rows)}
    assert cells[(128, "kill9-no-checkpoint")].median_s == pytest.approx(0.80)
    assert cells[(128, "kill9-no-checkpoint")].runs == 3 and cells[(128, "kill9-no-checkpoint")].max_s == 0.90
    assert _finding(spark, tmp_path).verdict is Verdict.HELD


@pytest.mark.parametrize(("change", "reason"), [
    ({(128, "kill9-flushed"): 1.20}, "kill9-flushed grows with the log"),  # > 1.5 × 0.30 and > 1 s
    ({(128, "kill9-no-checkpoint"): 0.45}, "grows less than ×1.25"),
    ({(128, "kill9-no-checkpoint"): 0.45, (32, "kill9-no-checkpoint"): 0.30}, "not ×1.25 slower"),
])
def test_a_growing_checkpointed_restart_or_a_flat_full_scan_is_not_held(spark, tmp_path, change, reason):
    write_recovery_run(tmp_path, 0, {**HELD, **change}, SIZES)
    finding = _finding(spark, tmp_path)
    assert finding.verdict is Verdict.NOT_HELD
    assert reason in finding.detail


def test_one_log_size_or_sizes_too_close_are_not_measured(spark, tmp_path):
    write_recovery_run(tmp_path / "one", 0, {k: v for k, v in HELD.items() if k[0] == 32}, [32])
    one = _finding(spark, tmp_path / "one")
    assert one.verdict is Verdict.NOT_MEASURED and "one log size" in one.measured
    close = {(48 if s == 128 else s, c): v for (s, c), v in HELD.items()}
    write_recovery_run(tmp_path / "close", 0, close, [32, 48])
    assert _finding(spark, tmp_path / "close").verdict is Verdict.NOT_MEASURED
    assert rc.judge([], ()).verdict is Verdict.NOT_MEASURED


def test_report_page_plot_and_findings(spark, tmp_path):
    runs = tmp_path / "runs"
    run_id = write_recovery_run(runs, 0, HELD, SIZES)
    output = rc.run(spark, runs, tmp_path / "out")
    page = output.index.read_text(encoding="utf-8")
    assert all((output.index.parent / ref).is_file() for ref in local_references(page))
    assert "recovery_vs_log.png" in page and run_id in page and "held" in page
    findings = json.loads((tmp_path / "out" / "recovery" / "findings.json").read_text())
    assert [(f["claim"], f["verdict"], f["runs"]) for f in findings] == [("recovery-checkpoint", "held", [run_id])]


def test_rows_with_the_store_phases_are_judged_on_the_recovery_work(spark, tmp_path):
    # Process times say "grows" for the checkpointed restarts (a busy machine: 0.30 → 1.40 s), but the store's
    # own recovery work is flat with the checkpoint and grows without it: judged on the work, held.
    noisy = {**HELD, (128, "kill9-flushed"): 1.40, (128, "kill9-tail"): 1.45}
    work = {(32, "clean"): 0.08, (32, "kill9-flushed"): 0.02, (32, "kill9-tail"): 0.10,
            (32, "kill9-no-checkpoint"): 0.30, (128, "clean"): 0.30, (128, "kill9-flushed"): 0.02,
            (128, "kill9-tail"): 0.11, (128, "kill9-no-checkpoint"): 1.10}
    write_recovery_run(tmp_path, 0, noisy, SIZES, work=work)
    rows = [row for r in discover_runs(tmp_path) for row in rc.rows_of(r)]
    cells = {(c.size_mib, c.case): c for c in rc.aggregate(spark, rows)}
    assert cells[(128, "kill9-no-checkpoint")].work_median_s == pytest.approx(1.10)
    finding = rc.judge(list(cells.values()), ("r",), rc._clean_phases(rows))
    assert finding.verdict is Verdict.HELD, finding.detail
    assert finding.measured.startswith("recovery work") and "store's own timing" in finding.detail
    assert "its largest phase: recoverCommitLog" in finding.measured
    # The same runs without the phases are judged on process time, and the noise makes it not held.
    write_recovery_run(tmp_path / "plain", 0, noisy, SIZES)
    assert _finding(spark, tmp_path / "plain").verdict is Verdict.NOT_HELD
