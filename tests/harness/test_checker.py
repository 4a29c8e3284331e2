"""The checker on hand-built histories (one per category), and against a naive reference on random ones."""

# pyarrow ships no type information.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.bench import bench_checker
from harness.checker import Category, InvalidRunError, check_events, check_run
from harness.records import EVENTS_FULL_SCHEMA, Outcome, validate_run
from tests.harness.reference_checker import reference_order, reference_totals
from tests.harness.runs import write_run


def send(key: str, outcome: str = "ok", *, t: int = 0, queue: int = 0, offset: int = -1, worker: str = "p0",
         nbytes: int = 100, topic: str = "T", code: int = 0) -> dict[str, Any]:
    """A send that starts at t and is answered at t + 1 (an ok one with SEND_OK unless ``code`` says)."""
    return dict(op="send", key=key, outcome=outcome, start_ns=t, end_ns=t + 1, queue_id=queue, queue_offset=offset,
                worker=worker, bytes=nbytes, topic=topic, code=code)


def recv(key: str, *, t: int = 100, queue: int = 0, offset: int = -1, worker: str = "c0", session: str = "",
         outcome: str = "ok", topic: str = "T") -> dict[str, Any]:
    return dict(op="receive", key=key, outcome=outcome, start_ns=t, end_ns=t, queue_id=queue, queue_offset=offset,
                worker=worker, session=session, bytes=100, topic=topic)


def read(key: str, *, t: int = 200, queue: int = 0, offset: int = -1, topic: str = "T") -> dict[str, Any]:
    """A final-read row (harness.final_read): the harness found the message at its position after the run."""
    return dict(op="read", key=key, outcome="ok", start_ns=t, end_ns=t, queue_id=queue, queue_offset=offset,
                worker="final-read", session="final-read", bytes=100, topic=topic)


def totals(result: Any) -> dict[str, int]:
    return {k: getattr(result, k) for k in ("attempted", "acknowledged", "failed", "unknown", "lost", "unexpected",
                                            "duplicated", "recovered", "recovered_failed", "unread",
                                            "acked_master_only", "lost_promised")}


ZERO = dict(attempted=0, acknowledged=0, failed=0, unknown=0, lost=0, unexpected=0, duplicated=0, recovered=0,
            recovered_failed=0, unread=0, acked_master_only=0, lost_promised=0)


def test_clean_history_has_nothing_to_report() -> None:
    rows = [send("a", t=0, offset=0), send("b", t=10, offset=1), recv("a", offset=0, t=100), recv("b", offset=1, t=101)]
    r = check_events(rows)
    assert totals(r) == ZERO | dict(attempted=2, acknowledged=2)
    assert r.order_violations == {}
    assert r.samples == {}
    assert r.valid


def test_acknowledged_but_never_received_is_lost_with_its_bytes() -> None:
    r = check_events([send("a", nbytes=300), send("b", nbytes=7), recv("b")])
    assert (r.lost, r.lost_bytes) == (1, 300)
    assert r.samples[Category.LOST] == ["a"]
    assert not r.valid


def test_acknowledged_unreceived_but_found_by_the_final_read_is_unread_not_lost() -> None:
    r = check_events([send("a", offset=3), send("b", offset=4), recv("b", offset=4), read("a", offset=3)])
    assert (r.lost, r.unread, r.reads) == (0, 1, 1)
    assert r.samples[Category.UNREAD] == ["a"] and Category.LOST not in r.samples
    assert r.valid


def test_a_final_read_is_no_delivery_a_received_key_read_again_is_neither_unread_nor_duplicated() -> None:
    r = check_events([send("a", offset=3), recv("a", offset=3), read("a", offset=3), read("a", offset=3)])
    assert totals(r) == ZERO | dict(attempted=1, acknowledged=1)
    assert r.receives == 1 and r.reads == 2


def test_a_final_read_recovers_an_unknown_send_and_a_read_never_sent_is_unexpected() -> None:
    r = check_events([send("a", "unknown"), send("b", "fail"), read("a"), read("b"), read("ghost")])
    assert (r.recovered, r.recovered_failed, r.unexpected, r.unread) == (1, 1, 1, 0)
    assert not r.valid


FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE, FLUSH_DISK_TIMEOUT = 12, 11, 10


