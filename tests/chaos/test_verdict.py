"""The chaos gate's rules (chaos.verdict), on hand-made cycles and losses."""

from __future__ import annotations

from dataclasses import dataclass

from chaos.verdict import charge_to_crashes, evaluate


@dataclass
class Cyc:
    cycle: int
    kind: str
    fault_ns: int
    restored_ns: int | None
    written_offset: int = -1
    flushed_offset: int = -1
    written_bound: int = -1
    recovered_offset: int = -1
    ok: bool = True
    error: str | None = None
    quarantined_bytes: int = 0
    quarantined_intact_records: int = 0

    @property
    def window_bytes(self) -> int:
        if self.written_bound < 0 or self.flushed_offset < 0:
            return -1
        return max(0, self.written_bound - self.flushed_offset)


@dataclass
class Ack:
    commit_log_offset: int
    end_ns: int
    status: str = "SEND_OK"


@dataclass
class Check:
    lost: int = 0
    unexpected: int = 0


REC = 100  # record size


def crash(i, t, flushed, bound, recovered=None, kind="power_loss"):
    return Cyc(i, kind, fault_ns=t, restored_ns=t + 10, written_offset=bound, flushed_offset=flushed,
               written_bound=bound, recovered_offset=flushed if recovered is None else recovered)


def judge(fault, flush, cycles, lost=None, absent=None, check=None, **kw):
    lost = lost or {}
    absent = absent if absent is not None else dict(lost)
    return evaluate(fault, flush, check or Check(lost=len(lost)), cycles, lost, absent, REC, 64, **kw)


def test_a_clean_run_passes():
    v = judge("kill9", "ASYNC_FLUSH", [crash(0, 100, 500, 900, recovered=900, kind="kill9")])
    assert v.ok and v.violations == []


def test_any_missing_message_fails_sync_flush_under_every_fault():
    for fault in ("kill9", "power_loss", "power_loss_torn", "disk_fill", "pause"):
        v = judge(fault, "SYNC_FLUSH", [crash(0, 100, 500, 900)], absent={"k": Ack(600, 50)})
        assert not v.ok, fault
        assert any("SYNC_FLUSH" in x for x in v.violations)


def test_a_flush_timeout_ack_lost_to_power_is_reported_apart_under_sync_flush():
    v = judge("power_loss", "SYNC_FLUSH", [crash(0, 100, 500, 900)],
              absent={"k": Ack(600, 50, "FLUSH_DISK_TIMEOUT")})
    assert v.ok and v.lost_flush_timeout == 1


def test_async_kill9_pause_and_disk_fill_lose_nothing():
    for fault in ("kill9", "pause", "disk_fill"):
        assert not judge(fault, "ASYNC_FLUSH", [], absent={"k": Ack(600, 50)}).ok
        assert judge(fault, "ASYNC_FLUSH", []).ok


def test_async_power_loss_within_the_unflushed_window_passes():
    cycles = [crash(0, 100, 500, 900), crash(1, 200, 1000, 1400)]
    absent = {"a": Ack(500, 50), "b": Ack(600, 60), "c": Ack(1300, 150)}  # 2 records at crash 0, 1 at crash 1
    v = judge("power_loss", "ASYNC_FLUSH", cycles, absent=absent)
    assert v.ok, v.violations
    assert [(c.cycle, c.lost, c.lost_log_bytes) for c in v.per_crash] == [(0, 2, 200), (1, 1, 100)]


def test_a_message_lost_before_the_flushed_offset_fails_async_power_loss():
    v = judge("power_loss", "ASYNC_FLUSH", [crash(0, 100, 500, 900)], absent={"a": Ack(400, 50)})
    assert not v.ok and any("before the flushed offset" in x for x in v.violations)


def test_a_torn_power_loss_cycle_is_a_crash_under_its_own_name():
    cycles = [crash(0, 100, 500, 900, kind="power_loss_torn")]
    v = judge("power_loss_torn", "ASYNC_FLUSH", cycles, absent={"a": Ack(500, 50)})
    assert v.ok, v.violations
    assert [(c.cycle, c.lost) for c in v.per_crash] == [(0, 1)]


def test_more_lost_than_the_window_fails_async_power_loss():
    absent = {f"k{i}": Ack(500 + 100 * i, 50) for i in range(5)}  # 500 bytes, window 400
    v = judge("power_loss", "ASYNC_FLUSH", [crash(0, 100, 500, 900)], absent=absent)
    assert not v.ok and any("more than the unflushed window" in x for x in v.violations)


