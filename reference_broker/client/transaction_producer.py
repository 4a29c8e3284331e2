"""This module owns the transactional producer (TransactionMQProducer and DefaultMQProducerImpl
.sendMessageInTransaction / endTransaction / checkTransactionState, 4.9.8).

::

    class Listener:
        def execute_local_transaction(self, msg, arg):   # after the half message is stored
            db.insert(...)
            return LocalTransactionState.COMMIT_MESSAGE  # or ROLLBACK_MESSAGE, or UNKNOW (decide later)

        def check_local_transaction(self, msg):          # the broker asks about an unresolved one
            return LocalTransactionState.COMMIT_MESSAGE if db.has(msg.keys) else LocalTransactionState.UNKNOW

    with TransactionProducer("PG", "127.0.0.1:9876", Listener()) as producer:
        result = producer.send_message_in_transaction(Message("Orders", b"..."), arg=None)

``send_message_in_transaction`` sends the message as a *half message* (properties TRAN_MSG=true and PGROUP,
sysFlag TRANSACTION_PREPARED_TYPE; any DELAY is cleared), runs ``execute_local_transaction`` (an exception
counts as UNKNOW), then tells the broker that stored it the outcome with END_TRANSACTION, oneway, as the Java
client does: a lost END_TRANSACTION is made good by the broker's check-back. The broker's
CHECK_TRANSACTION_STATE arrives on the producer's own connection; ``check_local_transaction`` runs on the
producer's check thread (``check_threads``, Java's checkThreadPoolMinSize = 1) and its answer goes back, oneway,
to the broker that asked.
"""

from __future__ import annotations

import enum
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from reference_broker.client import protocol
from reference_broker.client.errors import ClientErrorCode, MQClientError
from reference_broker.client.message import Message, MessageExt, SendResult, SendStatus
from reference_broker.client.producer import Producer
from reference_broker.common import message as mc
from reference_broker.common import transaction as tx
from reference_broker.common.record import MessageIdError, decode_message_id
from reference_broker.remoting.codes import RequestCode

log = logging.getLogger(__name__)


class LocalTransactionState(enum.Enum):
    """LocalTransactionState, and the commitOrRollback value END_TRANSACTION carries for each."""

    COMMIT_MESSAGE = tx.COMMIT
    ROLLBACK_MESSAGE = tx.ROLLBACK
    UNKNOW = tx.UNKNOW  # sic: RocketMQ's spelling


class TransactionListener(Protocol):
    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState: ...

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState: ...


@dataclass
class TransactionSendResult:
    """TransactionSendResult: the half message's SendResult and what the local transaction decided."""

    send_result: SendResult
    local_transaction_state: LocalTransactionState
    transaction_id: str | None

    @property
    def send_status(self) -> SendStatus:
        return self.send_result.send_status

    @property
    def msg_id(self) -> str:
        return self.send_result.msg_id