def test_acks_without_a_slave_are_acked_master_only_and_their_loss_is_not_a_promised_loss() -> None:
    rows = [send("ok"), send("fst", code=FLUSH_SLAVE_TIMEOUT), send("sna", code=SLAVE_NOT_AVAILABLE),
            send("fdt", code=FLUSH_DISK_TIMEOUT)]
    r = check_events(rows)
    assert totals(r) == ZERO | dict(attempted=4, acknowledged=4, lost=4, acked_master_only=2, lost_promised=1)
    assert r.samples[Category.ACKED_MASTER_ONLY] == ["fst", "sna"]
    assert r.samples[Category.LOST_PROMISED] == ["ok"]
    assert r.samples[Category.LOST] == ["fdt", "fst", "ok", "sna"]  # lost is judged as before
    assert not r.valid
    delivered = check_events(rows + [recv(k) for k in ("ok", "fst", "sna", "fdt")])
    assert (delivered.lost, delivered.lost_promised, delivered.acked_master_only) == (0, 0, 2)
    assert delivered.valid  # acked on the master only is no fault of the run


def test_one_send_ok_among_retries_makes_a_key_promised() -> None:
    rows = [send("k", code=FLUSH_SLAVE_TIMEOUT), send("k", t=5, code=0), send("m", code=SLAVE_NOT_AVAILABLE),
            send("m", t=5, code=FLUSH_SLAVE_TIMEOUT), send("m", "fail", t=9, code=14)]
    r = check_events(rows)
    assert (r.acknowledged, r.acked_master_only, r.lost, r.lost_promised) == (2, 1, 2, 1)
    assert r.samples[Category.LOST_PROMISED] == ["k"]


def test_a_history_without_codes_counts_its_ok_sends_as_send_ok() -> None:
    rows = [dict(op="send", key="a"), dict(op="send", key="b", outcome="unknown")]
    r = check_events(rows)
    assert (r.lost, r.lost_promised, r.acked_master_only) == (1, 1, 0)


def test_allow_loss_keeps_a_lossy_run_valid() -> None:
    r = check_events([send("a")], allow_loss=True)
    assert r.lost == 1 and r.valid


def test_received_but_never_attempted_is_unexpected_and_invalid_even_with_allow_loss() -> None:
    r = check_events([send("a"), recv("a"), recv("ghost")], allow_loss=True)
    assert r.unexpected == 1
    assert r.samples[Category.UNEXPECTED] == ["ghost"]
    assert not r.valid


def test_second_delivery_of_one_acknowledged_send_is_a_duplicate_that_does_not_invalidate() -> None:
    r = check_events([send("a"), recv("a", t=100), recv("a", t=200)])
    assert (r.duplicated, r.duplicate_deliveries) == (1, 1)
    assert r.samples[Category.DUPLICATED] == ["a"]
    assert r.valid


def test_workload_retry_of_a_key_is_another_possible_copy() -> None:
    # unknown then ok: two send rows, either may have stored the message, so two deliveries are no duplicate.
    rows = [send("a", "unknown", t=0), send("a", "ok", t=10), recv("a", t=100), recv("a", t=200)]
    r = check_events(rows)
    assert totals(r) == ZERO | dict(attempted=1, acknowledged=1)
    # A third delivery is one too many.
    assert check_events([*rows, recv("a", t=300)]).duplicated == 1


def test_unknown_outcome_received_is_recovered_and_never_lost() -> None:
    r = check_events([send("a", "unknown"), send("b", "unknown"), recv("a")])
    assert totals(r) == ZERO | dict(attempted=2, unknown=2, recovered=1)
    assert r.samples[Category.RECOVERED] == ["a"]
    assert r.samples[Category.UNKNOWN] == ["a", "b"]
    assert r.valid


def test_every_send_failed_is_failed_and_if_received_recovered_failed_not_unexpected() -> None:
    r = check_events([send("a", "fail"), send("a", "fail"), send("b", "fail"), recv("b")])
    assert totals(r) == ZERO | dict(attempted=2, failed=2, recovered_failed=1)
    assert r.samples[Category.RECOVERED_FAILED] == ["b"]
    assert r.valid


def test_a_fail_then_ok_retry_is_acknowledged() -> None:
    r = check_events([send("a", "fail", t=0), send("a", "ok", t=10)])
    assert totals(r) == ZERO | dict(attempted=1, acknowledged=1, lost=1, lost_promised=1)


def test_declined_receive_is_neither_delivery_nor_order_evidence() -> None:
    rows = [send("a", t=0, offset=0), send("b", t=10, offset=1),
            recv("b", offset=1, t=100, outcome="fail"), recv("a", offset=0, t=101), recv("b", offset=1, t=102)]
    r = check_events(rows, ordered=True)
    assert totals(r) == ZERO | dict(attempted=2, acknowledged=2)
    assert (r.receives, r.declined_receives) == (2, 1)
    assert r.order_violations == {}


