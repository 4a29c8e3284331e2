"""This module owns how transactional messages are rebuilt on their way through the store (RocketMQ ≥ 4.3:
TransactionalMessageBridge, EndTransactionProcessor.endMessageTransaction / checkPrepareMessage and
DefaultTransactionalMessageCheckListener.toMessageExtBrokerInner, 4.9.8). Pure functions from a message to the
message to put; the processors and the check service put them through the store's one put path.

The life of a transactional message:

1. prepare: the producer's send with TRAN_MSG=true is stored as a *half message* in RMQ_SYS_TRANS_HALF_TOPIC
   queue 0, its real topic and queue in REAL_TOPIC / REAL_QID, its sysflag's transaction type reset to
   NOT_TYPE (so the half topic's consume queue indexes it). Consumers of the real topic never see it.
2. END_TRANSACTION COMMIT: the half message is rebuilt into its real topic (same body, flag, born time and
   host, reconsume times, properties; sysflag type COMMIT; preparedTransactionOffset = the half's commit-log
   offset) and put; then it is *marked*. ROLLBACK only marks.
3. marking = an op message in RMQ_SYS_TRANS_OP_HALF_TOPIC (same queue id as the half queue), tag ``d``, body
   the half message's queue offset as decimal text.
4. the check service (transaction_check.py) asks the producer group about half messages left unmarked.
"""

from __future__ import annotations

import time
from typing import Final

from reference_broker.common import message as mc
from reference_broker.common import record as rec
from reference_broker.common import transaction as tx

# What 4.9.8 answers when checkPrepareMessage refuses (EndTransactionProcessor).
NOT_FOUND_REMARK: Final = "Find prepared transaction message failed"
GROUP_WRONG_REMARK: Final = "The producer group wrong"
TABLE_OFFSET_WRONG_REMARK: Final = "The transaction state table offset wrong"
COMMIT_LOG_OFFSET_WRONG_REMARK: Final = "The commit log offset wrong"


