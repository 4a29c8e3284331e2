"""The transactions scenario's driver: every send is a transaction (TransactionProducer.send_message_in_transaction)
whose fate is a pure function of its key, so whichever process of the producer group the broker asks answers a
check-back alike.

A key's plan: ``crc32(key) / 2**32`` falls into one of the mix's fractions (``--tx-mix``, e.g.
``commit=0.5,rollback=0.2,unknown_commit=0.2,unknown_rollback=0.1,never=0``): the local transaction commits,
rolls back, or answers UNKNOW; an UNKNOW's check-back answers commit (unknown_commit), rollback
(unknown_rollback) or UNKNOW again (never: left to the broker's transactionCheckMax). Every decision becomes a
run-record row (op "tx", session "local" or "check"; harness.records.schema) in this process's
``<worker>-tx`` part, read by the checker's atomicity rule; the send rows (the half messages) are the Agent's.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from harness.driver import RocketMQDriver, SendCallback, SendOutcome
from harness.records import EventWriter, RunRecord, wall_clock
from harness.send_outcome import outcome_of_error, outcome_of_result
from reference_broker.client import (
    LocalTransactionState,
    Message,
    MessageExt,
    TransactionProducer,
)

PLANS: Final = ("commit", "rollback", "unknown_commit", "unknown_rollback", "never")
DEFAULT_MIX: Final = "commit=0.5,rollback=0.2,unknown_commit=0.2,unknown_rollback=0.1,never=0"
# (local decision, check-back answer) per plan, as tx-row outcomes.
_DECISIONS: Final = {"commit": ("ok", "ok"), "rollback": ("fail", "fail"), "unknown_commit": ("unknown", "ok"),
                     "unknown_rollback": ("unknown", "fail"), "never": ("unknown", "unknown")}
_STATES: Final = {"ok": LocalTransactionState.COMMIT_MESSAGE, "fail": LocalTransactionState.ROLLBACK_MESSAGE,
                  "unknown": LocalTransactionState.UNKNOW}


def parse_mix(text: str) -> dict[str, float]:
    """``plan=fraction,...`` (plans not named get 0); the fractions must sum to 1."""
    mix = dict.fromkeys(PLANS, 0.0)
    for item in filter(None, (t.strip() for t in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep or name.strip() not in mix:
            raise ValueError(f"--tx-mix {item!r}: expected PLAN=FRACTION with PLAN one of {', '.join(PLANS)}")
        try:
            mix[name.strip()] = float(value)
        except ValueError:
            raise ValueError(f"--tx-mix {item!r}: {value!r} is not a number") from None
    if any(not 0 <= v <= 1 for v in mix.values()) or abs(sum(mix.values()) - 1) > 1e-6:
        raise ValueError(f"--tx-mix {text!r}: fractions in [0, 1] that sum to 1")
    return mix


def plan_of(key: str, mix: Mapping[str, float]) -> str:
    """The key's plan: where crc32(key) falls among the mix's cumulative fractions."""
    u = zlib.crc32(key.encode()) / 2**32
    acc = 0.0
    for name in PLANS:
        acc += mix.get(name, 0.0)
        if u < acc:
            return name
    return next(n for n in reversed(PLANS) if mix.get(n, 0.0) > 0)


class _Listener:
    def __init__(self, driver: TransactionalDriver) -> None:
        self.driver = driver

    def execute_local_transaction(self, msg: Message, _arg: object) -> LocalTransactionState:
        return self.driver.decide(msg.topic, msg.keys or "", "local")

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        return self.driver.decide(msg.topic, msg.keys or "", "check")


class TransactionalDriver(RocketMQDriver):
    """A RocketMQDriver whose producer is a TransactionProducer: ``send`` is a whole transaction (half message,
    local transaction, END_TRANSACTION); its outcome is the half message's."""

    def __init__(self, namesrv: str, *, instance: str, producer_group: str, run_dir: str, worker: str,
                 mix: Mapping[str, float], send_timeout_s: float = 3.0, record: bool = True) -> None:
        super().__init__(namesrv, instance=instance, producer_group=producer_group, send_timeout_s=send_timeout_s)
        self.mix = dict(mix)
        self.clock = wall_clock()
        self._run_dir, self._worker, self._record = run_dir, worker, record
        self.tx_writer: EventWriter | None = None

    def decide(self, topic: str, key: str, session: str) -> LocalTransactionState:
        local, check = _DECISIONS[plan_of(key, self.mix)]
        decision = local if session == "local" else check
        if self.tx_writer is not None:
            now = self.clock.now_ns()
            self.tx_writer.record_tx(key, topic, decision, now, now, session=session)
        return _STATES[decision]

    def start(self) -> None:
        with self._lock:
            if self._producer is None:
                if self._record and self.tx_writer is None:
                    self.tx_writer = RunRecord(Path(self._run_dir), self.clock).events_writer(f"{self._worker}-tx")
                producer = TransactionProducer(self.producer_group, "", _Listener(self), check_threads=2,
                                               client_config=self._client_config(),
                                               send_msg_timeout_s=self.send_timeout_s,
                                               retry_times_when_send_failed=self.retries)
                producer.start()
                self._producer = producer

    def stop(self) -> None:
        super().stop()
        writer, self.tx_writer = self.tx_writer, None
        if writer is not None:
            writer.close()

    def send(self, topic: str, key: str, body: bytes, queue: int | None = None) -> SendOutcome:
        producer = self._running()
        assert isinstance(producer, TransactionProducer)
        try:
            return outcome_of_result(producer.send_message_in_transaction(Message(topic, body, keys=key)).send_result)
        except Exception as exc:  # noqa: BLE001 - the half message's outcome; GreenletExit & co. propagate
            return outcome_of_error(exc)

    def send_async(self, topic: str, key: str, body: bytes, callback: SendCallback, queue: int | None = None) -> None:
        """A transaction is synchronous (its local transaction runs between the half message and its end): the
        calling User waits for it, as with ``--sync``."""
        callback(self.send(topic, key, body, queue))
