"""This module owns END_TRANSACTION (37): a producer's commit or rollback of a half message
(broker/.../processor/EndTransactionProcessor.java, 4.9.8). The message rebuilding is in transaction.py.

Answers, as 4.9.8's (the Java client sends END_TRANSACTION oneway, so they matter only to a two-way caller):

| request                                            | answer                                              |
|----------------------------------------------------|-----------------------------------------------------|
| on a slave                                         | SLAVE_NOT_AVAILABLE                                 |
| commitOrRollback 0 (UNKNOW), or not 0/8/12          | none (4.9.8 returns null; a bad value is refused    |
|                                                    | by the header's checkFields: SYSTEM_ERROR)          |
| no half message at commitLogOffset                 | SYSTEM_ERROR "Find prepared transaction message …"  |
| PGROUP, queue offset or commit-log offset differ   | SYSTEM_ERROR "The producer group wrong", …          |
| COMMIT: the real-topic put refused                 | the put's code (MESSAGE_ILLEGAL, SERVICE_NOT_…)     |
| COMMIT stored / ROLLBACK                           | SUCCESS, after the op message is written            |

Matching 4.9.8 (seen on it): a second END_TRANSACTION for the same half message is served again — a second
COMMIT stores the message a second time, a ROLLBACK after a COMMIT writes one more op and changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Final

from reference_broker.broker import transaction as txb
from reference_broker.common import transaction as tx
from reference_broker.remoting.codes import ResponseCode
from reference_broker.remoting.command import RemotingCommand, create_response
from reference_broker.remoting.headers import BadRequest, bool_field, field, int_field
from reference_broker.store.config import BrokerRole
from reference_broker.store.durability import PendingPut
from reference_broker.store.status import PutMessageResult, PutMessageStatus

if TYPE_CHECKING:
    from reference_broker.store.message_store import MessageStore

log = logging.getLogger(__name__)

# EndTransactionProcessor.sendFinalMessage: put status → (code, remark); stored statuses are SUCCESS.
_FINAL_PUT_ERRORS: Final = {
    PutMessageStatus.CREATE_MAPEDFILE_FAILED: (ResponseCode.SYSTEM_ERROR, "Create mapped file failed."),
    PutMessageStatus.MESSAGE_ILLEGAL: (ResponseCode.MESSAGE_ILLEGAL, "The message is illegal, maybe msg body or "
                                       "properties length not matched. msg body length limit 128k, msg properties "
                                       "length limit 32k."),
    PutMessageStatus.SERVICE_NOT_AVAILABLE: (ResponseCode.SERVICE_NOT_AVAILABLE, "Service not available now."),
    PutMessageStatus.OS_PAGECACHE_BUSY: (ResponseCode.SYSTEM_ERROR, "OS page cache busy, please try another machine"),
    PutMessageStatus.UNKNOWN_ERROR: (ResponseCode.SYSTEM_ERROR, "UNKNOWN_ERROR"),
}
_FINAL_PUT_ERRORS[PutMessageStatus.PROPERTIES_SIZE_EXCEEDED] = _FINAL_PUT_ERRORS[PutMessageStatus.MESSAGE_ILLEGAL]

Reply = RemotingCommand | Awaitable[RemotingCommand] | None


class EndTransactionProcessor:
    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self.counts = {"commit": 0, "rollback": 0, "refused": 0}  # served END_TRANSACTIONs (runtime info, tests)

    def handle(self, ctx: object, cmd: RemotingCommand) -> Reply:
        peer = getattr(ctx, "peer", "?")
        try:
            group = field(cmd, "producerGroup")
            table_offset = int_field(cmd, "tranStateTableOffset")
            commit_log_offset = int_field(cmd, "commitLogOffset")
            kind = int_field(cmd, "commitOrRollback")
            field(cmd, "msgId")
            from_check = bool_field(cmd, "fromTransactionCheck")
        except BadRequest as exc:
            log.warning("bad END_TRANSACTION from %s: %s", peer, exc)
            return create_response(cmd, ResponseCode.SYSTEM_ERROR, str(exc))
        if kind not in tx.END_TYPES:  # EndTransactionRequestHeader.checkFields
            return create_response(cmd, ResponseCode.SYSTEM_ERROR, "commitOrRollback field wrong")
        if self.store.config.broker_role is BrokerRole.SLAVE:
            log.warning("Message store is slave mode, so end transaction is forbidden.")
            return create_response(cmd, ResponseCode.SLAVE_NOT_AVAILABLE)
        if kind == tx.UNKNOW:
            # 4.9.8 logs and returns null: the half message stays open for the check service.
            log.info("producer %s %s the transaction of %s as UNKNOW", peer,
                     "checked" if from_check else "ended", cmd.ext_fields.get("msgId"))
            return None
        half = self.store.look_message_by_offset(commit_log_offset)
        wrong = txb.check_prepare(half, group, table_offset, commit_log_offset)
        if wrong is not None or half is None:
            self.counts["refused"] += 1
            return create_response(cmd, ResponseCode.SYSTEM_ERROR, wrong)
        if kind == tx.ROLLBACK:
            self.counts["rollback"] += 1
            self._mark(half.queue_id, half.queue_offset)
            # checkPrepareMessage's response, built by createResponseCommand(null): its default remark.
            return create_response(cmd, ResponseCode.SUCCESS, "not set any response code")
        try:
            final = txb.end_message(half, commit_log_offset)
        except txb.UnusableHalfError as exc:
            self.counts["refused"] += 1
            return create_response(cmd, ResponseCode.SYSTEM_ERROR, str(exc))
        put = self.store.put(final)
        queue_id, queue_offset = half.queue_id, half.queue_offset
        if put.done:
            return self._committed(cmd, put.result, queue_id, queue_offset)
        return self._committed_later(cmd, put, queue_id, queue_offset)

    async def _committed_later(self, cmd: RemotingCommand, put: PendingPut, queue_id: int,
                               queue_offset: int) -> RemotingCommand:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[PutMessageResult] = loop.create_future()

        def done(result: PutMessageResult) -> None:
            loop.call_soon_threadsafe(_resolve, fut, result)

        put.add_done_callback(done)
        return self._committed(cmd, await fut, queue_id, queue_offset)

    def _committed(self, cmd: RemotingCommand, result: PutMessageResult, queue_id: int,
                   queue_offset: int) -> RemotingCommand:
        """sendFinalMessage's answer; the half message is marked only once its commit is stored."""
        if not result.status.is_stored:
            code, remark = _FINAL_PUT_ERRORS.get(result.status, (ResponseCode.SYSTEM_ERROR, "UNKNOWN_ERROR DEFAULT"))
            log.warning("commit of half message %d refused by the store: %s", queue_offset, result.status.name)
            return create_response(cmd, code, remark)
        self.counts["commit"] += 1
        self._mark(queue_id, queue_offset)
        return create_response(cmd, ResponseCode.SUCCESS)

    def _mark(self, queue_id: int, queue_offset: int) -> None:
        """deletePrepareMessage: the op message (put without waiting; 4.9.8 logs a failed one and goes on)."""
        op = txb.op_message(queue_id, queue_offset, self.store.config.store_host)
        result = self.store.put(op)
        if not result.done or not result.result.status.is_stored:
            status = result.result.status.name if result.done else "pending"
            log.error("Transaction op message write failed (half queue %d offset %d): %s", queue_id, queue_offset,
                      status)


def _resolve(fut: asyncio.Future[PutMessageResult], result: PutMessageResult) -> None:
    if not fut.done():
        fut.set_result(result)
