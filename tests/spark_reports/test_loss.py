"""The loss report carries each run's checker counts and groups them by flush mode × fault × profile."""

import csv

from spark_reports.run_loss import RunLoss, fault_label, grouped, headline_cell, run_loss, unflushed_bytes
from spark_reports.run_records import discover_runs


def _read(path):
    with path.open(encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_per_run_counts_equal_the_known_history(reports, synth):
    rows = {r["run_id"]: r for r in _read(reports.out_dir / "loss" / "loss_runs.csv")}
    assert set(rows) == set(synth.expected)
    for run_id, expected in synth.expected.items():
        row, check = rows[run_id], expected.check
        for field in ("attempted", "acknowledged", "lost", "lost_bytes", "duplicated", "recovered", "unexpected"):
            assert int(row[field]) == check[field], field
        assert row["unflushed_bytes"] == ("" if expected.unflushed_bytes is None else str(expected.unflushed_bytes))


def test_configuration_columns_come_from_meta_and_faults(reports, synth):
    rows = {r["run_id"]: r for r in _read(reports.out_dir / "loss" / "loss_runs.csv")}
    configs = {(r["flush_mode"], r["fault"], r["sysctl_profile"]) for r in rows.values()}
    assert configs == {
        ("ASYNC_FLUSH", "power_loss", "rocketmq-os.sh"),
        ("SYNC_FLUSH", "power_loss", "durable"),
        ("ASYNC_FLUSH", "kill9", "none"),
        ("SYNC_FLUSH", "kill9", "rocketmq-os.sh (not applied: not root)"),
    }


def test_only_async_flush_under_power_loss_loses_messages_and_within_the_unflushed_window(reports, synth):
    for row in _read(reports.out_dir / "loss" / "loss_runs.csv"):
        if (row["flush_mode"], row["fault"]) == ("ASYNC_FLUSH", "power_loss"):
            assert 0 < int(row["lost_bytes"]) < int(row["unflushed_bytes"])
        else:
            assert int(row["lost"]) == 0


def test_headline_table(reports, synth):
    rows = {r["flush_mode"]: r for r in _read(reports.out_dir / "loss" / "loss_headline.csv")}
    async_power = next(e for e in synth.expected.values() if e.unflushed_bytes and e.check["lost"])
    acked, lost = async_power.check["acknowledged"], async_power.check["lost"]
    assert rows["ASYNC_FLUSH"]["power_loss"].startswith(f"{acked - lost:,} of {acked:,} kept")
    assert rows["SYNC_FLUSH"]["power_loss"].startswith("all ")
    assert rows["SYNC_FLUSH"]["kill9"].startswith("all ")


def test_grouping_sums_runs_in_spark(spark, synth):
    losses = [x for x in (run_loss(r) for r in discover_runs(synth.runs_dir)) if x is not None]
    by_mode = {g.flush_mode: g for g in grouped(spark, losses, ("flush_mode", "fault"))
               if g.fault == "kill9"}
    totals: dict[str, int] = {}
    for loss in losses:
        if loss.fault == "kill9":
            totals[loss.flush_mode] = totals.get(loss.flush_mode, 0) + loss.duplicated
    assert {m: g.duplicated for m, g in by_mode.items()} == totals
    assert sum(g.runs for g in grouped(spark, losses, ("flush_mode", "fault", "profile"))) == len(losses)
    by_mode_fault = grouped(spark, losses, ("flush_mode", "fault"))
    invalid = sum(g.invalid_runs for g in by_mode_fault)
    assert invalid == sum(1 for e in synth.expected.values() if not e.check["valid"]) == 1
    assert sum(headline_cell(g).startswith("all ") for g in by_mode_fault) == 3


def test_fault_helpers():
    faults = [{"kind": "power_loss", "params": {"written_offset": 10_000, "flushed_offset": 8_000}},
              {"kind": "kill9", "params": {}},
              {"kind": "power_loss", "params": {"written_offset": 50, "flushed_offset": 50}}]
    assert fault_label(faults) == "kill9+power_loss"
    assert fault_label([]) == "none"
    assert unflushed_bytes(faults) == 2_000
    assert unflushed_bytes(faults[1:2]) is None


def test_unread_messages_are_a_column_of_their_own_summed_per_group(spark, reports):
    """A run whose consumers fell behind: its unread count (check.json "unread", from the final read) is carried
    per run and summed per group, apart from lost."""
    def run(run_id: str, unread: int) -> RunLoss:
        return RunLoss(run_id, "ASYNC_FLUSH", "none", "none", 100, 100, 0, 0, None, 0, 0, 0, True, unread=unread)

    (group,) = grouped(spark, [run("a", 7), run("b", 5)], ("flush_mode", "fault"))
    assert (group.unread, group.lost, group.runs) == (12, 0, 2)
    header = _read(reports.out_dir / "loss" / "loss_runs.csv")[0]
    assert "unread" in header and int(header["unread"]) == 0  # the synthetic runs were all read in full


def _group_run(runs_dir, role: str, lag: int) -> None:
    """A broker group's run record as chaos/replication.py writes one: the master's brokerRole in meta.json,
    sends answered SEND_OK (0) or FLUSH_SLAVE_TIMEOUT (12), the master fault with the lag, check.json."""
    from harness.checker import check_run
    from harness.records import FaultKind, RunRecord

    rec = RunRecord.create(runs_dir, "chaos-master.disk.destroyed", {}, ["pytest"])
    rec.update_meta(broker={"brokerRole": role, "flushDiskType": "ASYNC_FLUSH"})
    w = rec.events_writer("p0", fmt="jsonl", background=False)
    for i, code in enumerate([0, 0, 12, 12]):
        w.record_send(f"k{i}", "T", 0, i, 10 * i, 10 * i + 1, "ok", code=code, nbytes=10)
    w.record_receive("k0", "T", 0, 0, 100, 100, nbytes=10)
    w.record_receive("k2", "T", 0, 2, 100, 100, nbytes=10)
    rec.add_fault(FaultKind.KILL9, "broker-a", lag_bytes=5)
    rec.add_fault(FaultKind.MASTER_DISK_DESTROYED, "broker-a", lag_bytes=lag, final=True)
    rec.finish()
    check_run(rec.run_dir, allow_loss=True)


def test_replication_mode_master_only_and_promised_loss_per_run_and_group(spark, tmp_path):
    _group_run(tmp_path, "SYNC_MASTER", 4096)
    _group_run(tmp_path, "ASYNC_MASTER", 8192)
    losses = [x for x in (run_loss(r) for r in discover_runs(tmp_path)) if x is not None]
    got = sorted((x.replication, x.fault, x.acknowledged, x.acked_master_only, x.lost, x.lost_promised,
                  x.replication_lag_bytes) for x in losses)
    assert got == [("ASYNC_MASTER", "kill9+master_disk_destroyed", 4, 2, 2, 1, 8192),
                   ("SYNC_MASTER", "kill9+master_disk_destroyed", 4, 2, 2, 1, 4096)]
    groups = grouped(spark, losses, ("flush_mode", "replication", "fault"))
    assert sorted((g.replication, g.acked_master_only, g.lost_promised) for g in groups) == [
        ("ASYNC_MASTER", 2, 1), ("SYNC_MASTER", 2, 1)]
    (merged,) = grouped(spark, losses, ("flush_mode", "fault"))
    assert (merged.replication, merged.lost_promised, merged.runs) == ("(all)", 2, 2)


def test_passed_over_comes_from_chaos_json_and_is_summed_per_group_apart_from_lost(spark, tmp_path):
    """A chaos run's chaos.json ``passed_over.count`` (acknowledged, kept by the store, never delivered to the
    live group: docs/findings.md F14) is read per run and summed per group; a run without chaos.json has 0."""
    import json

    from harness.checker import check_run
    from harness.records import FaultKind, RunRecord

    def chaos_run(passed: int | None) -> None:
        rec = RunRecord.create(tmp_path, "chaos-power.loss-sync-none", {}, ["pytest"])
        rec.update_meta(broker={"flushDiskType": "SYNC_FLUSH"})
        w = rec.events_writer("p0", fmt="jsonl", background=False)
        for i in range(3):
            w.record_send(f"k{i}", "T", 0, i, 10 * i, 10 * i + 1, "ok", code=0, nbytes=10)
            w.record_receive(f"k{i}", "T", 0, i, 10 * i + 2, 10 * i + 2, nbytes=10)
        rec.add_fault(FaultKind.POWER_LOSS, "broker-a", written_offset=100, flushed_offset=100)
        rec.finish()
        check_run(rec.run_dir)
        if passed is not None:
            (rec.run_dir / "chaos.json").write_text(json.dumps({"passed_over": {"count": passed, "examples": []}}))

    chaos_run(4)
    chaos_run(3)
    chaos_run(None)
    losses = [x for x in (run_loss(r) for r in discover_runs(tmp_path)) if x is not None]
    assert sorted(x.passed_over for x in losses) == [0, 3, 4]
    (group,) = grouped(spark, losses, ("flush_mode", "fault"))
    assert (group.passed_over, group.lost, group.runs) == (7, 0, 3)