def test_offsets_going_back_within_a_session_are_order_violations() -> None:
    rows = [send(k, t=10 * i, offset=i) for i, k in enumerate("abcd")]
    rows += [recv("a", offset=0, t=100), recv("c", offset=2, t=101), recv("b", offset=1, t=102),
             recv("d", offset=3, t=103)]
    r = check_events(rows)
    assert r.order_violations == {"T/0": 1}
    assert r.samples[Category.ORDER] == ["b"]
    assert r.valid  # an unordered run only reports order
    assert not check_events(rows, ordered=True).valid


def test_a_rewind_counts_every_message_delivered_late() -> None:
    rows = [send(k, t=10 * i, offset=i) for i, k in enumerate("abc")]
    rows += [recv("c", offset=2, t=100), recv("a", offset=0, t=101), recv("b", offset=1, t=102)]
    assert check_events(rows).order_violations == {"T/0": 2}


def test_order_is_judged_per_session_and_per_queue() -> None:
    rows = [send("a", t=0, queue=0, offset=5), send("b", t=10, queue=1, offset=1)]
    # Queue 1's lower offset after queue 0's higher one is fine; so is a new session starting over.
    rows += [recv("a", queue=0, offset=5, t=100), recv("b", queue=1, offset=1, t=101),
             recv("a", queue=0, offset=5, t=102, session="restart")]
    r = check_events(rows, ordered=True)
    assert r.order_violations == {}
    assert r.duplicated == 1


def test_delivery_order_is_end_ns_not_file_order() -> None:
    rows = [send("a", t=0, offset=0), send("b", t=10, offset=1), recv("b", offset=1, t=200), recv("a", offset=0, t=100)]
    assert check_events(rows).order_violations == {}


def test_receiving_against_ack_order_is_a_violation_without_offsets() -> None:
    # No queue offsets on the receives: rule B (ack order of one producer's sequential sends) still applies.
    rows = [send("a", t=0), send("b", t=10), recv("b", t=100), recv("a", t=101)]
    r = check_events(rows)
    assert r.order_violations == {"T/0": 1}
    assert r.samples[Category.ORDER] == ["a"]


def test_overlapping_sends_are_not_ordered() -> None:
    rows = [dict(send("a", t=0), end_ns=50), send("b", t=10), recv("b", t=100), recv("a", t=101)]
    assert check_events(rows).order_violations == {}


def test_different_producers_are_not_ordered_by_ack() -> None:
    rows = [send("a", t=0, worker="p0"), send("b", t=10, worker="p1"), recv("b", t=100), recv("a", t=101)]
    assert check_events(rows).order_violations == {}


def test_unknown_receive_queue_is_reported_under_the_send_queue() -> None:
    rows = [send("a", t=0, queue=3, topic="X"), send("b", t=10, queue=3, topic="X"),
            recv("b", t=100, queue=-1, topic="X"), recv("a", t=101, queue=-1, topic="X")]
    assert check_events(rows).order_violations == {"X/3": 1}


def test_accepts_an_arrow_table_and_a_dict_of_columns() -> None:
    rows = [send("a"), send("b"), recv("a")]
    table = pa.Table.from_pylist(rows)
    columns = {name: table[name].to_pylist() for name in table.column_names}
    assert check_events(table).to_json() == check_events(columns).to_json() == check_events(rows).to_json()


def test_empty_history() -> None:
    r = check_events(EVENTS_FULL_SCHEMA.empty_table())
    assert totals(r) == ZERO and r.valid and r.order_violations == {}


def test_events_without_a_key_are_rejected() -> None:
    with pytest.raises(ValueError, match="key"):
        check_events([{"op": "send", "outcome": "ok"}])


def test_samples_are_capped() -> None:
    r = check_events([send(f"k{i:03d}") for i in range(50)], sample_size=5)
    assert r.lost == 50 and r.samples[Category.LOST] == [f"k{i:03d}" for i in range(5)]


def test_check_json_has_the_v1_keys() -> None:
    d = check_events([send("a"), recv("a")]).to_json()
    for k in ("schema_version", "attempted", "acknowledged", "failed", "unknown", "lost", "lost_bytes", "unexpected",
              "duplicated", "recovered", "order_violations", "samples", "valid", "allow_loss"):
        assert k in d
    assert d["schema_version"] == 1


