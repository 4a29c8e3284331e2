"""A peer's power-loss losses judged by time against its promise (chaos.peer_verdict), the disk-fill answers
summary, and the findings a violated promise makes (chaos.peer_faults). Pure: no processes."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
from click.testing import CliRunner

from chaos.cli import format_peer_table, main
from chaos.peer_faults import PeerFaultResult, answers_while_full, peer_findings
from chaos.peer_verdict import PAGE_CACHE_WINDOW_S, exposure_window_s, judge_losses, lost_acks
from harness.records.findings import FindingKind

S = 1_000_000_000


def test_the_window_follows_the_promise() -> None:
    assert exposure_window_s("page_cache") == PAGE_CACHE_WINDOW_S
    assert exposure_window_s("fsync") == 0.0
    assert exposure_window_s(None) == 0.0  # an unknown promise excuses nothing


def test_lost_acks_are_acknowledged_keys_never_received() -> None:
    events = pa.table({
        "op": ["send", "send", "send", "send", "receive", "receive"],
        "key": ["a", "b", "c", "d", "a", "c"],
        "outcome": ["ok", "ok", "ok", "fail", "ok", "fail"],
        "end_ns": [10, 20, 30, 40, 50, 60],
    })
    # b: acked, never received; c: its only receive row failed; d: never acknowledged, so not lost
    assert lost_acks(events) == {"b": 20, "c": 30}


def test_page_cache_loss_inside_the_window_is_allowed_and_after_the_last_crash_is_not() -> None:
    crashes = [100 * S, 200 * S]
    lost = {"before-first": 90 * S, "between": 180 * S, "too-early-for-the-second": 150 * S,
            "after-last": 210 * S, "long-before": 100 * S - 200 * S}
    v = judge_losses(lost, crashes, window_s=30.0)
    assert (v.lost, v.allowed, v.beyond_promise) == (5, 2, 3)
    assert v.samples_beyond == ["long-before", "too-early-for-the-second", "after-last"]  # in acknowledgement order
    assert not v.ok


def test_an_fsync_promise_allows_no_loss_at_all() -> None:
    v = judge_losses({"k": 99 * S}, [100 * S], window_s=exposure_window_s("fsync"))
    assert (v.allowed, v.beyond_promise, v.ok) == (0, 1, False)
    assert judge_losses({}, [100 * S], window_s=0.0).ok


def test_answers_while_full_counts_distinct_answers_in_the_interval() -> None:
    errors = [(5, "fail", 503, "write /x/msgs/12.blk: no space left on device"),
              (6, "fail", 503, "write /x/msgs/13.blk: no space left on device"),
              (7, "unknown", -1, "TimeoutError"),
              (50, "fail", 503, "outside the interval")]
    out = answers_while_full(errors, 0, 10)
    assert out == [{"outcome": "fail", "code": 503, "error": "write /x/msgs/N.blk: no space left on device",
                    "count": 2},
                   {"outcome": "unknown", "code": -1, "error": "TimeoutError", "count": 1}]


def test_only_a_violated_promise_makes_a_finding() -> None:
    fine = PeerFaultResult("nats", "power_loss", 3, broker="nats-server 2.9.10")
    broken = PeerFaultResult("rabbitmq-classic", "power_loss", 3, broker="rabbitmq-server 3.10.8",
                             violations=["2 acknowledged messages lost beyond the fsync promise"])
    stalled = PeerFaultResult("rabbitmq-quorum", "kill9", 3, violations=["5 acknowledged messages lost under kill9"],
                              cycle_info=[{"cycle": 0, "not_serving": "no acknowledged send 60 s after the restart"}])
    skipped = PeerFaultResult("nats", "disk_fill", 3, skipped="no root", violations=["x"])
    found = peer_findings([fine, broken, stalled, skipped])
    assert [(f.broker, f.kind) for f in found] == [("rabbitmq-server 3.10.8", FindingKind.LOSS),
                                                   ("rabbitmq-quorum", FindingKind.STALL)]
    assert "--driver rabbitmq-classic --faults power_loss" in found[0].reproduce


def test_torn_power_loss_on_a_peer_is_a_skipped_row_with_the_reason(tmp_path: Path) -> None:
    out = CliRunner().invoke(main, ["matrix", "--driver", "nats", "--faults", "power_loss_torn", "--cycles", "1",
                                    "--runs-dir", str(tmp_path), "--gate", "--json"])
    assert out.exit_code == 0, out.output
    (row,) = json.loads(out.output)
    assert row["verdict"] == "skipped" and "power_loss_torn is not built for peer brokers" in row["skipped"]
    # With --require-all the skipped cell fails the gate.
    out = CliRunner().invoke(main, ["matrix", "--driver", "nats", "--faults", "power_loss_torn", "--cycles", "1",
                                    "--runs-dir", str(tmp_path), "--gate", "--require-all"])
    assert out.exit_code == 1


def test_the_peer_table_notes_what_a_full_disk_answered() -> None:
    row = PeerFaultResult("nats", "disk_fill", 1, cycle_info=[
        {"cycle": 0, "used_ratio": 0.98, "acked_while_full": 3, "failed_while_full": 40, "unknown_while_full": 0,
         "answers": [{"outcome": "fail", "code": 503, "error": "no space left on device", "count": 40}],
         "recovered_s": 0.7, "restarted": False},
        {"cycle": 1, "not_serving": "no acknowledged send 60 s after the restart"}]).summary()
    text = format_peer_table([row])
    assert "nats/disk_fill cycle 0: disk 98.0% used: acked 3, failed 40, unknown 0 (40x fail 503 no space left" in text
    assert "nats/disk_fill cycle 1: no acknowledged send 60 s after the restart" in text
