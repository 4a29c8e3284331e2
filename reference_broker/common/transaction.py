"""This module owns the names and wire fields of transactional messages that broker and client share
(RocketMQ ≥ 4.3: broker/.../transaction/queue/TransactionalMessageUtil.java, common/.../protocol/header/
EndTransactionRequestHeader.java and CheckTransactionStateRequestHeader.java, 4.9.8). Sans-IO.

END_TRANSACTION (37), client → broker, oneway from the Java client:

| field                | type    | meaning                                                                |
|----------------------|---------|------------------------------------------------------------------------|
| producerGroup        | String  | must equal the half message's PGROUP                                   |
| tranStateTableOffset | Long    | the half message's queue offset in RMQ_SYS_TRANS_HALF_TOPIC            |
| commitLogOffset      | Long    | the half message's commit-log offset (from the send reply's offsetMsgId) |
| commitOrRollback     | Integer | sysflag transaction type: 0 UNKNOW, 8 COMMIT, 12 ROLLBACK              |
| fromTransactionCheck | Boolean | true when answering CHECK_TRANSACTION_STATE (default false)            |
| msgId                | String  | the client's message id (UNIQ_KEY)                                     |
| transactionId        | String  | optional                                                               |

CHECK_TRANSACTION_STATE (39), broker → producer, oneway; body = the half message encoded as a record
(MessageDecoder.encode) with its real topic and queue id:

| field                | type   | meaning                                                                 |
|----------------------|--------|-------------------------------------------------------------------------|
| tranStateTableOffset | Long   | queue offset of the half message's newest copy in the half topic        |
| commitLogOffset      | Long   | commit-log offset of that copy                                          |
| msgId                | String | UNIQ_KEY                                                                |
| transactionId        | String | UNIQ_KEY too (sendCheckMessage sets both)                               |
| offsetMsgId          | String | the copy's offsetMsgId                                                  |
"""

from __future__ import annotations

from typing import Final

from reference_broker.common import message as mc
from reference_broker.common import record as rec

# TransactionalMessageUtil.
REMOVE_TAG: Final = "d"  # REMOVETAG: the op message's tag that marks a half message as resolved
OP_CHARSET: Final = "utf-8"  # the op body is the half queue offset as decimal text
CID_RMQ_SYS_TRANS: Final = "CID_RMQ_SYS_TRANS"  # MixAll.CID_SYS_RMQ_TRANS: the check service's offsets
HALF_TOPIC: Final = mc.RMQ_SYS_TRANS_HALF_TOPIC
OP_TOPIC: Final = mc.RMQ_SYS_TRANS_OP_HALF_TOPIC
CHECK_MAX_TIME_TOPIC: Final = "TRANS_CHECK_MAX_TIME_TOPIC"  # TopicValidator.RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC
CHECK_MAX_TIME_QUEUE_NUMS: Final = 1  # AbstractTransactionalMessageCheckListener.TCMT_QUEUE_NUMS

# commitOrRollback values (MessageSysFlag transaction types).
UNKNOW: Final = mc.TRANSACTION_NOT_TYPE
COMMIT: Final = mc.TRANSACTION_COMMIT_TYPE
ROLLBACK: Final = mc.TRANSACTION_ROLLBACK_TYPE
END_TYPES: Final = frozenset({UNKNOW, COMMIT, ROLLBACK})  # EndTransactionRequestHeader.checkFields


def end_transaction_header(producer_group: str, tran_state_table_offset: int, commit_log_offset: int,
                           commit_or_rollback: int, msg_id: str, *, from_check: bool = False,
                           transaction_id: str | None = None) -> dict[str, str]:
    """EndTransactionRequestHeader as makeCustomHeaderToNet writes it: strings, null fields left out."""
    fields = {"producerGroup": producer_group, "tranStateTableOffset": str(tran_state_table_offset),
              "commitLogOffset": str(commit_log_offset), "commitOrRollback": str(commit_or_rollback),
              "fromTransactionCheck": "true" if from_check else "false", "msgId": msg_id}
    if transaction_id is not None:
        fields["transactionId"] = transaction_id
    return fields


def check_state_header(tran_state_table_offset: int, commit_log_offset: int, msg_id: str | None,
                       offset_msg_id: str) -> dict[str, str]:
    """CheckTransactionStateRequestHeader as AbstractTransactionalMessageCheckListener.sendCheckMessage fills it
    (msgId and transactionId are both the UNIQ_KEY, left out when the message has none)."""
    fields = {"tranStateTableOffset": str(tran_state_table_offset), "commitLogOffset": str(commit_log_offset),
              "offsetMsgId": offset_msg_id}
    if msg_id is not None:
        fields["msgId"] = msg_id
        fields["transactionId"] = msg_id
    return fields


def encode_message(msg: rec.MessageExt) -> bytes:
    """MessageDecoder.encode(msg, false): the whole record, with the message's own offsets, hosts and store
    time (the CHECK_TRANSACTION_STATE body, which the producer decodes with MessageDecoder.decode)."""
    props_b = mc.properties_to_bytes(msg.properties)
    r = rec.prepare_record(msg.topic.encode(), msg.body, props_b, msg.queue_id, msg.flag, msg.sys_flag,
                           msg.born_timestamp, rec.host_bytes(msg.born_host[0]), msg.born_host[1],
                           rec.host_bytes(msg.store_host[0]), msg.store_host[1], msg.reconsume_times,
                           msg.prepared_transaction_offset)
    out = bytearray(r.size)
    rec.write_record(out, 0, r, msg.queue_offset, msg.commit_log_offset, msg.store_timestamp, False)
    return bytes(out)
