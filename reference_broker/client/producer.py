"""This module owns the producer (DefaultMQProducer / DefaultMQProducerImpl, 4.9.8).

Sending modes:

- ``send``: synchronous. Round-robin over the topic's writable queues; on a transport error or a retriable
  broker code (``errors.RETRIABLE_BROKER_CODES``) it tries again on a queue of another broker, up to
  ``retry_times_when_send_failed`` (2) more times within one ``send_msg_timeout_s`` (3 s) budget
  (sendDefaultImpl). A degraded-but-stored status (FLUSH_DISK_TIMEOUT, ...) is returned, or retried with
  ``retry_another_broker_when_not_store_ok``.
- ``send_async``: pipelined on the broker connection (many requests in flight); completes a Future, or
  calls ``callback(result, error)``. A transport failure or timeout is retried up to
  ``retry_times_when_send_async_failed`` (2) times on another broker, as onExceptionImpl does; a broker
  error code is not. Callbacks run on the connection's reader thread unless ``callback_executor`` is
  given, so they must be quick and must not block on this producer.
- ``send_oneway``: written and forgotten; no result, no retry.
- ``send_batch``: one SEND_BATCH_MESSAGE for messages of one topic (``common.message_batch``); each
  message gets its own UNIQ_KEY; the result's msg_id joins them with commas.
- with ``mq=`` (a fixed queue) or ``selector=`` + ``arg`` (e.g. ``select_by_hash``: one key, one queue,
  for ordered messages): sent once, never retried elsewhere (sendSelectImpl / sendKernelImpl).

The message id returned is the client UNIQ_KEY (``message_id``); the broker's offset id is
``SendResult.offset_msg_id``. Not implemented: body compression (compressMsgBodyOverHowmuch; bodies go as
they are, so sysFlag never has COMPRESSED), the send-latency fault strategy (sendLatencyFaultEnable,
off by default in RocketMQ too), request-reply, namespaces and message traces. Transactions:
``TransactionProducer`` (transaction_producer.py).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from typing import Any, Final

from reference_broker.client import protocol
from reference_broker.client.config import ClientConfig
from reference_broker.client.errors import ClientErrorCode, MQBrokerError, MQClientError
from reference_broker.client.instance import MQClientInstance, get_instance
from reference_broker.client.message import Message, MessageQueue, SendResult, SendStatus
from reference_broker.client.message_id import default_generator
from reference_broker.client.route import TopicPublishInfo
from reference_broker.client.validators import check_group, check_message
from reference_broker.common import message as mc
from reference_broker.common.java_hash import string_hash_code
from reference_broker.common.message_batch import BatchEntry, encode_batch
from reference_broker.remoting.codes import ResponseCode
from reference_broker.remoting.command import RemotingCommand
from reference_broker.remoting.errors import RemotingError

log = logging.getLogger(__name__)

MAX_MESSAGE_SIZE: Final = 4 * 1024 * 1024  # DefaultMQProducer.maxMessageSize
_UNIQ: Final = mc.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX

SendCallback = Callable[[SendResult | None, MQClientError | None], object]
MessageQueueSelector = Callable[[list[MessageQueue], Message, Any], MessageQueue]


def select_by_hash(mqs: list[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
    """SelectMessageQueueByHash: ``abs(arg.hashCode() % n)``, with Java's hashCode for str and int keys, so a
    key maps to the same queue as from a Java producer."""
    if isinstance(arg, str):
        h = string_hash_code(arg)
    elif isinstance(arg, int):
        h = ((arg + 2**31) % 2**32) - 2**31  # Integer.hashCode of the int's low 32 bits
    else:
        h = hash(arg)
    value = abs(h) % len(mqs)  # Java: remainder keeps the sign, then Math.abs: same result
    return mqs[value]


def select_by_random(mqs: list[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
    """SelectMessageQueueByRandom."""
    return random.choice(mqs)


class _AsyncSend:
    """One async send and its retries (the state sendMessageAsync's callback closure carries)."""

    __slots__ = ("begin", "brokers", "callback", "future", "msg", "timeout", "times", "topic", "uniq", "unknown")

    def __init__(self, msg: Message, uniq: str, timeout: float, callback: SendCallback | None,
                 future: Future[SendResult] | None) -> None:
        self.msg = msg
        self.topic = msg.topic
        self.uniq = uniq
        self.timeout = timeout
        self.callback = callback
        self.future = future
        self.begin = time.monotonic()
        self.times = 0
        self.brokers: list[str] | None = None  # made on the first retry only: the common path allocates less
        self.unknown = False


class Producer:
    """DefaultMQProducer. ``client_config`` (intervals, instance name) replaces ``namesrv_addr`` and
    ``instance_name`` when given; producers and consumers with the same client id share one connection per
    broker."""

    def __init__(
        self,
        group: str,
        namesrv_addr: str,
        *,
        instance_name: str = "DEFAULT",
        send_msg_timeout_s: float = 3.0,
        retry_times_when_send_failed: int = 2,
        retry_times_when_send_async_failed: int = 2,
        retry_another_broker_when_not_store_ok: bool = False,
        max_message_size: int = MAX_MESSAGE_SIZE,
        default_topic_queue_nums: int = protocol.DEFAULT_TOPIC_QUEUE_NUMS,
        callback_executor: Executor | None = None,
        client_config: ClientConfig | None = None,
    ) -> None:
        check_group(group)
        self.group = group
        self.config = client_config or ClientConfig(namesrv_addr, instance_name)
        self.send_msg_timeout_s = send_msg_timeout_s
        self.retry_times_when_send_failed = retry_times_when_send_failed
        self.retry_times_when_send_async_failed = retry_times_when_send_async_failed
        self.retry_another_broker_when_not_store_ok = retry_another_broker_when_not_store_ok
        self.max_message_size = max_message_size
        self.default_topic_queue_nums = default_topic_queue_nums
        self.callback_executor = callback_executor
        self._instance: MQClientInstance | None = None
        self._ids = default_generator(self.config.resolved_ip())

    # ---- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        if self._instance is not None:
            return
        instance = get_instance(self.config)
        instance.register_producer(self.group, self)
        instance.start()
        self._instance = instance
        instance.send_heartbeat_to_all_brokers()

    def shutdown(self) -> None:
        instance, self._instance = self._instance, None
        if instance is not None:
            instance.unregister_producer(self.group)
            instance.shutdown()

    def __enter__(self) -> Producer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    @property
    def client_id(self) -> str:
        return self._running().client_id

    def _running(self) -> MQClientInstance:
        instance = self._instance
        if instance is None:
            raise MQClientError(ClientErrorCode.CLIENT_STATE_EXCEPTION, "The producer service state not OK, "
                                "maybe started once or not started", False)
        return instance

    # ---- routes -----------------------------------------------------------------------------

    def _publish_info(self, topic: str) -> TopicPublishInfo:
        """tryToFindTopicPublishInfo: the cached route, else the name server's, else the default topic's."""
        instance = self._running()
        info = instance.publish_infos.get(topic)
        if info is not None and info.ok:
            return info
        instance.want_publish(topic)
        try:
            if not instance.update_topic_route(topic):
                instance.update_topic_route(topic, protocol.DEFAULT_TOPIC, self.default_topic_queue_nums)
        except MQClientError as exc:
            raise MQClientError(ClientErrorCode.NOT_FOUND_TOPIC_EXCEPTION,
                                f"No route info of this topic: {topic} ({exc.remark})") from exc
        info = instance.publish_infos.get(topic)
        if info is None or not info.ok:
            raise MQClientError(ClientErrorCode.NOT_FOUND_TOPIC_EXCEPTION, f"No route info of this topic: {topic}")
        return info

    def fetch_publish_message_queues(self, topic: str) -> list[MessageQueue]:
        return list(self._publish_info(topic).message_queues)

    # ---- request building -------------------------------------------------------------------

    def _prepare(self, msg: Message) -> str:
        """Validate and stamp the UNIQ_KEY (kept if already set, as setUniqID does); returns it."""
        check_message(msg, self.max_message_size)
        props = msg.properties
        uniq = props.get(_UNIQ)
        if uniq is None:
            uniq = props[_UNIQ] = self._ids.create()
        return uniq

    def _request(self, msg: Message, mq: MessageQueue) -> RemotingCommand:
        max_reconsume: int | None = None
        if mq.topic.startswith(mc.RETRY_GROUP_TOPIC_PREFIX):
            raw = msg.properties.get(mc.PROPERTY_MAX_RECONSUME_TIMES)
            max_reconsume = int(raw) if raw else None
        # sendKernelImpl: a half message (TRAN_MSG=true) says so in its sysFlag too.
        sys_flag = mc.TRANSACTION_PREPARED_TYPE if msg.properties.get(mc.PROPERTY_TRANSACTION_PREPARED) == "true" else 0
        return protocol.send_request(
            self.group, mq.topic, mq.queue_id, msg.body, protocol.encode_properties(msg.properties), msg.flag,
            sys_flag=sys_flag, born_timestamp=int(time.time() * 1000), max_reconsume_times=max_reconsume,
        )

    def broker_addr(self, mq: MessageQueue) -> str:
        """The address of ``mq``'s master broker (the route is refreshed once if unknown)."""
        return self._running().broker_addr_for(mq)

    _addr = broker_addr

    # ---- sync -------------------------------------------------------------------------------

    def send(self, msg: Message, mq: MessageQueue | None = None, *, selector: MessageQueueSelector | None = None,
             arg: Any = None, timeout_s: float | None = None) -> SendResult:
        timeout = self.send_msg_timeout_s if timeout_s is None else timeout_s
        uniq = self._prepare(msg)
        if mq is not None or selector is not None:
            mq = self._fixed_queue(msg, mq, selector, arg)
            return self._send_kernel(msg, mq, uniq, timeout)
        return self._send_default(msg, uniq, timeout, self._request)

    def _fixed_queue(self, msg: Message, mq: MessageQueue | None, selector: MessageQueueSelector | None,
                     arg: Any) -> MessageQueue:
        if mq is None:
            assert selector is not None
            mqs = list(self._publish_info(msg.topic).message_queues)
            mq = selector(mqs, msg, arg)
            if mq is None:
                raise MQClientError(ClientErrorCode.NOT_FOUND_TOPIC_EXCEPTION, "select message queue return null.")
        if mq.topic != msg.topic:
            raise MQClientError(ClientErrorCode.CLIENT_STATE_EXCEPTION, "message's topic not equal mq's topic", False)
        return mq

    def _send_kernel(self, msg: Message, mq: MessageQueue, uniq: str, timeout: float,
                     build: Callable[[Message, MessageQueue], RemotingCommand] | None = None) -> SendResult:
        instance = self._running()
        addr = instance.broker_addr_for(mq)
        cmd = (build or self._request)(msg, mq)
        response = instance.invoke(addr, cmd, timeout)
        return protocol.process_send_response(response, mq.topic, mq.broker_name, uniq, addr, mq)

    def _send_default(self, msg: Message, uniq: str, timeout: float,
                      build: Callable[[Message, MessageQueue], RemotingCommand]) -> SendResult:
        """sendDefaultImpl for SYNC: 1 + retry_times_when_send_failed attempts within ``timeout``."""
        info = self._publish_info(msg.topic)
        begin = time.monotonic()
        last_broker: str | None = None
        brokers_sent: list[str] = []
        error: MQClientError | None = None
        unknown = False
        result: SendResult | None = None
        call_timeout = False
        for _ in range(1 + self.retry_times_when_send_failed):
            mq = info.select_one(last_broker)
            last_broker = mq.broker_name
            brokers_sent.append(mq.broker_name)
            elapsed = time.monotonic() - begin
            if elapsed >= timeout:
                call_timeout = True
                break
            try:
                result = self._send_kernel(msg, mq, uniq, timeout - elapsed, build)
            except MQBrokerError as exc:
                error = exc
                if exc.retriable:
                    continue
                raise
            except MQClientError as exc:
                error = exc
                unknown = unknown or exc.unknown_outcome
                log.warning("send to %s failed, retry: %s", mq, exc)
                continue
            if result.send_status is not SendStatus.SEND_OK and self.retry_another_broker_when_not_store_ok:
                continue
            return result
        if result is not None:
            return result
        cost_ms = int((time.monotonic() - begin) * 1000)
        if call_timeout and error is None:
            raise MQClientError(ClientErrorCode.REQUEST_TIMEOUT_EXCEPTION, "sendDefaultImpl call timeout",
                                unknown_outcome=unknown)
        assert error is not None
        final = MQClientError(error.code, f"Send [{len(brokers_sent)}] times, still failed, cost [{cost_ms}]ms, "
                              f"Topic: {msg.topic}, BrokersSent: {brokers_sent}: {error.remark}",
                              error.retriable, unknown or error.unknown_outcome)
        raise final from error

    # ---- async ------------------------------------------------------------------------------

    def send_async(self, msg: Message, callback: SendCallback | None = None, mq: MessageQueue | None = None, *,
                   selector: MessageQueueSelector | None = None, arg: Any = None,
                   timeout_s: float | None = None) -> Future[SendResult] | None:
        """Returns a Future when no callback is given, else None. An invalid message or a producer not started
        raises here; everything later (no route, transport, broker) completes the Future or the callback."""
        timeout = self.send_msg_timeout_s if timeout_s is None else timeout_s
        self._running()
        uniq = self._prepare(msg)
        future: Future[SendResult] | None = Future() if callback is None else None
        state = _AsyncSend(msg, uniq, timeout, callback, future)
        try:
            if mq is not None or selector is not None:
                fixed = self._fixed_queue(msg, mq, selector, arg)
                state.times = self.retry_times_when_send_async_failed  # a fixed queue is never retried
                self._async_attempt(state, fixed)
            else:
                self._async_attempt(state, self._publish_info(msg.topic).select_one(None))
        except MQClientError as exc:
            self._complete(state, None, exc)
        return future

    def _async_attempt(self, state: _AsyncSend, mq: MessageQueue) -> None:
        remaining = state.timeout - (time.monotonic() - state.begin)
        if remaining <= 0:
            self._complete(state, None, MQClientError(ClientErrorCode.REQUEST_TIMEOUT_EXCEPTION,
                                                      "sendDefaultImpl call timeout", unknown_outcome=state.unknown))
            return
        instance = self._running()
        addr = instance.broker_addr_for(mq)
        cmd = self._request(state.msg, mq)

        def on_response(response: RemotingCommand | None, error: RemotingError | None) -> None:
            if response is not None:
                try:
                    result = protocol.process_send_response(response, mq.topic, mq.broker_name, state.uniq, addr,
                                                            mq)
                except MQBrokerError as exc:  # a broker answer is final for async sends
                    self._complete(state, None, exc)
                    return
                self._complete(state, result, None)
                return
            assert error is not None
            self._async_failed(state, mq, MQClientError.from_remoting(error))

        try:
            instance.invoke_async(addr, cmd, on_response, remaining)
        except MQClientError as exc:
            self._async_failed(state, mq, exc)

    def _async_failed(self, state: _AsyncSend, mq: MessageQueue, exc: MQClientError) -> None:
        """onExceptionImpl: try another broker while attempts and time remain."""
        state.unknown = state.unknown or exc.unknown_outcome
        state.times += 1
        if state.brokers is None:
            state.brokers = []
        state.brokers.append(mq.broker_name)
        if state.times <= self.retry_times_when_send_async_failed and self._instance is not None:
            try:
                next_mq = self._publish_info(state.topic).select_one(mq.broker_name)
                log.info("async send to %s failed (%s), retry %d on %s", mq, exc, state.times, next_mq)
                self._async_attempt(state, next_mq)
                return
            except MQClientError as retry_exc:
                exc = retry_exc
        exc.unknown_outcome = exc.unknown_outcome or state.unknown
        self._complete(state, None, exc)

    def _complete(self, state: _AsyncSend, result: SendResult | None, error: MQClientError | None) -> None:
        future = state.future
        if future is not None:
            if error is None:
                assert result is not None
                future.set_result(result)
            else:
                future.set_exception(error)
            return
        callback = state.callback
        assert callback is not None
        if self.callback_executor is not None:
            self.callback_executor.submit(_safe_callback, callback, result, error)
        else:
            _safe_callback(callback, result, error)

    # ---- oneway -----------------------------------------------------------------------------

    def send_oneway(self, msg: Message, mq: MessageQueue | None = None, *,
                    selector: MessageQueueSelector | None = None, arg: Any = None) -> None:
        self._prepare(msg)
        if mq is not None or selector is not None:
            mq = self._fixed_queue(msg, mq, selector, arg)
        else:
            mq = self._publish_info(msg.topic).select_one(None)
        instance = self._running()
        instance.invoke_oneway(instance.broker_addr_for(mq), self._request(msg, mq))

    # ---- batch ------------------------------------------------------------------------------

    def send_batch(self, msgs: Sequence[Message], mq: MessageQueue | None = None, *,
                   timeout_s: float | None = None) -> SendResult:
        """MessageBatch.generateFromList + sendDefaultImpl: one request for messages of one topic."""
        if not msgs:
            raise MQClientError(ResponseCode.MESSAGE_ILLEGAL, "batch is empty", False)
        topic = msgs[0].topic
        wait = msgs[0].wait_store_msg_ok
        uniqs: list[str] = []
        illegal = ResponseCode.MESSAGE_ILLEGAL
        for msg in msgs:
            if msg.delay_time_level > 0:
                raise MQClientError(illegal, "TimeDelayLevel is not supported for batching", False)
            if msg.topic.startswith(mc.RETRY_GROUP_TOPIC_PREFIX):
                raise MQClientError(illegal, "Retry Group is not supported for batching", False)
            if msg.topic != topic:
                raise MQClientError(illegal, "The topic of the messages in one batch should be the same",
                                    False)
            if msg.wait_store_msg_ok != wait:
                raise MQClientError(illegal, "The waitStoreMsgOK of the messages in one batch should "
                                    "the same", False)
            uniqs.append(self._prepare(msg))
        body = encode_batch(BatchEntry(m.flag, m.body, m.properties) for m in msgs)
        if len(body) > self.max_message_size:
            raise MQClientError(ResponseCode.MESSAGE_ILLEGAL, f"the message body size over max value, MAX: "
                                f"{self.max_message_size}", False)
        batch_props = protocol.encode_properties({mc.PROPERTY_WAIT_STORE_MSG_OK: "true" if wait else "false"})
        timeout = self.send_msg_timeout_s if timeout_s is None else timeout_s
        uniq = ",".join(uniqs)
        carrier = Message(topic, body)

        def build(_msg: Message, target: MessageQueue) -> RemotingCommand:
            return protocol.send_request(self.group, target.topic, target.queue_id, body, batch_props, 0, batch=True,
                                         born_timestamp=int(time.time() * 1000))

        if mq is not None:
            if mq.topic != topic:
                raise MQClientError(ClientErrorCode.CLIENT_STATE_EXCEPTION, "message's topic not equal mq's topic",
                                    False)
            return self._send_kernel(carrier, mq, uniq, timeout, build)
        return self._send_default(carrier, uniq, timeout, build)


def _safe_callback(callback: SendCallback, result: SendResult | None, error: MQClientError | None) -> None:
    try:
        callback(result, error)
    except Exception:  # a user callback must not kill the caller's thread
        log.exception("send callback failed")
