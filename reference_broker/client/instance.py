"""This module owns MQClientInstance: what the producers and consumers of one process share (4.9.8).

- the name-server list and the topic route table, refreshed every ``poll_name_server_interval_s``;
- the broker address table (brokerName -> {brokerId: addr}) and one ``RemotingClient`` per address;
- the heartbeat to every known broker at start and every ``heartbeat_broker_interval_s``, and
  UNREGISTER_CLIENT to each at shutdown;
- the timer thread, the rebalance service (every ``rebalance_interval_s`` or at once on
  NOTIFY_CONSUMER_IDS_CHANGED) and the consumer-offset persistence task;
- the request handler for broker-initiated requests.

``get_instance`` is MQClientManager: one instance per client id, shut down when its last producer or
consumer is. Transport errors leave here as ``MQClientError`` (see ``errors``).
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from dataclasses import dataclass
from typing import Protocol

from reference_broker.client import protocol
from reference_broker.client.config import ClientConfig
from reference_broker.client.errors import ClientErrorCode, MQBrokerError, MQClientError
from reference_broker.client.message import MessageQueue
from reference_broker.client.route import (
    TopicPublishInfo,
    TopicRouteData,
    publish_info_from_route,
    subscribe_info_from_route,
)
from reference_broker.client.scheduler import Scheduler, Worker
from reference_broker.client.subscription import SubscriptionData
from reference_broker.common import message as mc
from reference_broker.common import reset_offset_body
from reference_broker.common.record import RecordError, decode_message
from reference_broker.common.route_data import MASTER_ID
from reference_broker.remoting.client import RemotingClient, ResponseCallback
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import RemotingCommand, create_response
from reference_broker.remoting.errors import RemotingError

log = logging.getLogger(__name__)


class ConsumerInner(Protocol):
    """What the instance needs of a consumer (MQConsumerInner)."""

    group: str

    def consumer_data(self) -> dict[str, object]: ...

    def subscriptions(self) -> list[SubscriptionData]: ...

    def do_rebalance(self) -> None: ...

    def persist_consumer_offset(self) -> None: ...


@dataclass(frozen=True)
class FindBrokerResult:
    """FindBrokerResult: an address and whether it is a slave's."""

    broker_addr: str
    slave: bool


