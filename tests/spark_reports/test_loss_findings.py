"""The loss report judges the flush-mode loss claims from its per-run rows, and disk-full protection from
disk-fill runs."""

import json
from dataclasses import replace

import pytest

from spark_reports import run_loss
from spark_reports.claims import ClaimId, Verdict
from spark_reports.disk_fill_evidence import fill_cycles, fill_windows
from spark_reports.jobs import loss
from spark_reports.run_loss import RunLoss
from spark_reports.run_records import discover_runs
from spark_reports.synthetic_claims import FillSpec, write_disk_fill_run

KIB = 1024


def _row(run_id, flush, fault, acked=1000, lost=0, lost_bytes=0, unflushed=None, profile="default", valid=True):
    return RunLoss(run_id, flush, fault, profile, acked, acked, lost, lost_bytes, unflushed, 0, 0, 0, valid)


def _crash(kind, n=1, window=None):
    params = {} if window is None else {"unflushed_bytes": window, "written_offset": 0, "flushed_offset": 0}
    return [{"kind": kind, "params": params}, {"kind": "restart", "params": {}}] * n


def test_fault_label_leaves_out_entries_that_end_a_fault():
    assert run_loss.fault_label(_crash("kill9", 2)) == "kill9"
    assert run_loss.fault_label([{"kind": "disk_fill"}, {"kind": "disk_free"}]) == "disk_fill"
    assert run_loss.fault_label([{"kind": "restart"}]) == "none"


def test_power_loss_window_prefers_the_faults_own_unflushed_bytes():
    faults = [{"kind": "power_loss", "params": {"written_offset": 100, "flushed_offset": 40, "unflushed_bytes": 75}},
              {"kind": "power_loss", "params": {"written_offset": 50, "flushed_offset": 20}}]
    assert run_loss.power_loss_windows(faults) == [75, 30]
    assert run_loss.unflushed_bytes(faults) == 105
    assert run_loss.crash_counts(faults + _crash("kill9", 2)) == {"power_loss": 2, "kill9": 2}


def test_a_crash_without_a_flushed_offset_has_no_window():
    # Apache RocketMQ 4.9.8 reports no flushed offset: the chaos cell records -1, which is not a window of -1 B
    rocketmq = [{"kind": "power_loss", "params": {"written_offset": 100, "flushed_offset": -1, "unflushed_bytes": -1}},
                {"kind": "power_loss", "params": {"written_offset": 100, "flushed_offset": -1}}]
    assert run_loss.power_loss_windows(rocketmq) == []
    assert run_loss.unflushed_bytes(rocketmq) is None


def test_a_torn_power_loss_is_a_power_loss_with_its_own_name():
    """chaos records torn runs as power_loss_torn: they count as crashes, their windows as power-loss windows,
    and an async torn run is judged by the power-loss tail claim."""
    torn = _crash("power_loss_torn", 2, window=4096)
    assert run_loss.power_loss_windows(torn) == [4096, 4096]
    assert run_loss.crash_counts(torn) == {"power_loss_torn": 2}
    rows = [_row("t1", "ASYNC_FLUSH", "power_loss_torn", 900, lost=2, lost_bytes=100, unflushed=8192)]
    finding = loss.async_power_loss_tail(rows, {"t1": torn})
    assert finding.verdict is not Verdict.NOT_MEASURED and finding.runs == ("t1",)


def test_sync_no_loss_held_with_the_faults_covered():
    rows = [_row("s1", "SYNC_FLUSH", "kill9", 500), _row("s2", "SYNC_FLUSH", "power_loss", 700),
            _row("a1", "ASYNC_FLUSH", "power_loss", 900, lost=5), _row("s3", "SYNC_FLUSH", "none", 100, lost=3)]
    faults = {"s1": _crash("kill9", 3), "s2": _crash("power_loss", 2, 0)}
    f = loss.sync_no_loss(rows, faults)
    assert f.claim is ClaimId.SYNC_NO_LOSS and f.verdict is Verdict.HELD
    assert f.runs == ("s1", "s2")  # the fault-free run is not evidence for a crash claim
    assert f.measured == "0 of 1,200 acknowledged lost (2 runs; 3 kill -9 crashes, 2 power-loss crashes)"
    assert "Faults covered: kill9, power_loss." in f.detail
    only_kill = loss.sync_no_loss(rows[:1], faults)
    assert only_kill.verdict is Verdict.HELD and "Power loss is not covered" in only_kill.detail


