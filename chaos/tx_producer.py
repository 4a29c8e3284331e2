"""This module owns the transactional producer PROCESS of the transaction cells (chaos/transactions.py): a
TransactionProducer whose listener decides from the key (chaos.tx_verdict's plans), run as its own process so
that it can be SIGKILLed between prepare and END_TRANSACTION like a crashed application.

``python -m chaos.tx_producer --namesrv A --group G --topic T --worker W --mode M``:

- ``load``: ``--threads`` senders, one transaction at a time each, plans from the default mix, until a line
  ``stop`` on stdin; it answers check-backs until ``exit`` (or end of file), then shuts down cleanly and
  prints ``{"e": "done"}``.
- ``hold``: ``--count`` transactions (plans from the held mix) whose local transactions never finish (the
  listener blocks); prints ``{"e": "held", "key": K}`` for each half message stored. The harness kills it -9.
- ``check``: no sends; a producer of the group that answers the broker's check-backs, until ``exit``/EOF.

What happened goes to stdout, one JSON object a line, and the harness writes the run-record rows (so what a
killed process printed is never lost with it): ``{"e": "ready"}``; ``{"e": "send", "key", "outcome", "code",
"qid", "qoff", "start", "end", "phys", "bytes"}`` (the half message; ``phys`` its commit-log offset from the
offsetMsgId); ``{"e": "tx", "key", "d", "s", "t"}`` (a decision: d = ok/fail/unknown, s = local/check).
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import click

from chaos.payload import make_body
from chaos.tx_verdict import DEFAULT_MIX, HELD_MIX, TxPlan, plan_of, tx_key
from harness.records import WallClock
from harness.send_outcome import outcome_of_error, outcome_of_result
from reference_broker.client import (
    ClientConfig,
    LocalTransactionState,
    Message,
    MessageExt,
    MQClientError,
    SendResult,
    TransactionProducer,
)
from reference_broker.common.record import MessageIdError, decode_message_id

_STATES = {"ok": LocalTransactionState.COMMIT_MESSAGE, "fail": LocalTransactionState.ROLLBACK_MESSAGE,
           "unknown": LocalTransactionState.UNKNOW}
_out_lock = threading.Lock()
# Anchored like every run-record writer (harness.records.clock), so these rows line up with the harness's.
_clock = WallClock()


def emit(**event: Any) -> None:
    with _out_lock:
        sys.stdout.write(json.dumps(event, separators=(",", ":")) + "\n")
        sys.stdout.flush()


class KeyListener:
    """Decides from the key's plan; ``hold`` makes every local transaction block forever (the process is
    killed before it returns)."""

    def __init__(self, hold: bool = False) -> None:
        self.hold = hold
        self._never = threading.Event()

    def execute_local_transaction(self, msg: Message, _arg: object) -> LocalTransactionState:
        key = msg.keys or ""
        plan = plan_of(key)
        if self.hold:
            emit(e="held", key=key)
            self._never.wait()  # killed -9 here: after prepare, before END_TRANSACTION
        d = plan.local if plan is not None else "unknown"
        emit(e="tx", key=key, d=d, s="local", t=_clock.now_ns())
        return _STATES[d]

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        key = msg.keys or ""
        if self.hold:  # only the process that comes up after the kill may resolve the held keys
            self._never.wait()
        plan = plan_of(key)
        d = plan.check if plan is not None else "unknown"
        emit(e="tx", key=key, d=d, s="check", t=_clock.now_ns())
        return _STATES[d]


class RecordingProducer(TransactionProducer):
    """Prints the half message's send as it completes, before the local transaction runs."""

    def send(self, msg: Message, *args: Any, **kwargs: Any) -> SendResult:
        start = _clock.now_ns()
        try:
            result = super().send(msg, *args, **kwargs)
        except MQClientError as exc:
            o = outcome_of_error(exc)
            emit(e="send", key=msg.keys, outcome=o.outcome.value, code=o.code, qid=-1, qoff=-1, start=start,
                 end=_clock.now_ns(), phys=-1, bytes=len(msg.body), error=o.error)
            raise
        o = outcome_of_result(result)
        try:
            phys = decode_message_id(result.offset_msg_id or "")[2]
        except MessageIdError:
            phys = -1
        emit(e="send", key=msg.keys, outcome=o.outcome.value, code=o.code, qid=o.queue_id, qoff=o.queue_offset,
             start=start, end=_clock.now_ns(), phys=phys, bytes=len(msg.body))
        return result


