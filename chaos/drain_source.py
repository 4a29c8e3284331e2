"""This module owns where the chaos drain reads a topic back from: through the name server's route with a
PullConsumer (``ConsumerSource``, the usual case), or straight from one broker's address (``BrokerSource``: the
slave of a group whose master was killed or lost its disk).

The second exists because a consumer cannot drain a group without its master: MQAdminImpl.minOffset and
maxOffset (4.9.8) ask only the master (findBrokerAddressInPublish) and fail when the route has none, though the
slave serves the pulls themselves. ``BrokerSource`` asks the broker it was given for everything, so a drain from
the slave reads what the slave holds and nothing else.
"""

from __future__ import annotations

from typing import Protocol

from reference_broker.client import MessageQueue, MQClientError, PullConsumer, PullResult
from reference_broker.client import protocol as cp
from reference_broker.client.errors import ClientErrorCode
from reference_broker.client.subscription import EXPRESSION_TAG, build_subscription_data
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.command import RemotingCommand
from reference_broker.remoting.errors import RemotingError
from reference_broker.remoting.headers import build_pull_sys_flag


class DrainSource(Protocol):
    """Queue listing, queue bounds and pulls; MQClientError when an answer cannot be had."""

    def start(self) -> None: ...
    def shutdown(self) -> None: ...
    def queues(self, topic: str) -> set[MessageQueue]: ...
    def min_offset(self, mq: MessageQueue) -> int: ...
    def max_offset(self, mq: MessageQueue) -> int: ...
    def pull(self, mq: MessageQueue, offset: int, max_nums: int) -> PullResult: ...


class ConsumerSource:
    """A PullConsumer: the queues from the name server's route, their bounds from the queue's master."""

    def __init__(self, consumer: PullConsumer) -> None:
        self.consumer = consumer

    def start(self) -> None:
        self.consumer.start()

    def shutdown(self) -> None:
        self.consumer.shutdown()

    def queues(self, topic: str) -> set[MessageQueue]:
        return self.consumer.fetch_message_queues(topic)

    def min_offset(self, mq: MessageQueue) -> int:
        return self.consumer.min_offset(mq)

    def max_offset(self, mq: MessageQueue) -> int:
        return self.consumer.max_offset(mq)

    def pull(self, mq: MessageQueue, offset: int, max_nums: int) -> PullResult:
        return self.consumer.pull(mq, "*", offset, max_nums)


class BrokerSource:
    """One broker at ``addr``: queues 0..n-1 of ``broker_name``, bounds and pulls all asked of it. The pull
    carries its subscription (no heartbeat registers the group first; the broker's autoCreateSubscriptionGroup
    creates it)."""

    def __init__(self, addr: str, broker_name: str, queue_count: int, group: str, timeout_s: float = 10.0) -> None:
        self.addr = addr
        self.broker_name = broker_name
        self.queue_count = queue_count
        self.group = group
        self.timeout_s = timeout_s
        self._client: RemotingClient | None = None

    def start(self) -> None:
        host, _, port = self.addr.rpartition(":")
        self._client = RemotingClient(host, int(port), timeout_s=self.timeout_s)

    def shutdown(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()

    def _invoke(self, cmd: RemotingCommand) -> RemotingCommand:
        if self._client is None:
            raise MQClientError(ClientErrorCode.CLIENT_STATE_EXCEPTION, "the drain source is not started", False)
        try:
            return self._client.invoke(cmd)
        except (RemotingError, OSError) as e:
            raise MQClientError(ClientErrorCode.BROKER_NOT_EXIST_EXCEPTION, f"{self.addr}: {e}") from e

    def queues(self, topic: str) -> set[MessageQueue]:
        return {MessageQueue(topic, self.broker_name, q) for q in range(self.queue_count)}

    def min_offset(self, mq: MessageQueue) -> int:
        return cp.offset_from_response(self._invoke(cp.min_offset_request(mq)), self.addr)

    def max_offset(self, mq: MessageQueue) -> int:
        return cp.offset_from_response(self._invoke(cp.max_offset_request(mq)), self.addr)

    def pull(self, mq: MessageQueue, offset: int, max_nums: int) -> PullResult:
        sub = build_subscription_data(mq.topic, "*")
        cmd = cp.pull_request(self.group, mq, sub.sub_string, EXPRESSION_TAG, sub.sub_version, offset, max_nums,
                              build_pull_sys_flag(commit_offset=False, suspend=False, subscription=True), 0, 0)
        result, body = cp.process_pull_response(self._invoke(cmd), self.addr)
        return cp.finish_pull_result(result, body, mq, sub)