class TransactionProducer(Producer):
    """TransactionMQProducer: a Producer with a ``TransactionListener``. Plain sends work as a Producer's."""

    def __init__(self, group: str, namesrv_addr: str, listener: TransactionListener, *, check_threads: int = 1,
                 **kwargs: Any) -> None:
        super().__init__(group, namesrv_addr, **kwargs)
        self.listener = listener
        self._check_executor = ThreadPoolExecutor(max_workers=check_threads, thread_name_prefix=f"check-{group}")
        self._announced: set[str] = set()  # brokers this producer sent a heartbeat to since it learned of them

    def shutdown(self) -> None:
        super().shutdown()
        self._check_executor.shutdown(wait=True, cancel_futures=True)

    # ---- prepare, execute, end --------------------------------------------------------------------------
    def send_message_in_transaction(self, msg: Message, arg: Any = None) -> TransactionSendResult:
        self._running()
        msg.properties.pop(mc.PROPERTY_DELAY_TIME_LEVEL, None)  # 4.9.8 ignores a delay level here
        msg.properties[mc.PROPERTY_TRANSACTION_PREPARED] = "true"
        msg.properties[mc.PROPERTY_PRODUCER_GROUP] = self.group
        result = self.send(msg)
        self._announce(result.message_queue.broker_name)
        state = LocalTransactionState.UNKNOW
        error: BaseException | None = None
        if result.send_status is SendStatus.SEND_OK:
            msg.transaction_id = msg.uniq_key
            try:
                state = self.listener.execute_local_transaction(msg, arg) or LocalTransactionState.UNKNOW
            except Exception as exc:  # noqa: BLE001 - the user's transaction failed: UNKNOW, the check decides
                log.warning("executeLocalTransaction of %s failed: %s", msg.uniq_key, exc)
                error = exc
        else:
            # stored, but not as durably as asked (FLUSH_DISK_TIMEOUT, SLAVE_NOT_AVAILABLE, ...): rolled back
            state = LocalTransactionState.ROLLBACK_MESSAGE
        try:
            self._end_transaction(result, state, error)
        except MQClientError as exc:
            # 4.9.8 logs it: the broker's check-back resolves the half message
            log.warning("local transaction %s of %s: END_TRANSACTION failed: %s", state.name, msg.uniq_key, exc)
        return TransactionSendResult(result, state, msg.transaction_id)

    def _announce(self, broker_name: str) -> None:
        """A heartbeat to a broker this producer has just learned of, before it can ask about the half message.

        Deliberate difference: the Java producer's first heartbeat to a broker it did not know at start waits
        for the 30 s heartbeat task, and until then the broker finds no channel for the group and its checks
        of the group's half messages are lost (each still counts towards transactionCheckMax)."""
        if broker_name in self._announced:
            return
        self._announced.add(broker_name)
        self._running().send_heartbeat_to_all_brokers()

    def _end_transaction(self, result: SendResult, state: LocalTransactionState, error: BaseException | None) -> None:
        """DefaultMQProducerImpl.endTransaction: oneway to the master of the broker that stored the half message."""
        try:
            _host, _port, offset = decode_message_id(result.offset_msg_id or result.msg_id)
        except MessageIdError as exc:
            raise MQClientError(ClientErrorCode.CLIENT_STATE_EXCEPTION, f"bad offsetMsgId: {exc}", False) from exc
        instance = self._running()
        addr = instance.find_broker_addr_in_publish(result.message_queue.broker_name)
        if addr is None:
            raise MQClientError(ClientErrorCode.NOT_FOUND_TOPIC_EXCEPTION,
                                f"no address of broker {result.message_queue.broker_name}")
        header = tx.end_transaction_header(self.group, result.queue_offset, offset, state.value, result.msg_id,
                                           transaction_id=result.transaction_id)
        remark = None if error is None else f"executeLocalTransactionBranch exception: {error!r}"
        cmd = protocol.request(RequestCode.END_TRANSACTION, header)
        cmd.remark = remark
        instance.invoke_oneway(addr, cmd)

    # ---- check-back ---------------------------------------------------------------------------------------
    def check_transaction_state(self, addr: str, msg: MessageExt, header: dict[str, str]) -> None:
        """Called on the connection's reader thread: the listener runs on the check thread."""
        try:
            self._check_executor.submit(self._check, addr, msg, header)
        except RuntimeError:  # shut down
            log.info("transaction check of %s dropped: the producer is shut down", msg.msg_id)

    def _check(self, addr: str, msg: MessageExt, header: dict[str, str]) -> None:
        """checkTransactionState's Runnable: ask the listener, answer END_TRANSACTION (fromTransactionCheck)."""
        remark = None
        try:
            state = self.listener.check_local_transaction(msg) or LocalTransactionState.UNKNOW
        except Exception as exc:  # noqa: BLE001 - the user's check failed: UNKNOW, asked again later
            log.warning("checkLocalTransaction of %s failed: %s", msg.msg_id, exc)
            state, remark = LocalTransactionState.UNKNOW, f"checkLocalTransactionState Exception: {exc!r}"
        try:
            end = tx.end_transaction_header(
                self.group, int(header["tranStateTableOffset"]), int(header["commitLogOffset"]), state.value,
                msg.properties.get(mc.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or msg.msg_id, from_check=True,
                transaction_id=header.get("transactionId"))
        except (KeyError, ValueError) as exc:
            log.warning("CHECK_TRANSACTION_STATE from %s with a bad header %s: %s", addr, header, exc)
            return
        cmd = protocol.request(RequestCode.END_TRANSACTION, end)
        cmd.remark = remark
        try:
            self._running().invoke_oneway(addr, cmd)
        except MQClientError as exc:
            log.warning("answer to the transaction check of %s failed: %s", msg.msg_id, exc)