# ---------------------------------------------------------------- properties

KEYS = [f"k{i}" for i in range(12)]


@st.composite
def histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Random sends and receives over a small key space, with clashes, retries, ghosts and shuffled order."""
    rows: list[dict[str, Any]] = []
    for i in range(draw(st.integers(0, 30))):
        key = draw(st.sampled_from(KEYS))
        t = draw(st.integers(0, 60))
        rows.append(dict(send(key, draw(st.sampled_from(list(Outcome))), t=t, queue=draw(st.integers(-1, 1)),
                              offset=draw(st.integers(-1, 5)), worker=draw(st.sampled_from(["p0", "p1"])),
                              nbytes=len(key) * 10, code=draw(st.sampled_from([0, 0, -1, 10, 11, 12]))),
                         end_ns=t + draw(st.integers(0, 20))))
        del i
    for _ in range(draw(st.integers(0, 30))):
        rows.append(recv(draw(st.sampled_from([*KEYS, "ghost"])), t=draw(st.integers(0, 40)),
                         queue=draw(st.integers(-1, 1)), offset=draw(st.integers(-1, 5)),
                         worker=draw(st.sampled_from(["c0", "c1"])), session=draw(st.sampled_from(["", "s"])),
                         outcome=draw(st.sampled_from(["ok", "ok", "ok", "fail"]))))
    for _ in range(draw(st.integers(0, 8))):
        rows.append(read(draw(st.sampled_from([*KEYS, "ghost"])), queue=draw(st.integers(-1, 1)),
                         offset=draw(st.integers(-1, 5))))
    return draw(st.permutations(rows))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_totals_match_the_reference(rows: list[dict[str, Any]]) -> None:
    r = check_events(rows)
    want = reference_totals(rows)
    assert totals(r) | {"lost_bytes": r.lost_bytes, "duplicate_deliveries": r.duplicate_deliveries} == want
    assert r.attempted == r.acknowledged + r.failed + r.unknown


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_order_violations_match_the_brute_force_reference(rows: list[dict[str, Any]]) -> None:
    assert check_events(rows).order_violations == reference_order(rows)


@st.composite
def acked_and_received_once(draw: st.DrawFn) -> list[dict[str, Any]]:
    keys = draw(st.lists(st.text("abcxyz0123", min_size=1, max_size=6), min_size=1, max_size=40, unique=True))
    sends = [send(k, t=10 * i, offset=i) for i, k in enumerate(keys)]
    receives = [recv(k, t=1000 + i, offset=i) for i, k in enumerate(keys)]
    return draw(st.permutations(sends + receives))


@settings(max_examples=200, deadline=None)
@given(acked_and_received_once(), st.data())
def test_every_acked_key_received_once_is_clean_and_dropping_a_receive_loses_exactly_it(
        rows: list[dict[str, Any]], data: st.DataObject) -> None:
    r = check_events(rows, ordered=True)
    assert (r.lost, r.duplicated, r.unexpected, r.order_violations) == (0, 0, 0, {})
    assert r.valid
    receives = [i for i, row in enumerate(rows) if row["op"] == "receive"]
    drop = data.draw(st.sampled_from(receives))
    dropped = check_events(rows[:drop] + rows[drop + 1:])
    assert (dropped.lost, dropped.lost_bytes, dropped.samples[Category.LOST]) == (1, 100, [rows[drop]["key"]])
    assert (dropped.duplicated, dropped.unexpected) == (0, 0)
    assert not dropped.valid


def test_check_run_writes_a_check_json_that_validates(tmp_path: Path) -> None:
    run = write_run(tmp_path, [send("a"), send("b"), recv("a")], fmt="jsonl", params={"ordered": True})
    r = check_run(run)
    assert (r.lost, r.ordered, r.run_id) == (1, True, run.name)
    assert json.loads((run / "check.json").read_text()) == r.to_json()
    assert validate_run(run) == []


def test_check_run_refuses_an_invalid_run(tmp_path: Path) -> None:
    run = write_run(tmp_path, [send("a")])
    (run / "meta.json").write_text("{}")
    with pytest.raises(InvalidRunError, match="missing key 'run_id'") as e:
        check_run(run)
    assert "meta.json: missing key 'scenario'" in e.value.problems


def test_the_benchmark_history_gives_its_known_answers(tmp_path: Path) -> None:
    # bench_checker raises if the checker's counts differ from the synthetic history's known ones.
    cost = bench_checker(60_000, tmp_path)
    assert 59_000 < cost.events <= 60_000