def test_an_unknown_window_fails_unless_the_broker_reports_no_flushed_offset():
    # the reference broker always reports its flushed offset: a window it could not sample is a failure; RocketMQ
    # 4.9.8 reports none, and an ASYNC power loss then has nothing to be held to but its flush mode
    absent = {"a": Ack(500, 50)}
    assert not judge("power_loss", "ASYNC_FLUSH", [crash(0, 100, -1, 900)], absent=absent).ok
    v = judge("power_loss", "ASYNC_FLUSH", [crash(0, 100, -1, 900)], absent=absent, flushed_reported=False)
    assert v.ok, v.violations
    assert [(c.cycle, c.lost, c.window_bytes) for c in v.per_crash] == [(0, 1, -1)]
    # ... but not under SYNC_FLUSH, nor with a kill -9
    assert not judge("power_loss", "SYNC_FLUSH", [crash(0, 100, -1, 900)], absent=absent, flushed_reported=False).ok
    assert not judge("kill9", "ASYNC_FLUSH", [], absent=absent, flushed_reported=False).ok


def test_losses_are_charged_by_restart_time_not_kill_time():
    # acknowledged a moment after the kill was recorded (the answer was read late), before the restart:
    # it belongs to crash 0, not crash 1
    cycles = [crash(0, 100, 500, 900), crash(1, 200, 1000, 1400)]
    per, after = charge_to_crashes({"late": Ack(800, 105)}, cycles, REC)
    assert [c.lost for c in per] == [1, 0] and after == []


def test_a_loss_after_the_last_restart_fails():
    v = judge("power_loss", "ASYNC_FLUSH", [crash(0, 100, 500, 900)], absent={"z": Ack(2000, 500)})
    assert not v.ok and any("no crash after them" in x for x in v.violations)


def test_unexpected_corrupted_unreachable_and_unrecovered_cycles_fail():
    base = [crash(0, 100, 500, 900, kind="kill9")]
    assert not judge("kill9", "ASYNC_FLUSH", base, check=Check(unexpected=1)).ok
    assert not judge("kill9", "ASYNC_FLUSH", base, corrupted=1).ok
    assert not judge("power_loss", "ASYNC_FLUSH", base, unreachable=3).ok
    bad = [Cyc(0, "pause", 100, None, ok=False, error="no send acknowledged")]
    v = judge("pause", "SYNC_FLUSH", bad)
    assert not v.ok and "no send acknowledged" in v.violations[0]
    assert not judge("pause", "SYNC_FLUSH", [], drain_complete=False, drain_problems=["stuck"]).ok


def test_kill9_log_must_not_shrink_below_the_written_offset():
    c = crash(0, 100, 500, 900, recovered=800, kind="kill9")
    c.written_offset = 850
    v = judge("kill9", "ASYNC_FLUSH", [c])
    assert not v.ok and any("before the written offset" in x for x in v.violations)


def test_checker_and_chaos_accounting_must_agree():
    v = judge("kill9", "ASYNC_FLUSH", [], lost={}, check=Check(lost=2))
    assert not v.ok and any("accounting disagrees" in x for x in v.violations)


def test_never_delivered_counts_even_when_below_the_cleaned_floor():
    # disk fill: a message missing from the drain because cleaning deleted it is fine only if it was delivered
    v = judge("disk_fill", "ASYNC_FLUSH", [], lost={"k": Ack(10, 5)}, absent={})
    assert not v.ok and v.absent == 1


# ---- rule 7: lookups by key and id after each restart (chaos.lookups) ---------------------------------------

def lookup(cycle, sampled, missing=None, error=None):
    from chaos.lookups import LookupCheck, Way

    c = LookupCheck(cycle, sampled=sampled, error=error)
    for way in Way:
        keys = (missing or {}).get(way.value, [])
        c.missing[way.value] = list(keys)
        c.found[way.value] = sampled - len(keys)
    return c


def test_lookups_that_found_everything_pass_and_are_counted():
    v = judge("kill9", "ASYNC_FLUSH", [crash(0, 100, 500, 900, recovered=900, kind="kill9")],
              lookups=[lookup(0, 200), lookup(1, 150)])
    assert v.ok
    assert v.lookups is not None and v.lookups.sampled == 350
    assert v.lookups.found == {"key": 350, "uniq": 350, "id": 350} and v.lookups.missed_total == 0


def test_a_pullable_message_not_found_by_key_fails_the_verdict():
    v = judge("kill9", "ASYNC_FLUSH", [crash(0, 100, 500, 900, recovered=900, kind="kill9")],
              lookups=[lookup(0, 200, missing={"key": ["p0-1", "p0-2"], "uniq": ["p0-1"]})])
    assert not v.ok
    assert v.lookups is not None and v.lookups.missed == {"key": 2, "uniq": 1, "id": 0}
    assert any("not found after recovery: 2 by key, 1 by uniq" in x for x in v.violations)


