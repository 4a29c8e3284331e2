"""The replication claim from broker-group run records: SYNC_MASTER judged on its promised sends, ASYNC_MASTER on
the share kept, both only from runs whose master lost its disk."""

import pytest

from spark_reports.claims import ClaimId, Verdict
from spark_reports.replication_evidence import replication_master_loss
from spark_reports.run_loss import run_loss
from spark_reports.run_records import discover_runs
from spark_reports.synthetic_claims import MasterLossSpec, write_master_loss_run

SYNC, ASYNC = "SYNC_MASTER", "ASYNC_MASTER"


def _judge(tmp_path, specs):
    ids = [write_master_loss_run(tmp_path, i, spec) for i, spec in enumerate(specs)]
    losses = [x for x in (run_loss(r) for r in discover_runs(tmp_path)) if x is not None]
    return replication_master_loss(losses, "loss"), ids


def test_held_states_promised_loss_apart_from_master_only_and_the_async_share_with_its_lag(tmp_path):
    # SYNC: 3 sends answered FLUSH_SLAVE_TIMEOUT lost with the master's disk, none of the SEND_OK ones.
    # ASYNC: 2,000 acknowledged, 15 lost: 99.25 % kept.
    f, ids = _judge(tmp_path, [MasterLossSpec(SYNC, 1000, lost=3, master_only=40, lag_bytes=2048),
                               MasterLossSpec(SYNC, 500),
                               MasterLossSpec(ASYNC, 1000, lost=10, lag_bytes=300_000),
                               MasterLossSpec(ASYNC, 1000, lost=5, lag_bytes=100_000)])
    assert f.claim is ClaimId.REPLICATION_MASTER_LOSS and f.verdict is Verdict.HELD
    assert set(f.runs) == set(ids)
    assert "0 of 1,460 promised (SEND_OK) lost" in f.measured
    assert "40 answered FLUSH_SLAVE_TIMEOUT/SLAVE_NOT_AVAILABLE, of which 3 lost" in f.measured
    assert "99.25 % of 2,000 acknowledged kept, 15 lost" in f.measured
    assert "100,000–300,000 B behind at the crash" in f.measured and "lowest run 99.00 %" in f.measured
    assert f.figures["async_kept_share"] == pytest.approx(0.9925)
    assert f.figures["async_lag_max_bytes"] == 300_000 and f.figures["sync_lost_promised"] == 0


def test_a_lost_promised_send_or_async_under_99_percent_is_not_held(tmp_path):
    f, ids = _judge(tmp_path / "sync", [MasterLossSpec(SYNC, 1000, lost=1, lost_promised=1),
                                        MasterLossSpec(ASYNC, 1000)])
    assert f.verdict is Verdict.NOT_HELD and f"lost promised sends in {ids[0]}" in f.measured
    f, _ = _judge(tmp_path / "async", [MasterLossSpec(SYNC, 1000), MasterLossSpec(ASYNC, 1000, lost=11)])
    assert f.verdict is Verdict.NOT_HELD and "98.90 % of 1,000 acknowledged kept" in f.measured
    assert "ASYNC_MASTER kept under 99 %" in f.measured


def test_not_measured_without_either_mode_and_a_killed_master_keeps_its_disk(tmp_path):
    f, _ = _judge(tmp_path / "one", [MasterLossSpec(SYNC, 1000)])
    assert f.verdict is Verdict.NOT_MEASURED and f.measured == "no ASYNC_MASTER run"
    # master_kill9 leaves the master's store in place: not the lost disk the claim is about.
    f, _ = _judge(tmp_path / "kill", [MasterLossSpec(SYNC, 1000, fault="master_kill9"),
                                      MasterLossSpec(ASYNC, 1000, lost=500, fault="master_kill9")])
    assert f.verdict is Verdict.NOT_MEASURED and f.runs == ()
    assert replication_master_loss([], "loss").measured == "no SYNC_MASTER or ASYNC_MASTER run"


def test_too_few_promised_sends_in_the_final_windows_is_inconclusive_not_held(tmp_path):
    # No loss, but the SYNC_MASTER runs promised only 120 + 300 sends just before the master was lost: too few
    # to say the promise held. The figure is shown; a run without it (an older record) adds nothing.
    f, _ = _judge(tmp_path / "few", [MasterLossSpec(SYNC, 1000, promised_window=120),
                                     MasterLossSpec(SYNC, 1000, promised_window=300),
                                     MasterLossSpec(SYNC, 1000, promised_window=None),
                                     MasterLossSpec(ASYNC, 1000)])
    assert f.verdict is Verdict.INCONCLUSIVE
    assert "420 promised in the final cycles' windows" in f.measured and "Inconclusive: fewer than 500" in f.measured
    assert f.figures["sync_promised_final_window"] == 420
    f, _ = _judge(tmp_path / "enough", [MasterLossSpec(SYNC, 1000, promised_window=200),
                                        MasterLossSpec(SYNC, 1000, promised_window=300),
                                        MasterLossSpec(ASYNC, 1000)])
    assert f.verdict is Verdict.HELD and "500 promised in the final cycles' windows" in f.measured
    # A lost promise is not held whatever the count.
    f, _ = _judge(tmp_path / "lost", [MasterLossSpec(SYNC, 1000, lost=1, lost_promised=1, promised_window=10),
                                      MasterLossSpec(ASYNC, 1000)])
    assert f.verdict is Verdict.NOT_HELD
