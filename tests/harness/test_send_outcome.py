"""One send-outcome rule: the classification (pure), and the same client outcome recorded as the same row by
the scenarios' driver and by the chaos load."""

from __future__ import annotations

from typing import Any

import pytest

from chaos.load import LoadSpec, Workload
from harness.driver import RocketMQDriver
from harness.records import Outcome, RunRecord
from harness.send_outcome import SendOutcome, outcome_of, outcome_of_error, outcome_of_result, record_send
from reference_broker.client import MessageQueue, MQBrokerError, MQClientError, SendResult, SendStatus

START, END, NBYTES, INTENDED = 1_000, 2_000, 64, 900


def _result(status: SendStatus) -> SendResult:
    return SendResult(status, "uniq", MessageQueue("T", "b", 3), 17)


def _unknown_broker_error() -> MQBrokerError:
    # A broker's refusal of a retry whose earlier attempt timed out after being written: maybe stored.
    e = MQBrokerError(14, "busy")
    e.unknown_outcome = True
    return e


# (SendResult or error, the row's outcome, the row's code)
CLIENT_OUTCOMES: list[tuple[SendResult | MQClientError, Outcome, int]] = [
    (_result(SendStatus.SEND_OK), Outcome.OK, 0),
    (_result(SendStatus.FLUSH_DISK_TIMEOUT), Outcome.OK, 10),
    (_result(SendStatus.SLAVE_NOT_AVAILABLE), Outcome.OK, 11),
    (_result(SendStatus.FLUSH_SLAVE_TIMEOUT), Outcome.OK, 12),
    (MQBrokerError(14, "busy"), Outcome.FAIL, 14),
    (_unknown_broker_error(), Outcome.UNKNOWN, 14),
    (MQClientError(10006, "timeout", unknown_outcome=True), Outcome.UNKNOWN, 10006),
    (MQClientError(10001, "connect failed"), Outcome.FAIL, 10001),
]


class _Rows:
    """An EventWriter stand-in that keeps the send rows."""

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []

    def record_send(self, *args: Any) -> None:
        self.rows.append(args)


class _Clock:
    def now_ns(self) -> int:
        return END


class _FakeProducer:
    def __init__(self, answer: SendResult | MQClientError) -> None:
        self.answer = answer

    def send_async(self, _msg: Any, callback: Any, _mq: Any = None) -> None:
        if isinstance(self.answer, SendResult):
            callback(self.answer, None)
        else:
            callback(None, self.answer)


def _split(answer: SendResult | MQClientError) -> tuple[SendResult | None, MQClientError | None]:
    return (answer, None) if isinstance(answer, SendResult) else (None, answer)


# ---- the rule (pure) -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("answer", "outcome", "code"), CLIENT_OUTCOMES)
def test_each_client_outcome_has_one_outcome_and_code(answer, outcome, code):
    o = outcome_of(*_split(answer))
    assert (o.outcome, o.code) == (outcome, code)


def test_a_timeout_after_writing_is_unknown_not_fail():
    o = outcome_of_error(MQClientError(10006, "timeout", unknown_outcome=True))
    assert (o.outcome, o.code) == (Outcome.UNKNOWN, 10006)


def test_a_refusal_is_fail_with_its_code():
    assert outcome_of_error(MQBrokerError(14, "busy")) == SendOutcome(Outcome.FAIL, 14, error="CODE: 14 DESC: busy")
    assert outcome_of_error(MQClientError(10001, "connect failed")).outcome == Outcome.FAIL


def test_anything_else_is_unknown():
    assert outcome_of_error(RuntimeError("bug")).outcome == Outcome.UNKNOWN
    assert outcome_of(None, None).outcome == Outcome.UNKNOWN


@pytest.mark.parametrize(("status", "code"), [(SendStatus.SEND_OK, 0), (SendStatus.FLUSH_DISK_TIMEOUT, 10),
                                              (SendStatus.SLAVE_NOT_AVAILABLE, 11)])
def test_every_send_result_is_a_stored_message(status, code):
    assert outcome_of_result(_result(status)) == SendOutcome(Outcome.OK, code, 3, 17)


def test_a_batch_row_sits_at_the_batch_offset_plus_its_index():
    rows = _Rows()
    o = SendOutcome(Outcome.OK, 0, 2, 40)
    for i, key in enumerate(("a", "b")):
        record_send(rows, key, "T", o, START, END, NBYTES, INTENDED, i)  # type: ignore[arg-type]
    record_send(rows, "c", "T", SendOutcome(Outcome.FAIL, 14), START, END, NBYTES, INTENDED, 1)  # type: ignore[arg-type]
    assert [r[:4] for r in rows.rows] == [("a", "T", 2, 40), ("b", "T", 2, 41), ("c", "T", -1, -1)]


# ---- both senders ------------------------------------------------------------------------------------------


def _driver_row(answer: SendResult | MQClientError) -> tuple[Any, ...]:
    """The scenarios' path: RocketMQDriver.send_async's outcome, written as scenarios.agent writes it."""
    driver = RocketMQDriver("127.0.0.1:1", instance="outcome-test")
    driver._producer = _FakeProducer(answer)  # type: ignore[assignment]
    got: list[SendOutcome] = []
    driver.send_async("T", "k", b"x" * NBYTES, got.append)
    rows = _Rows()
    record_send(rows, "k", "T", got[0], START, END, NBYTES, INTENDED)  # type: ignore[arg-type]
    return rows.rows[0]


def _chaos_row(answer: SendResult | MQClientError, tmp_path) -> tuple[Any, ...]:
    """The chaos path: Workload's send callback, as it records a send."""
    record = RunRecord.create(tmp_path, "outcome-test", {})
    w = Workload("127.0.0.1:1", LoadSpec(topic="T", in_flight=1), record, _Clock())  # type: ignore[arg-type]
    rows = _Rows()
    w._send_events = rows  # type: ignore[assignment]
    w._slots.acquire()
    w._in_flight = 1
    w._done("k", INTENDED, START, NBYTES, *_split(answer))
    record.finish()
    return rows.rows[0]


@pytest.mark.parametrize(("answer", "outcome", "code"), CLIENT_OUTCOMES)
def test_driver_and_chaos_record_the_same_row(answer, outcome, code, tmp_path):
    driver_row, chaos_row = _driver_row(answer), _chaos_row(answer, tmp_path)
    assert driver_row == chaos_row
    assert (driver_row[6], driver_row[7]) == (outcome, code)