def test_sync_loss_is_not_held_and_no_sync_crash_is_not_measured():
    rows = [_row("s1", "SYNC_FLUSH", "kill9", 500, lost=2, lost_bytes=2048)]
    f = loss.sync_no_loss(rows, {"s1": _crash("kill9")})
    assert f.verdict is Verdict.NOT_HELD and f.measured.startswith("2 of 500 acknowledged lost, 2,048 B")
    none = loss.sync_no_loss([_row("a", "ASYNC_FLUSH", "kill9")], {})
    assert none.verdict is Verdict.NOT_MEASURED


def test_async_kill9_counts_only_runs_without_power_loss():
    rows = [_row("k", "ASYNC_FLUSH", "kill9", 800), _row("kp", "ASYNC_FLUSH", "kill9+power_loss", 800, lost=9),
            _row("s", "SYNC_FLUSH", "kill9", 800)]
    f = loss.async_kill9_no_loss(rows, {"k": _crash("kill9", 4)})
    assert f.verdict is Verdict.HELD and f.runs == ("k",) and "4 kill -9 crashes" in f.measured
    lossy = loss.async_kill9_no_loss([replace(rows[0], lost=1, lost_bytes=1024)], {})
    assert lossy.verdict is Verdict.NOT_HELD


def test_async_power_loss_tail_compares_lost_bytes_with_the_unflushed_window():
    # 10 lost 1 KiB bodies = at least 10 × (1024 + 91) commit-log bytes, inside a 20 KiB window over 2 crashes.
    rows = [_row("p", "ASYNC_FLUSH", "power_loss", 5000, lost=10, lost_bytes=10 * KIB, unflushed=20 * KIB)]
    faults = {"p": _crash("power_loss", 1, 8 * KIB) + _crash("power_loss", 1, 12 * KIB)}
    f = loss.async_power_loss_tail(rows, faults)
    assert f.claim is ClaimId.ASYNC_POWER_LOSS_TAIL and f.verdict is Verdict.HELD
    assert f.figures["lost_log_bytes_min"] == 10 * (KIB + 91)
    assert "window of 20 KiB over 2 crashes" in f.measured and "max 12 KiB, within the seed's" in f.measured
    big = [replace(rows[0], unflushed_bytes=2000 * KIB)]
    far = loss.async_power_loss_tail(big, {"p": _crash("power_loss", 1, 2000 * KIB)})
    assert "far beyond the seed's" in far.measured
    # the header bytes tip it over: bodies alone (10 KiB) would fit a 10.5 KiB window, records do not
    over = [replace(rows[0], unflushed_bytes=10 * KIB + 512)]
    f_over = loss.async_power_loss_tail(over, {"p": _crash("power_loss", 1, 10 * KIB + 512)})
    assert f_over.verdict is Verdict.NOT_HELD and "more lost than the window in p" in f_over.measured


def test_async_power_loss_without_runs_or_offsets_is_not_measured():
    assert loss.async_power_loss_tail([], {}).verdict is Verdict.NOT_MEASURED
    no_offsets = [_row("p", "ASYNC_FLUSH", "power_loss", lost=1, lost_bytes=KIB, unflushed=None)]
    f = loss.async_power_loss_tail(no_offsets, {})
    assert f.verdict is Verdict.NOT_MEASURED and "unflushed window" in f.measured


@pytest.fixture(scope="module")
def disk_runs(tmp_path_factory):
    runs_dir = tmp_path_factory.mktemp("disk_runs")
    ids = {
        "good": write_disk_fill_run(runs_dir, 0, [FillSpec(0.93, 5, 3), FillSpec(0.95, 7, 4, resume_ns=400_000_000)]),
        "no_pull": write_disk_fill_run(runs_dir, 1, [FillSpec(0.93, 5, 3, pull_problem="q0: NO_PERMISSION")]),
        "no_refusal": write_disk_fill_run(runs_dir, 2, [FillSpec(0.93, 5, 0)]),
        "no_resume": write_disk_fill_run(runs_dir, 3, [FillSpec(0.93, 5, 3, resume_ns=None)]),
        "no_chaos": write_disk_fill_run(runs_dir, 4, [FillSpec(0.93, 6, 2)], with_chaos_json=False),
        "lossy": write_disk_fill_run(runs_dir, 5, [FillSpec(0.93, 5, 3)], lost=2),
    }
    return runs_dir, ids


@pytest.fixture(scope="module")
def cycles(spark, disk_runs):
    return fill_cycles(spark, discover_runs(disk_runs[0]))