def _config(namesrv: str, worker: str) -> ClientConfig:
    # Short intervals: a chaos cycle lasts seconds (as chaos.load's clients).
    return ClientConfig(namesrv, f"chaos-tx-{worker}", poll_name_server_interval_s=1.0,
                        heartbeat_broker_interval_s=1.0)


def _sender(producer: TransactionProducer, topic: str, worker: str, size: int, seqs: Iterator[int],
            plans: tuple[TxPlan, ...], stop: threading.Event, backoff_s: float) -> None:
    while not stop.is_set():
        seq = next(seqs)
        key = tx_key(worker, seq, plans[seq % len(plans)])
        try:
            producer.send_message_in_transaction(Message(topic, make_body(key, size), keys=key))
        except MQClientError:
            time.sleep(backoff_s)  # recorded by RecordingProducer.send; an application would back off too


def _wait_commands(stop: threading.Event) -> None:
    """``stop``: no new transactions (the producer stays, answering check-backs); ``exit`` or end of file:
    return, and the producer shuts down."""
    for line in sys.stdin:
        if line.strip() == "stop":
            stop.set()
        elif line.strip() == "exit":
            break
    stop.set()


@click.command()
@click.option("--namesrv", required=True)
@click.option("--group", required=True)
@click.option("--topic", required=True)
@click.option("--worker", required=True)
@click.option("--mode", type=click.Choice(["load", "hold", "check"]), required=True)
@click.option("--threads", type=click.IntRange(min=1), default=4)
@click.option("--count", type=click.IntRange(min=1), default=4, help="hold: transactions to hold.")
@click.option("--size", type=click.IntRange(min=64), default=256)
@click.option("--send-timeout", type=float, default=3.0)
def main(namesrv: str, group: str, topic: str, worker: str, mode: str, threads: int, count: int, size: int,
         send_timeout: float) -> None:
    producer = RecordingProducer(group, namesrv, KeyListener(hold=mode == "hold"), check_threads=2,
                                 send_msg_timeout_s=send_timeout, client_config=_config(namesrv, worker))
    producer.start()
    stop = threading.Event()
    senders: list[threading.Thread] = []
    try:
        producer.fetch_publish_message_queues(topic)  # learn the broker, so the heartbeat announces the group
        producer._running().send_heartbeat_to_all_brokers()
        emit(e="ready")
        seqs = itertools.count(1)
        if mode == "hold":
            for seq in range(1, count + 1):
                key = tx_key(worker, seq, HELD_MIX[seq % len(HELD_MIX)])
                threading.Thread(target=producer.send_message_in_transaction,
                                 args=(Message(topic, make_body(key, size), keys=key),), daemon=True).start()
        elif mode == "load":
            # itertools.count's next is atomic under the GIL: the senders share it.
            senders = [threading.Thread(target=_sender, name=f"tx-sender-{i}", daemon=True,
                                        args=(producer, topic, worker, size, seqs, DEFAULT_MIX, stop, 0.05))
                       for i in range(threads)]
            for t in senders:
                t.start()
        _wait_commands(stop)
    finally:
        stop.set()
        for t in senders:  # their last transactions end (a send waits at most its timeout)
            t.join(send_timeout * 2 + 2)
        producer.shutdown()
        emit(e="done")


if __name__ == "__main__":
    main()