def test_a_message_not_found_by_id_alone_fails_the_verdict():
    v = judge("kill9", "SYNC_FLUSH", [crash(0, 100, 500, 900, recovered=900, kind="kill9")],
              lookups=[lookup(0, 10, missing={"id": ["p0-7"]})])
    assert not v.ok and v.lookups is not None and v.lookups.missed["id"] == 1


def test_a_message_the_power_loss_took_is_not_a_lookup_miss():
    """ASYNC_FLUSH + power loss: a key absent from the broker at the end is judged by the loss rules only."""
    lost = {"p0-9": Ack(850, 50)}
    v = judge("power_loss", "ASYNC_FLUSH", [crash(0, 100, 800, 900)], lost=lost,
              lookups=[lookup(0, 200, missing={"key": ["p0-9"], "uniq": ["p0-9"], "id": ["p0-9"]})])
    assert v.ok, v.violations
    assert v.lookups is not None and v.lookups.missed_total == 0
    assert v.lookups.excused == {"key": 1, "uniq": 1, "id": 1}


def test_a_probe_that_could_not_run_fails_the_verdict():
    v = judge("kill9", "ASYNC_FLUSH", [crash(0, 100, 500, 900, recovered=900, kind="kill9")],
              lookups=[lookup(0, 200, error="ConnectionRefusedError: refused")])
    assert not v.ok and any("lookup probe failed" in x for x in v.violations)


def test_the_sample_spreads_over_the_run_and_keeps_the_newest():
    from chaos.lookups import choose_sample

    acks = {f"k{i:04d}": Ack(i * 100, i) for i in range(1000)}
    acks["late"] = Ack(5, 2000)  # acknowledged after the cut: never sampled
    acks["nooffset"] = Ack(-1, 3)  # no offset known: cannot be looked up by id
    s = choose_sample(acks, before_ns=1500, limit=200, newest=50)
    assert len(s) == 200 and len(set(s)) == 200
    assert s[-50:] == [f"k{i:04d}" for i in range(950, 1000)]
    assert s[0] == "k0000" and "late" not in s and "nooffset" not in s
    assert choose_sample({k: acks[k] for k in ["k0001", "k0002"]}, 1500) == ["k0001", "k0002"]


def test_a_kill9_quarantine_of_intact_records_fails_the_gate_a_torn_power_loss_one_does_not():
    """A kill injects no damage: recovery may cut (and quarantine) at most the record being written. Intact
    records in the quarantine fail a kill -9 cell; after a torn power loss the same is only recorded."""
    torn_last = crash(0, 100, 500, 900, recovered=900, kind="kill9")
    torn_last.quarantined_bytes = REC - 10
    assert judge("kill9", "ASYNC_FLUSH", [torn_last]).ok
    for bytes_, intact in ((REC * 3, 2), (REC + 1, 0), (50, 1)):
        c = crash(0, 100, 500, 900, recovered=900, kind="kill9")
        c.quarantined_bytes, c.quarantined_intact_records = bytes_, intact
        v = judge("kill9", "SYNC_FLUSH", [c])
        assert not v.ok and any("quarantined" in x for x in v.violations), (bytes_, intact)
    torn = crash(0, 100, 500, 900)
    torn.quarantined_bytes, torn.quarantined_intact_records = REC * 40, 30
    assert judge("power_loss_torn", "SYNC_FLUSH", [torn]).ok


def test_an_undrained_experiment_is_incomplete_not_a_loss():
    """The soak's crash-33 case: the cell stopped early with 234,635 acknowledged sends not yet consumed and no
    drain; the verdict must say "incomplete", count them, and call none of them missing or lost."""
    unseen = {f"k{i}": Ack(100 * i, 50) for i in range(5)}
    v = judge("power_loss", "SYNC_FLUSH", [crash(0, 100, 500, 900)], lost=unseen, drain_complete=False,
              drain_problems=["broker not running at the end"])
    assert not v.ok and not v.complete
    assert v.violations == ["incomplete: not drained (broker not running at the end); 5 acknowledged messages "
                            "not seen by a consumer were not judged"]
    assert v.absent == 5 and not any("missing" in x or "lost" in x for x in v.violations)


def test_an_undrained_experiment_still_reports_what_does_not_need_the_drain():
    c = crash(0, 100, 500, 900, recovered=800, kind="kill9")
    v = judge("kill9", "SYNC_FLUSH", [c], drain_complete=False, corrupted=2)
    assert not v.complete
    assert any("corrupted" in x for x in v.violations)
    assert any("before the written offset" in x for x in v.violations)


def test_a_drained_experiment_is_complete():
    v = judge("kill9", "SYNC_FLUSH", [], absent={"k": Ack(600, 50)})
    assert v.complete and not v.ok