class MQClientInstance:
    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self.client_id = config.client_id()
        self.scheduler = Scheduler(f"client-scheduler-{self.client_id}")
        self._namesrv_addrs = config.namesrv_addrs()
        if not self._namesrv_addrs:
            raise MQClientError(ClientErrorCode.NO_NAME_SERVER_EXCEPTION, "no name server address")
        self._namesrv_index = random.randrange(len(self._namesrv_addrs))
        self._lock = threading.RLock()  # guards the tables below and the client map
        self._clients: dict[str, RemotingClient] = {}
        self.topic_routes: dict[str, TopicRouteData] = {}
        self.broker_addrs: dict[str, dict[int, str]] = {}
        self.publish_infos: dict[str, TopicPublishInfo] = {}
        self.subscribe_infos: dict[str, set[MessageQueue]] = {}
        self.producers: dict[str, object] = {}
        self.consumers: dict[str, ConsumerInner] = {}
        self._heartbeat_lock = threading.Lock()
        self._heartbeat_nudged = 0.0  # monotonic time of the last heartbeat_soon
        self._rebalance_wakeup = threading.Event()
        self._rebalance_thread: threading.Thread | None = None
        self._started = False
        self._stopped = False
        self._wanted_publish: set[str] = set()  # topics some producer sends to
        # PullMessageService: one thread issues every push consumer's pulls and handles their results.
        self.pull_service = Worker(f"pull-{self.client_id}")

    # ---- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        cfg = self.config
        self.scheduler.start()
        # MQClientInstance.startScheduledTask: route after 10 ms, heartbeat after 1 s, offsets after 10 s.
        self.scheduler.schedule_at_fixed_rate(0.01, cfg.poll_name_server_interval_s, self._update_all_routes_task)
        self.scheduler.schedule_at_fixed_rate(1.0, cfg.heartbeat_broker_interval_s, self._heartbeat_task)
        self.scheduler.schedule_at_fixed_rate(min(10.0, cfg.persist_consumer_offset_interval_s * 2),
                                              cfg.persist_consumer_offset_interval_s, self.persist_all_offsets)
        self._rebalance_thread = threading.Thread(target=self._rebalance_loop, daemon=True,
                                                  name=f"rebalance-{self.client_id}")
        self._rebalance_thread.start()
        self.pull_service.start()

    def shutdown(self) -> bool:
        """Stop, unless a producer or consumer is still registered (MQClientInstance.shutdown); True if stopped."""
        with self._lock:
            if self.producers or self.consumers or self._stopped:
                return False
            self._stopped = True
            clients = list(self._clients.values())
            self._clients.clear()
        _manager_forget(self)
        self.scheduler.shutdown()
        self._rebalance_wakeup.set()
        if self._rebalance_thread is not None and self._rebalance_thread is not threading.current_thread():
            self._rebalance_thread.join(5.0)
        self.pull_service.shutdown()
        for client in clients:
            client.close()
        return True

    @property
    def running(self) -> bool:
        return self._started and not self._stopped

    # ---- registration -----------------------------------------------------------------------

    def register_producer(self, group: str, producer: object) -> None:
        with self._lock:
            if group in self.producers:
                raise MQClientError(ClientErrorCode.CLIENT_STATE_EXCEPTION,
                                    f"The producer group[{group}] has been created before, specify another name "
                                    "please.", False)
            self.producers[group] = producer

    def register_consumer(self, group: str, consumer: ConsumerInner) -> None:
        with self._lock:
            if group in self.consumers:
                raise MQClientError(ClientErrorCode.CLIENT_STATE_EXCEPTION,
                                    f"The consumer group[{group}] has been created before, specify another name "
                                    "please.", False)
            self.consumers[group] = consumer

    def unregister_producer(self, group: str) -> None:
        with self._lock:
            self.producers.pop(group, None)
        self._unregister_client(group, None)

    def unregister_consumer(self, group: str) -> None:
        with self._lock:
            self.consumers.pop(group, None)
        self._unregister_client(None, group)

    def _unregister_client(self, producer_group: str | None, consumer_group: str | None) -> None:
        for addr in self._all_broker_addrs():
            try:
                self.invoke(addr, protocol.unregister_client_request(self.client_id, producer_group, consumer_group))
            except MQClientError as exc:
                log.warning("unregister client %s from %s failed: %s", self.client_id, addr, exc)

    # ---- transport --------------------------------------------------------------------------

    def client_for(self, addr: str) -> RemotingClient:
        client = self._clients.get(addr)
        if client is None:
            with self._lock:
                client = self._clients.get(addr)
                if client is None:
                    if self._stopped:
                        raise MQClientError(ClientErrorCode.CLIENT_STATE_EXCEPTION, "client instance is shut down")
                    client = RemotingClient.from_addr(addr, self.config.request_timeout_s,
                                                      functools.partial(self._handle_request, addr=addr),
                                                      self.config.queued_writes)
                    self._clients[addr] = client
        return client

    def bytes_received(self) -> dict[str, int]:
        """Bytes read so far from each broker (or filter server) this instance talks to, by address."""
        return {addr: client.bytes_received for addr, client in list(self._clients.items())}

    def invoke(self, addr: str, cmd: RemotingCommand, timeout_s: float | None = None) -> RemotingCommand:
        try:
            return self.client_for(addr).invoke(cmd, timeout_s)
        except RemotingError as exc:
            raise MQClientError.from_remoting(exc) from exc

    def invoke_async(self, addr: str, cmd: RemotingCommand, callback: ResponseCallback,
                     timeout_s: float | None = None) -> None:
        try:
            self.client_for(addr).invoke_async(cmd, callback, timeout_s)
        except RemotingError as exc:
            raise MQClientError.from_remoting(exc) from exc

    def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        try:
            self.client_for(addr).invoke_oneway(cmd)
        except RemotingError as exc:
            raise MQClientError.from_remoting(exc) from exc

    def invoke_namesrv(self, cmd: RemotingCommand, timeout_s: float | None = None) -> RemotingCommand:
        """Try the current name server, then the others in turn (NettyRemotingClient.getAndCreateNameserverChannel)."""
        addrs = self._namesrv_addrs
        last: MQClientError | None = None
        # Read once: another thread failing over meanwhile moves the index, and re-reading it here would try the
        # same dead server twice and never the live one.
        start = self._namesrv_index
        for i in range(len(addrs)):
            index = (start + i) % len(addrs)
            try:
                response = self.invoke(addrs[index], cmd, timeout_s)
            except MQClientError as exc:
                last = exc
                continue
            self._namesrv_index = index
            return response
        assert last is not None
        raise last

    def _handle_request(self, cmd: RemotingCommand, addr: str = "") -> RemotingCommand | None:
        """ClientRemotingProcessor, on the connection's reader thread: NOTIFY_CONSUMER_IDS_CHANGED triggers a
        rebalance now; CHECK_TRANSACTION_STATE goes to the producer of the message's group (``addr``: the
        broker that asked, where the answer goes)."""
        if cmd.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
            log.info("receive broker's notification, the consumer group: %s changed, rebalance immediately",
                     cmd.ext_fields.get("consumerGroup"))
            self.rebalance_immediately()
            return None
        if cmd.code == RequestCode.CHECK_TRANSACTION_STATE:
            self._check_transaction_state(cmd, addr)
            return None
        if cmd.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
            self._reset_offset(cmd)
            return None
        return create_response(cmd, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported")

    def _check_transaction_state(self, cmd: RemotingCommand, addr: str) -> None:
        """ClientRemotingProcessor.checkTransactionState: decode the message, find its group's producer."""
        try:
            msg = decode_message(cmd.body)
        except RecordError as exc:
            log.warning("CHECK_TRANSACTION_STATE from %s with an undecodable message: %s", addr, exc)
            return
        group = msg.properties.get(mc.PROPERTY_PRODUCER_GROUP)
        producer = self.producers.get(group) if group else None
        check = getattr(producer, "check_transaction_state", None)
        if check is None:
            log.debug("checkTransactionState, pick producer by group[%s] failed", group)
            return
        check(addr, msg, dict(cmd.ext_fields))

    def _reset_offset(self, cmd: RemotingCommand) -> None:
        """ClientRemotingProcessor.resetOffset: the group's push consumer rewinds, on a thread of its own (it
        waits for consumption in flight; this runs on the connection's reader)."""
        topic = cmd.ext_fields.get("topic", "")
        group = cmd.ext_fields.get("group", "")
        log.info("invoke reset offset operation from broker. topic=%s, group=%s, timestamp=%s", topic, group,
                 cmd.ext_fields.get("timestamp"))
        try:
            table = reset_offset_body.decode(cmd.body) if cmd.body else {}
        except reset_offset_body.BodyError as exc:
            log.warning("[reset-offset] bad body from the broker: %s", exc)
            return
        consumer = self.consumers.get(group)
        reset = getattr(consumer, "reset_offset", None)
        if reset is None:
            log.info("[reset-offset] consumer dose not exist. group=%s", group)
            return
        offsets = {MessageQueue(t, b, q): o for (t, b, q), o in table.items() if t == topic}
        threading.Thread(target=reset, args=(topic, offsets), daemon=True, name=f"reset-offset-{group}").start()

    # ---- routes -----------------------------------------------------------------------------

    def fetch_route(self, topic: str) -> TopicRouteData | None:
        """GET_ROUTEINFO_BY_TOPIC; None when the name server has no route (TOPIC_NOT_EXIST)."""
        response = self.invoke_namesrv(protocol.route_request(topic))
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        if response.code != ResponseCode.SUCCESS:
            raise protocol.broker_error(response)
        try:
            return TopicRouteData.from_json(response.body)
        except ValueError as exc:
            raise MQBrokerError(ResponseCode.SYSTEM_ERROR, str(exc)) from None

    def update_topic_route(self, topic: str, default_topic: str | None = None, default_queue_nums: int = 4) -> bool:
        """updateTopicRouteInfoFromNameServer; with ``default_topic`` a missing topic borrows that topic's route
        capped at ``default_queue_nums`` queues (a producer's first send to a new topic). True if a route
        is now known. Transport errors propagate."""
        route = self.fetch_route(topic)
        if route is None and default_topic is not None:
            base = self.fetch_route(default_topic)
            route = base.with_queue_nums_capped(default_queue_nums) if base is not None else None
        if route is None:
            log.debug("no route for topic %s", topic)
            return False
        with self._lock:
            old = self.topic_routes.get(topic)
            changed = old is None or old.normalized() != route.normalized()
            if changed or (topic in self._wanted_publish and topic not in self.publish_infos):
                for bd in route.broker_datas:
                    self.broker_addrs[bd.broker_name] = dict(bd.broker_addrs)
                self.topic_routes[topic] = route
                if topic in self._wanted_publish:
                    self.publish_infos[topic] = publish_info_from_route(topic, route)
                self.subscribe_infos[topic] = subscribe_info_from_route(topic, route)
        return True

    def want_publish(self, topic: str) -> None:
        with self._lock:
            self._wanted_publish.add(topic)

    def _update_all_routes_task(self) -> None:
        with self._lock:
            topics = set(self._wanted_publish)
            for consumer in self.consumers.values():
                topics.update(s.topic for s in consumer.subscriptions())
        for topic in sorted(topics):
            try:
                self.update_topic_route(topic)
            except MQClientError as exc:
                log.warning("updateTopicRouteInfoFromNameServer %s failed: %s", topic, exc)

    def publish_info(self, topic: str) -> TopicPublishInfo | None:
        return self.publish_infos.get(topic)

    def subscribe_info(self, topic: str) -> set[MessageQueue] | None:
        return self.subscribe_infos.get(topic)

    def find_broker_addr_in_publish(self, broker_name: str) -> str | None:
        addrs = self.broker_addrs.get(broker_name)
        return addrs.get(MASTER_ID) if addrs else None

    def find_broker_in_subscribe(self, broker_name: str, broker_id: int = MASTER_ID,
                                 only_this_broker: bool = False) -> FindBrokerResult | None:
        """MQClientInstance.findBrokerAddressInSubscribe (4.9.8): the asked id; for a slave id, else the next id;
        else (unless only_this_broker) the broker's first address — Java's HashMap of small ids iterates
        them in order, so the master when it is in the route, else the lowest slave."""
        addrs = self.broker_addrs.get(broker_name)
        if not addrs:
            return None
        addr = addrs.get(broker_id)
        slave = broker_id != MASTER_ID
        if addr is None and slave:
            addr = addrs.get(broker_id + 1)
        if addr is None and not only_this_broker:
            first = min(addrs)
            addr, slave = addrs[first], first != MASTER_ID
        return None if addr is None else FindBrokerResult(addr, slave)

    def find_broker_addr_in_subscribe(self, broker_name: str, broker_id: int = MASTER_ID,
                                      only_this_broker: bool = False) -> str | None:
        found = self.find_broker_in_subscribe(broker_name, broker_id, only_this_broker)
        return None if found is None else found.broker_addr

    def broker_addr_for(self, mq: MessageQueue, topic_for_refresh: str | None = None) -> str:
        """The master of ``mq``'s broker, refreshing the route once if unknown; MQClientError if none."""
        addr = self.find_broker_addr_in_publish(mq.broker_name)
        if addr is None:
            self.update_topic_route(topic_for_refresh or mq.topic)
            addr = self.find_broker_addr_in_publish(mq.broker_name)
        if addr is None:
            raise MQClientError(ClientErrorCode.BROKER_NOT_EXIST_EXCEPTION,
                                f"The broker[{mq.broker_name}] not exist")
        return addr

    def find_broker_addr_by_topic(self, topic: str) -> str | None:
        """findBrokerAddrByTopic: some broker serving the topic (master preferred)."""
        route = self.topic_routes.get(topic)
        if route is None or not route.broker_datas:
            return None
        return random.choice(route.broker_datas).select_broker_addr()

    def find_consumer_id_list(self, topic: str, group: str) -> list[str]:
        addr = self.find_broker_addr_by_topic(topic)
        if addr is None:
            self.update_topic_route(topic)
            addr = self.find_broker_addr_by_topic(topic)
        if addr is None:
            return []
        return protocol.consumer_list_from_response(self.invoke(addr, protocol.consumer_list_request(group)), addr)

    def _all_broker_addrs(self) -> list[str]:
        with self._lock:
            return [addr for addrs in self.broker_addrs.values() for addr in addrs.values()]

    # ---- heartbeat --------------------------------------------------------------------------

    def _heartbeat_task(self) -> None:
        self.clean_offline_brokers()
        self.send_heartbeat_to_all_brokers()

    def clean_offline_brokers(self) -> None:
        """cleanOfflineBroker: forget addresses that no known route mentions (and close their clients)."""
        with self._lock:
            live = {a for r in self.topic_routes.values() for bd in r.broker_datas for a in bd.broker_addrs.values()}
            for name in list(self.broker_addrs):
                kept = {i: a for i, a in self.broker_addrs[name].items() if a in live}
                if kept:
                    self.broker_addrs[name] = kept
                else:
                    del self.broker_addrs[name]
            known = {a for addrs in self.broker_addrs.values() for a in addrs.values()}
            stale = [self._clients.pop(a) for a in list(self._clients) if a not in known
                     and a not in self._namesrv_addrs]
        for client in stale:
            client.close()

    def heartbeat_soon(self) -> None:
        """A heartbeat on the timer thread now, at most once a second: a broker that answers a pull with
        SUBSCRIPTION_NOT_EXIST has lost this client's registration (it restarted), and the regular heartbeat
        could be 30 s away. Not in RocketMQ 4.9.8, which waits for the next heartbeat."""
        now = time.monotonic()
        if now - self._heartbeat_nudged >= 1.0:
            self._heartbeat_nudged = now
            self.scheduler.schedule(0.0, self.send_heartbeat_to_all_brokers)

    def heartbeat_body(self) -> bytes:
        with self._lock:
            producers = sorted(self.producers)
            consumers = [c.consumer_data() for c in self.consumers.values()]
        return protocol.heartbeat_body(self.client_id, producers, consumers)

    def send_heartbeat_to_all_brokers(self) -> None:
        """sendHeartbeatToAllBroker: masters always, slaves only when there are consumers."""
        with self._heartbeat_lock:
            with self._lock:
                if not self.producers and not self.consumers:
                    return
                has_consumers = bool(self.consumers)
                targets = [a for addrs in self.broker_addrs.values() for i, a in addrs.items()
                           if i == MASTER_ID or has_consumers]
            body = self.heartbeat_body()
            for addr in targets:
                try:
                    response = self.invoke(addr, protocol.heartbeat_request(body))
                    if response.code != ResponseCode.SUCCESS:
                        log.warning("heartbeat to %s: %s", addr, protocol.broker_error(response, addr))
                except MQClientError as exc:
                    log.info("send heart beat to broker[%s] failed: %s", addr, exc)
            # sendHeartbeatToAllBrokerWithLock, 4.2.0: then uploadFilterClassSource
            self.upload_filter_class_source()

    # ---- filter servers (RocketMQ <= 4.2's class-filter mode) --------------------------------

    def upload_filter_class_source(self) -> None:
        """uploadFilterClassSource (4.2.0): every class-filter subscription's source to every filter server of
        its topic's brokers (a filter server ignores a source it already has: same CRC)."""
        with self._lock:
            consumers = list(self.consumers.items())
        for group, consumer in consumers:
            for sub in consumer.subscriptions():
                if sub.class_filter_mode and sub.filter_class_source is not None:
                    self._upload_filter_class(group, sub.topic, sub.filter_class_name,
                                              sub.filter_class_source.encode("utf-8"))

    def _upload_filter_class(self, group: str, topic: str, class_name: str, source: bytes) -> None:
        """uploadFilterClassToAllFilterServer (4.2.0)."""
        route = self.topic_routes.get(topic)
        servers = [s for ss in (route.filter_server_table.values() if route else ()) for s in ss]
        if not servers:
            log.warning("uploadFilterClassToAllFilterServer, but no filter server, group %s topic %s", group, topic)
            return
        for addr in servers:
            try:
                resp = self.invoke(addr, protocol.register_message_filter_class_request(group, topic, class_name,
                                                                                        source))
            except MQClientError as exc:
                log.warning("upload filter class to %s failed: %s", addr, exc)
                continue
            if resp.code != ResponseCode.SUCCESS:
                log.warning("filter server %s refused the filter of %s/%s: %s", addr, group, topic, resp.remark)

    def find_filter_server(self, topic: str, broker_addr: str) -> str | None:
        """computPullFromWhichFilterServer (PullAPIWrapper, 4.2.0): one of the broker's filter servers, at
        random; None when the route lists none."""
        route = self.topic_routes.get(topic)
        servers = route.filter_server_table.get(broker_addr) if route else None
        return random.choice(servers) if servers else None

    # ---- consumers --------------------------------------------------------------------------

    def rebalance_immediately(self) -> None:
        self._rebalance_wakeup.set()

    def _rebalance_loop(self) -> None:
        while not self._stopped:
            self._rebalance_wakeup.wait(self.config.rebalance_interval_s)
            self._rebalance_wakeup.clear()
            if self._stopped:
                return
            self.do_rebalance()

    def do_rebalance(self) -> None:
        with self._lock:
            consumers = list(self.consumers.values())
        for consumer in consumers:
            try:
                consumer.do_rebalance()
            except Exception:  # one consumer's failure must not skip the others
                log.exception("doRebalance of %s failed", consumer.group)

    def persist_all_offsets(self) -> None:
        with self._lock:
            consumers = list(self.consumers.values())
        for consumer in consumers:
            try:
                consumer.persist_consumer_offset()
            except Exception:  # one consumer's failure must not skip the others
                log.exception("persistConsumerOffset of %s failed", consumer.group)


# ---- MQClientManager ----------------------------------------------------------------------------

_instances: dict[str, MQClientInstance] = {}
_instances_lock = threading.Lock()


def get_instance(config: ClientConfig) -> MQClientInstance:
    """MQClientManager.getOrCreateMQClientInstance: one instance per client id."""
    client_id = config.client_id()
    with _instances_lock:
        instance = _instances.get(client_id)
        if instance is None or instance._stopped:
            instance = MQClientInstance(config)
            _instances[client_id] = instance
        return instance


def _manager_forget(instance: MQClientInstance) -> None:
    with _instances_lock:
        if _instances.get(instance.client_id) is instance:
            del _instances[instance.client_id]
