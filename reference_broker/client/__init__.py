"""RocketMQ 4.x-style client: producer, pull consumer and push consumer over the remoting protocol.

::

    from reference_broker.client import Message, Producer, PushConsumer, ConsumeConcurrentlyStatus

    with Producer("PG", "127.0.0.1:9876") as producer:
        result = producer.send(Message("TopicTest", b"hello", tags="TagA", keys="order-1"))

    consumer = PushConsumer("CG", "127.0.0.1:9876")
    consumer.subscribe("TopicTest", "TagA || TagB")  # or MessageSelector.by_sql("a > 5 AND TAGS = 'TagA'")
    consumer.register_message_listener(lambda msgs, ctx: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
    consumer.start()

Threads and blocking sockets only (no asyncio), so it runs under gevent's monkey-patching (locust).
Errors are ``MQClientError`` / ``MQBrokerError`` with RocketMQ's code, remark and ``retriable``.
"""

from reference_broker.client.allocate import (
    AllocateAveragely,
    AllocateAveragelyByCircle,
    AllocateByConfig,
    AllocateConsistentHash,
    AllocateStrategy,
)
from reference_broker.client.config import ClientConfig
from reference_broker.client.errors import ClientErrorCode, MQBrokerError, MQClientError
from reference_broker.client.message import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    Message,
    MessageExt,
    MessageModel,
    MessageQueue,
    PullResult,
    PullStatus,
    SendResult,
    SendStatus,
)
from reference_broker.client.producer import Producer, select_by_hash, select_by_random
from reference_broker.client.pull_consumer import PullConsumer
from reference_broker.client.push_consumer import PushConsumer
from reference_broker.client.subscription import MessageSelector
from reference_broker.client.transaction_producer import (
    LocalTransactionState,
    TransactionListener,
    TransactionProducer,
    TransactionSendResult,
)

__all__ = [
    "AllocateAveragely",
    "AllocateAveragelyByCircle",
    "AllocateByConfig",
    "AllocateConsistentHash",
    "AllocateStrategy",
    "ClientConfig",
    "ClientErrorCode",
    "ConsumeConcurrentlyContext",
    "ConsumeConcurrentlyStatus",
    "ConsumeFromWhere",
    "ConsumeOrderlyContext",
    "ConsumeOrderlyStatus",
    "LocalTransactionState",
    "MQBrokerError",
    "MQClientError",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "MessageSelector",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "SendResult",
    "SendStatus",
    "TransactionListener",
    "TransactionProducer",
    "TransactionSendResult",
    "select_by_hash",
    "select_by_random",
]
