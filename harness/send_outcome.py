"""This module owns the one rule that turns what the client said about a send into a run-record row.

Every sender — the scenarios' driver (``harness.driver``) and the chaos load (``chaos.load``) — classifies its
sends here and writes them with ``record_send``, so the loss checker (``harness.checker``) reads the same rows
for the same client outcome whoever sent. The outcome is the run record's vocabulary
(``harness.records.Outcome``):

================  =======================================================================================
``ok``            acknowledged: the client got a SendResult. Every SendStatus is a stored message (RocketMQ's
                  ``SendMessageProcessor.handlePutMessageResult`` answers FLUSH_DISK_TIMEOUT,
                  FLUSH_SLAVE_TIMEOUT and SLAVE_NOT_AVAILABLE only after the commit log took the record); the
                  status is kept as the response code (0, 10, 12, 11), so a reader that judges durability
                  (``chaos.verdict``: a flush timeout is not a durability promise) can set those apart; 12 and
                  11 are acknowledged by the master but promised on no slave (``harness.checker``'s
                  ``acked_master_only``), and only a 0 is a SYNC_MASTER's replication promise.
``fail``          refused: definitely not stored — a broker answered with an error code, or the client
                  refused before anything was written (no route, invalid message, connect failure).
``unknown``       maybe stored: the request (or an earlier attempt of the same send call, the producer's
                  internal retry) was written and no answer came — a timeout, a connection lost while the
                  request was pending (``MQClientError.unknown_outcome``, whichever error class carries it) —
                  or the send was abandoned by something that is not a client error.
================  =======================================================================================

The code is the RocketMQ response code (or the client's error code) of the outcome, -1 when there is none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from harness.records.schema import Outcome
from harness.records.writer import EventWriter
from reference_broker.client import MQClientError, SendResult, SendStatus
from reference_broker.remoting.codes import ResponseCode

# The response code each SendStatus came from (RocketMQ 4.9.8 ResponseCode; MQClientAPIImpl.processSendResponse
# maps them the other way).
STATUS_CODES: Final[dict[SendStatus, int]] = {
    SendStatus.SEND_OK: ResponseCode.SUCCESS,
    SendStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    SendStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
    SendStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
}


@dataclass(frozen=True, slots=True)
class SendOutcome:
    """The fate of one send (for a batch: of every message in it; message i sits at ``queue_offset + i``)."""

    outcome: Outcome
    code: int = -1
    queue_id: int = -1
    queue_offset: int = -1
    error: str | None = None


def outcome_of_result(result: SendResult) -> SendOutcome:
    """A SendResult is a stored message whatever its status; the status is kept as the code."""
    mq = result.message_queue
    return SendOutcome(Outcome.OK, int(STATUS_CODES.get(result.send_status, ResponseCode.SUCCESS)), mq.queue_id,
                       result.queue_offset)


def outcome_of_error(exc: BaseException) -> SendOutcome:
    """A client error: "unknown" when the request may have reached the broker (``unknown_outcome``: a timeout
    or a connection lost after writing, also in an earlier attempt of the same call — so a broker error that
    carries it is unknown too), else "fail" with its code. Anything that is not a client error (a greenlet
    killed mid-send, a bug) is "unknown": nothing says it was not stored."""
    if isinstance(exc, MQClientError):
        outcome = Outcome.UNKNOWN if exc.unknown_outcome else Outcome.FAIL
        return SendOutcome(outcome, int(exc.code), error=str(exc)[:200])
    return SendOutcome(Outcome.UNKNOWN, -1, error=f"{type(exc).__name__}: {exc}"[:200])


def outcome_of(result: SendResult | None, error: BaseException | None) -> SendOutcome:
    """A send callback's pair (result or error) classified; neither = unknown (no outcome came)."""
    if result is not None:
        return outcome_of_result(result)
    return outcome_of_error(error if error is not None else RuntimeError("no result"))


def record_send(writer: EventWriter, key: str, topic: str, outcome: SendOutcome, start_ns: int, end_ns: int,
                nbytes: int, intended_ns: int = -1, index: int = 0) -> None:
    """The send row of ``key``: the ``index``-th message of the send (0 for a single message; a batch's
    message i sits at the batch's queue offset + i)."""
    offset = outcome.queue_offset + index if outcome.queue_offset >= 0 else -1
    writer.record_send(key, topic, outcome.queue_id, offset, start_ns, end_ns, outcome.outcome, outcome.code,
                       nbytes, intended_ns)