def test_fill_windows_are_the_watermark_cycles_only():
    faults = [{"ts_ns": 10, "kind": "disk_fill", "params": {"cycle": 0, "used_ratio": 0.93}},
              {"ts_ns": 20, "kind": "disk_free", "params": {"cycle": 0}},
              {"ts_ns": 30, "kind": "disk_fill", "params": {"phase": "enospc"}},
              {"ts_ns": 40, "kind": "disk_free", "params": {"phase": "enospc"}},
              {"ts_ns": 50, "kind": "disk_fill", "params": {"cycle": 1, "used_ratio": 0.94}}]  # never freed
    assert [(w.cycle, w.start_ns, w.end_ns, w.used_ratio) for w in fill_windows("r", faults)] == [(0, 10, 20, 0.93)]


def test_fill_cycles_count_refusals_reads_and_the_return_of_writes(cycles, disk_runs):
    _, ids = disk_runs
    good = [c for c in cycles if c.run_id == ids["good"]]
    assert [(c.cycle, c.used_ratio, c.refused, c.acked_in_window, c.delivered_in_window) for c in good] == [
        (0, 0.93, 3, 5, 5), (1, 0.95, 4, 7, 7)]
    assert [c.first_refusal_s for c in good] == [pytest.approx(0.601), pytest.approx(0.601)]
    assert [c.resumed_s for c in good] == [pytest.approx(0.9), pytest.approx(0.4)]
    assert all(c.remark_disk_full and c.pull_probed and c.reads_ok and not c.problems() for c in good)
    no_chaos = next(c for c in cycles if c.run_id == ids["no_chaos"])
    assert not no_chaos.pull_probed and no_chaos.reads_ok and no_chaos.remark_disk_full is None


def test_disk_full_protection_verdicts(cycles, disk_runs):
    runs_dir, ids = disk_runs
    losses = [x for x in (loss.run_loss(r) for r in discover_runs(runs_dir)) if x is not None]

    def judge(case):
        return loss.disk_full_protection([c for c in cycles if c.run_id == ids[case]], losses)

    good = judge("good")
    assert good.claim is ClaimId.DISK_FULL_PROTECTION and good.verdict is Verdict.HELD
    assert good.measured.startswith("2 fill cycles at 93.0–95.0 % disk use; 7 sends refused")
    assert "pulls served in 2 of 2" in good.measured and "writes back 0.40–0.90 s" in good.measured
    assert judge("no_chaos").verdict is Verdict.HELD  # deliveries inside the interval stand in for the probe
    for case, words in (("no_pull", "pulls not served: q0: NO_PERMISSION"),
                        ("no_refusal", "no send refused"), ("no_resume", "no send acknowledged within 20 s"),
                        ("lossy", "2 acknowledged messages lost")):
        f = judge(case)
        assert f.verdict is Verdict.NOT_HELD and words in f.measured, case
    assert loss.disk_full_protection([], losses).verdict is Verdict.NOT_MEASURED


def test_loss_report_writes_the_five_findings_and_the_disk_fill_table(spark, disk_runs, tmp_path):
    runs_dir, ids = disk_runs
    loss.run(spark, runs_dir, tmp_path)
    findings = {f["claim"]: f for f in json.loads((tmp_path / "loss" / "findings.json").read_text())}
    assert set(findings) == {"sync-no-loss", "async-kill9-no-loss", "async-power-loss-tail", "disk-full-protection",
                            "replication-master-loss"}
    assert findings["sync-no-loss"]["verdict"] == "not measured yet"  # no crash runs here
    assert findings["disk-full-protection"]["verdict"] == "not held"  # some of these runs fail on purpose
    assert set(findings["disk-full-protection"]["runs"]) == set(ids.values())
    page = (tmp_path / "loss" / "index.html").read_text(encoding="utf-8")
    assert "Disk fill: writes refused above 90 %" in page and "disk_fill_cycles.csv" in page
    assert "Claims judged from these runs" in page


def test_runs_that_lost_a_master_are_not_flush_mode_evidence() -> None:
    """A replication run's kill -9 cycles restart its master, but it ends on the slave: an ASYNC_MASTER's loss
    there is replication's, so it neither fails nor supports the flush-mode claims."""
    group = _row("g", "ASYNC_FLUSH", "kill9+master_kill9", lost=3)
    assert loss.async_kill9_no_loss([group], {}).verdict is Verdict.NOT_MEASURED
    assert loss.sync_no_loss([_row("s", "SYNC_FLUSH", "kill9+master_disk_destroyed", lost=3)], {}).verdict \
        is Verdict.NOT_MEASURED
    plain = _row("p", "ASYNC_FLUSH", "kill9")
    held = loss.async_kill9_no_loss([group, plain], {})
    assert held.verdict is Verdict.HELD and held.runs == ("p",)