def half_message(msg: rec.MessageExtBrokerInner) -> None:
    """TransactionalMessageBridge.parseHalfMessageInner, in place: REAL_TOPIC / REAL_QID, transaction type
    NOT_TYPE, topic RMQ_SYS_TRANS_HALF_TOPIC queue 0, properties re-encoded.

    Deliberate difference: a DELAY level is dropped. 4.9.8 stores such a half message in SCHEDULE_TOPIC_XXXX
    with REAL_TOPIC overwritten by the half topic, and the schedule service later discards it (apache/rocketmq
    #1540, #2694): the transaction is lost. The Java client clears DELAY before sending a half message; so
    does this broker for clients that do not."""
    props = msg.properties
    props.pop(mc.PROPERTY_DELAY_TIME_LEVEL, None)
    props[mc.PROPERTY_REAL_TOPIC] = msg.topic
    props[mc.PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
    msg.sys_flag = (msg.sys_flag & ~mc.TRANSACTION_ROLLBACK_TYPE) | mc.TRANSACTION_NOT_TYPE
    msg.topic = tx.HALF_TOPIC
    msg.queue_id = 0
    msg.properties_bytes = None


def check_prepare(half: rec.MessageExt | None, producer_group: str, tran_state_table_offset: int,
                  commit_log_offset: int) -> str | None:
    """EndTransactionProcessor.checkPrepareMessage: why the END_TRANSACTION does not name this half message
    (the SYSTEM_ERROR remark), or None.

    Deliberate difference: the record must be in RMQ_SYS_TRANS_HALF_TOPIC. 4.9.8 reads whatever record is at
    the offset: an ordinary message (no PGROUP) fails with a NullPointerException's text, and an already
    committed message (it keeps PGROUP) would be committed once more from its own copy."""
    if half is None or half.topic != tx.HALF_TOPIC:
        return NOT_FOUND_REMARK
    if half.properties.get(mc.PROPERTY_PRODUCER_GROUP) != producer_group:
        return GROUP_WRONG_REMARK
    if half.queue_offset != tran_state_table_offset:
        return TABLE_OFFSET_WRONG_REMARK
    if half.commit_log_offset != commit_log_offset:
        return COMMIT_LOG_OFFSET_WRONG_REMARK
    return None


class UnusableHalfError(ValueError):
    """A half message without a usable REAL_TOPIC / REAL_QID: it can never be committed."""


def real_target(half: rec.MessageExt) -> tuple[str, int]:
    topic = half.properties.get(mc.PROPERTY_REAL_TOPIC)
    qid = half.properties.get(mc.PROPERTY_REAL_QUEUE_ID, "")
    if not topic or not qid.isdigit():
        raise UnusableHalfError(f"half message at {half.commit_log_offset} has no usable REAL_TOPIC/REAL_QID "
                                f"({topic!r}/{qid!r})")
    return topic, int(qid)


def end_message(half: rec.MessageExt, commit_log_offset: int) -> rec.MessageExtBrokerInner:
    """EndTransactionProcessor.endMessageTransaction + the COMMIT settings: the message for the real topic.

    The stored properties are the half message's, unchanged: 4.9.8 clears REAL_TOPIC and REAL_QID from the
    map only after it encoded the string it stores, so a committed message keeps REAL_TOPIC, REAL_QID, TRAN_MSG
    and PGROUP (seen on 4.9.8; tests/broker/test_transaction_vs_rocketmq.py). WAIT stays the producer's, so a
    commit on a SYNC_FLUSH broker is answered once it is on disk, as 4.9.8's (its map keeps WAIT too)."""
    topic, queue_id = real_target(half)
    props = dict(half.properties)
    return rec.MessageExtBrokerInner(
        topic=topic, body=half.body, queue_id=queue_id, flag=half.flag, properties=props,
        sys_flag=(half.sys_flag & ~mc.TRANSACTION_ROLLBACK_TYPE) | mc.TRANSACTION_COMMIT_TYPE,
        born_timestamp=half.born_timestamp, born_host=half.born_host, reconsume_times=half.reconsume_times,
        prepared_transaction_offset=commit_log_offset)


def op_message(half_queue_id: int, half_queue_offset: int, store_host: tuple[str, int]) -> rec.MessageExtBrokerInner:
    """TransactionalMessageBridge.addRemoveTagInTransactionOp + makeOpMessageInner: tag ``d``, body the half
    queue offset, born at the broker; put without waiting for the disk. (4.9.8 also gives it a UNIQ_KEY, which
    nothing reads; it sets WAIT=false after encoding the properties, so the stored ones hold only TAGS.)"""
    return rec.MessageExtBrokerInner(
        topic=tx.OP_TOPIC, body=str(half_queue_offset).encode(tx.OP_CHARSET), queue_id=half_queue_id,
        properties={mc.PROPERTY_TAGS: tx.REMOVE_TAG, mc.PROPERTY_WAIT_STORE_MSG_OK: "false"}, sys_flag=0,
        born_timestamp=time.time_ns() // 1_000_000, born_host=store_host,
        properties_bytes=mc.properties_to_bytes({mc.PROPERTY_TAGS: tx.REMOVE_TAG}))


def renew_half(half: rec.MessageExt) -> rec.MessageExtBrokerInner:
    """TransactionalMessageBridge.renewHalfMessageInner: the same half message, appended again to the half
    queue before it is checked (its properties carry the incremented TRANSACTION_CHECK_TIMES); the stored
    properties are the half's.

    Deliberate differences: the put waits as the half message's own did (its WAIT; 4.9.8 puts the copy without
    waiting), so under SYNC_FLUSH (and SYNC_MASTER) the copy is durable before the check's progress passes
    the original (transaction_check.py); and the user flag and reconsume times are kept (4.9.8 leaves them 0
    in the copy, so a message committed after a check-back lost its flag there)."""
    return rec.MessageExtBrokerInner(
        topic=half.topic, body=half.body, queue_id=half.queue_id, flag=half.flag, properties=dict(half.properties),
        sys_flag=half.sys_flag, born_timestamp=half.born_timestamp, born_host=half.born_host,
        reconsume_times=half.reconsume_times)


def discard_message(half: rec.MessageExt) -> rec.MessageExtBrokerInner:
    """DefaultTransactionalMessageCheckListener.toMessageExtBrokerInner: a half message checked
    transactionCheckMax times goes to TRANS_CHECK_MAX_TIME_TOPIC queue 0 (≥ 4.4, PR #633)."""
    inner = renew_half(half)
    inner.topic = tx.CHECK_MAX_TIME_TOPIC
    inner.queue_id = 0
    return inner
