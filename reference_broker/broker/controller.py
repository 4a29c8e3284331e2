"""This module owns the broker's assembly and life cycle (broker/.../BrokerController.java, 4.9.8): the store,
the configuration managers, the client registries, the processors on one remoting server, long polling,
delay levels, name-server registration and the periodic tasks.

Everything that changes the managers' tables runs on the broker's one event loop; the store's own threads
(flush, dispatch, cleaning) stay inside the store, blocking calls (name-server registration) go to the
loop's executor, and each config file is encoded and written by its manager's writer thread, once per burst
of changes (config_persister.py), never inline on the loop. Shutdown follows BrokerController.shutdown:
stop accepting (no new connection, and no new request on an open one), answer held pulls, close the
connections, stop delay delivery, unregister, stop the config writers and persist offsets and configs, then
shut the store down (which removes ``abort``).

``start(listen=False)`` assembles the same broker without a socket: no listener and no name-server traffic.
Processor unit tests use it and call the handlers directly.
"""

from __future__ import annotations

import asyncio
import datetime
import enum
import gc
import logging
import threading
import time
from collections.abc import Coroutine, Sequence
from typing import Any

from reference_broker import __version__
from reference_broker.broker.admin_processor import CODES as ADMIN_CODES
from reference_broker.broker.admin_processor import AdminProcessor
from reference_broker.broker.broker_config import BROKER_KEYS, BrokerConfig
from reference_broker.broker.broker_stats import DAY_S, BrokerStats, seconds_until_next_morning
from reference_broker.broker.client_manager import ConsumerManager, ProducerManager, RebalanceLockManager
from reference_broker.broker.client_processor import ClientManageProcessor
from reference_broker.broker.consumer_filter import ConsumerFilterManager, bit_map_calculator
from reference_broker.broker.consumer_offset_manager import ConsumerOffsetManager
from reference_broker.broker.end_transaction import EndTransactionProcessor
from reference_broker.broker.filter_server_manager import (
    SUPERVISE_INTERVAL_S,
    FilterServerManager,
    FilterServerRefused,
)
from reference_broker.broker.outer_api import BrokerOuterAPI
from reference_broker.broker.pull_hold import CHECK_INTERVAL_LONG_S, CHECK_INTERVAL_SHORT_S, PullRequestHoldService
from reference_broker.broker.pull_processor import PullMessageProcessor
from reference_broker.broker.reset_offset import ResetOffsetProcessor
from reference_broker.broker.schedule_message import ScheduleMessageService
from reference_broker.broker.send_processor import SendMessageProcessor
from reference_broker.broker.slave_synchronize import SYNC_INITIAL_DELAY_S, SYNC_PERIOD_S, SlaveSynchronizer
from reference_broker.broker.subscription_group import SubscriptionGroupManager
from reference_broker.broker.topic_config import TopicConfigManager
from reference_broker.broker.transaction_check import TransactionalMessageCheckService
from reference_broker.common import compiled
from reference_broker.common import transaction as tx
from reference_broker.common.dispatch import DispatchRequest
from reference_broker.filter.bloom import BloomFilter
from reference_broker.ha import HAClient, HAService, attach_ha
from reference_broker.remoting.codes import FLAG_ONEWAY, RequestCode, ResponseCode
from reference_broker.remoting.command import RemotingCommand, create_request, create_response
from reference_broker.remoting.server import ConnectionContext, Handler, RemotingServer
from reference_broker.store.clean import disk_partition_space_used_percent
from reference_broker.store.config import ROCKETMQ_KEYS, BrokerRole, MessageStoreConfig
from reference_broker.store.message_store import MessageStore
from reference_broker.store.quarantine import QuarantineError

log = logging.getLogger(__name__)

SCAN_NOT_ACTIVE_CHANNEL_S = 10.0  # ClientHousekeepingService: every 10 s
PROGRESS_WAIT_S = 5.0  # how long the transaction check waits for its progress to reach consumerOffset.json


class BrokerStartError(RuntimeError):
    pass


def _not_served(ctx: ConnectionContext, cmd: RemotingCommand) -> None:
    """The handler of every code once shutdown has begun: no answer (the connection closes soon after)."""
    return None


class BrokerController:
    def __init__(self, broker_config: BrokerConfig, store_config: MessageStoreConfig, host: str = "0.0.0.0") -> None:
        if broker_config.listen_port <= 0:
            raise BrokerStartError("listenPort must be a fixed port (it is part of every offsetMsgId)")
        store_config.store_host = (broker_config.broker_ip1, broker_config.listen_port)
        self.broker_config = broker_config
        self.message_store_config = store_config
        self.host = host
        root = store_config.store_path_root_dir
        self.store = MessageStore(store_config)
        self.topic_config_manager = TopicConfigManager(root, broker_config)
        self.consumer_offset_manager = ConsumerOffsetManager(root)
        self.subscription_group_manager = SubscriptionGroupManager(root, broker_config)
        self.schedule_service: ScheduleMessageService | None = None
        # consumerFilter.json and the SQL92 filters' bloom filter (4.9.8 BrokerController: ConsumerFilterManager)
        bloom = BloomFilter(broker_config.max_error_rate_of_bloom_filter, broker_config.expect_consumer_num_use_filter)
        self.consumer_filter_manager = ConsumerFilterManager(root, bloom, broker_config.filter_data_clean_time_span_ms)
        self.consumer_manager = ConsumerManager(filters=self.consumer_filter_manager)
        store_config.bit_map_length_consume_queue_ext = bloom.m  # as 4.9.8's ConsumerFilterManager sets it
        if broker_config.enable_calc_filter_bit_map:
            # CommitLogDispatcherCalcBitMap: the bit maps go to the consume queue's extension (when enabled)
            self.store.dispatcher.bit_map_calc = bit_map_calculator(self.consumer_filter_manager)
        self.producer_manager = ProducerManager()
        self.lock_manager = RebalanceLockManager()
        self.hold_service: PullRequestHoldService | None = None
        # A slave copies its master's metadata (SlaveSynchronize) and remembers the offsets clients commit to it.
        self.slave_sync: SlaveSynchronizer | None = None
        if store_config.broker_role is BrokerRole.SLAVE:
            self.consumer_offset_manager.track_slave_commits = True
            self.slave_sync = SlaveSynchronizer(self.broker_addr, self.topic_config_manager,
                                                self.subscription_group_manager, self.consumer_offset_manager,
                                                self._replace_delay_offsets)
        # Replication, attached when the broker listens: a master's HAService, a slave's HAClient.
        self.ha: HAService | HAClient | None = None
        self.server = RemotingServer()
        self.outer_api = BrokerOuterAPI()
        self.broker_stats = BrokerStats(lambda: self.store.put_message_count,
                                        lambda: self.store.reads.transferred_msg_count)
        self.client_processor = ClientManageProcessor(
            self.store, self.topic_config_manager, self.subscription_group_manager, self.consumer_offset_manager,
            self.consumer_manager, self.producer_manager, self.lock_manager, self.spawn, broker_config)
        self.send_processor = SendMessageProcessor(self.store, self.topic_config_manager,
                                                   self.subscription_group_manager, broker_config,
                                                   self.server.pending_requests)
        self.pull_processor = PullMessageProcessor(self.store, self.topic_config_manager,
                                                   self.subscription_group_manager, self.consumer_manager,
                                                   self.consumer_offset_manager, broker_config,
                                                   lambda: self.hold_service)
        self.end_transaction_processor = EndTransactionProcessor(self.store)
        self.transaction_check: TransactionalMessageCheckService | None = None
        self.reset_offset_processor = ResetOffsetProcessor(
            self.store, self.topic_config_manager, self.consumer_offset_manager, self.consumer_manager, broker_config,
            self.spawn)
        self.admin_processor = AdminProcessor(
            self.store, self.topic_config_manager, self.subscription_group_manager, self.consumer_offset_manager,
            broker_config, config_properties=self.config_properties, runtime_info=self.runtime_info,
            delay_offsets=self._delay_offsets)
        # The filter servers (4.2.0's FilterServer): processes only when filterServerNums > 0.
        self.filter_server_manager = FilterServerManager(
            broker_config.filter_server_nums,
            f"{host if host not in ('', '0.0.0.0') else '127.0.0.1'}:{broker_config.listen_port}",
            store_config.store_path_root_dir / "logs", self.register_to_namesrv_soon,
            ["--hide-path", str(store_config.store_path_root_dir.resolve())])
        self.loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._periodic: list[asyncio.Task[None]] = []
        self.boot_timestamp_ms = 0
        self.registered = False
        self.listening = False  # set by start(): False when started with listen=False
        self._codes: list[int] = []  # request codes registered on the server
        self._register_pending = False
        self._register_again = False
        self._stopped = False

    @property
    def broker_addr(self) -> str:
        return f"{self.broker_config.broker_ip1}:{self.broker_config.listen_port}"

    # ---- life cycle -----------------------------------------------------------------------------------
    def initialize(self) -> None:
        """Load configs and the store (BrokerController.initialize); BrokerStartError when unusable."""
        for manager in (self.topic_config_manager, self.consumer_offset_manager, self.subscription_group_manager):
            if not manager.load():
                raise BrokerStartError(f"cannot load {manager.config_file_path()}; see the log")
        # Before the store (as 4.9.8's initialize): recovery's re-dispatch computes bit maps with these filters.
        # A consumerFilter.json that cannot be read is logged and the table starts empty (consumer_filter.py).
        self.consumer_filter_manager.load_or_empty()
        try:
            loaded = self.store.load()
        except QuarantineError as e:  # recovery would have cut bytes it could not copy aside first
            raise BrokerStartError(str(e)) from e
        if not loaded:
            raise BrokerStartError("the message store failed to load; see the log")
        sched = ScheduleMessageService(self.store, self.message_store_config.store_path_root_dir)
        if not sched.load():
            raise BrokerStartError("cannot load config/delayOffset.json (nor its .bak); see the log")
        self.schedule_service = sched

    async def start(self, listen: bool = True) -> None:
        """Start the store and the services, then listen. With ``listen=False`` nothing listens and the
        broker neither registers with nor unregisters from name servers (processor unit tests)."""
        loop = self.loop = asyncio.get_running_loop()
        bc = self.broker_config
        self.listening = listen
        if listen:
            self.ha = attach_ha(self.store, loop)  # the store starts it once dispatch has caught up
        self.store.start()
        self.hold_service = PullRequestHoldService(
            loop, self.store.get_max_offset_in_queue,
            CHECK_INTERVAL_LONG_S if bc.long_polling_enable else CHECK_INTERVAL_SHORT_S,
            on_first_held=self.store.nudge_dispatch)
        # messageArrivingListener: live records only (the hold service starts after recovery).
        self.store.add_dispatch_hook(self._arriving, during_recovery=False)
        self.store.add_arrival_hook(self._queues_grew)
        self.store.add_dispatch_waiter(self.hold_service.any_held)
        self.hold_service.start()
        server = self.server
        routes: dict[int, Handler] = {}
        for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE,
                     RequestCode.CONSUMER_SEND_MSG_BACK):
            routes[code] = self.send_processor.handle
        routes[RequestCode.PULL_MESSAGE] = self.pull_processor.handle
        routes[RequestCode.END_TRANSACTION] = self.end_transaction_processor.handle
        for code in (RequestCode.HEART_BEAT, RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                     RequestCode.QUERY_CONSUMER_OFFSET, RequestCode.UPDATE_CONSUMER_OFFSET,
                     RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ, RequestCode.CHECK_CLIENT_CONFIG):
            routes[code] = self.client_processor.handle
        for code in ADMIN_CODES:
            routes[code] = self.admin_processor.handle
        routes[RequestCode.INVOKE_BROKER_TO_RESET_OFFSET] = self.reset_offset_processor.handle
        routes[RequestCode.REGISTER_FILTER_SERVER] = self._register_filter_server
        for route, handler in routes.items():
            server.register(route, handler)
        self._codes = list(routes)
        server.close_hooks.append(self.client_processor.on_channel_close)
        server.close_hooks.append(self.filter_server_manager.on_channel_close)
        self.topic_config_manager.on_change = self.register_to_namesrv_soon
        if listen:
            await server.start(self.host, bc.listen_port)
        # Delivery puts messages, which a slave refuses: only a master runs the delay timers and the transaction
        # check (BrokerController.startProcessorByHa).
        if self.schedule_service is not None and self.message_store_config.broker_role is not BrokerRole.SLAVE:
            self.schedule_service.start()
        if self.message_store_config.broker_role is not BrokerRole.SLAVE:
            self.transaction_check = TransactionalMessageCheckService(
                self.store, _CheckHooks(self), bc.transaction_check_interval_ms, bc.transaction_timeout_ms,
                bc.transaction_check_max)
            self.transaction_check.start()
        self.boot_timestamp_ms = time.time_ns() // 1_000_000
        if listen and bc.namesrv_addr:
            await loop.run_in_executor(None, self.register_all)
        if listen:
            self._every(bc.get_register_name_server_period_ms() / 1000, self._register_async)
        self._every(bc.flush_consumer_offset_interval_ms / 1000, self._persist_offsets)
        if listen and self.slave_sync is not None:
            self._every(SYNC_PERIOD_S, self.slave_sync.sync_all, first_after_s=SYNC_INITIAL_DELAY_S)
        self._every(SCAN_NOT_ACTIVE_CHANNEL_S, self._scan_channels)
        if listen and self.filter_server_manager.count > 0:
            # BrokerController.start: filterServerManager.start() (4.2.0), here supervised by PID.
            self.filter_server_manager.start()
            self._every(SUPERVISE_INTERVAL_S, self.filter_server_manager.supervise)
        # BrokerController.initialize: brokerStats.record() at each local midnight.
        self._every(DAY_S, self.broker_stats.record,
                    first_after_s=seconds_until_next_morning(datetime.datetime.now()))

    async def shutdown(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._stop_accepting()
        for task in self._periodic:
            task.cancel()
        if self.hold_service is not None:
            self.hold_service.shutdown()  # held pulls re-execute and answer on their open connections
            await asyncio.sleep(0.05)  # let those answers reach the sockets
        await self.server.stop()
        if self.filter_server_manager.count > 0:
            await asyncio.get_running_loop().run_in_executor(None, self.filter_server_manager.shutdown)
        pending = [t for t in (*self._periodic, *self._tasks) if not t.done()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if self.schedule_service is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.schedule_service.shutdown)
        if self.transaction_check is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.transaction_check.shutdown)
        if self.listening and self.broker_config.namesrv_addr:
            await asyncio.get_running_loop().run_in_executor(None, self.unregister_all)
        self.outer_api.close()
        self.store.remove_dispatch_hook(self._arriving)
        if self.hold_service is not None:
            self.store.remove_dispatch_waiter(self.hold_service.any_held)
        # Each manager's writer thread stops, then the final state is written here: a change requested just
        # before shutdown (a heartbeat's new groups) reaches the disk before the broker exits.
        for manager in (self.consumer_offset_manager, self.topic_config_manager, self.subscription_group_manager,
                        self.consumer_filter_manager):
            try:
                await asyncio.get_running_loop().run_in_executor(None, manager.shutdown_persist)
            except OSError:
                log.exception("cannot persist %s", manager.config_file_path())
        await asyncio.get_running_loop().run_in_executor(None, self.store.shutdown)
        log.info("broker %s shut down (normally: %s)", self.broker_addr, self.store.shutdown_normally)

    def _arriving(self, reqs: Sequence[DispatchRequest]) -> None:
        """Records dispatched (dispatch thread): held pulls on their queues may now be answered."""
        hold = self.hold_service
        if hold is not None:
            hold.arriving_run(reqs)

    def _queues_grew(self, grown: Sequence[tuple[str, int, int]]) -> None:
        """Queues grew (the dispatch process's link thread): held pulls on them may now be answered."""
        hold = self.hold_service
        if hold is not None:
            hold.arriving_queues(grown)

    def _stop_accepting(self) -> None:
        """The first step of shutdown: close the listener, and leave every request that arrives from now on
        unanswered (its connection is closed shortly after). Requests already running, such as held pulls,
        still answer on their open connections. (4.9.8 shuts the hold service down before the remoting
        server; 5.x stops the remoting servers first.)"""
        for code in self._codes:
            self.server.register(code, _not_served)
        self.server.stop_listening()

    # ---- periodic work ----------------------------------------------------------------------------------
    def _every(self, period_s: float, fn: Any, first_after_s: float | None = None) -> None:
        async def loop() -> None:
            await asyncio.sleep(period_s if first_after_s is None else first_after_s)
            while True:
                try:
                    result = fn()
                    if asyncio.iscoroutine(result):
                        await result
                except Exception:  # a periodic task's run: the next period runs anyway
                    log.exception("periodic task %s failed", getattr(fn, "__name__", fn))
                await asyncio.sleep(period_s)

        assert self.loop is not None
        self._periodic.append(self.loop.create_task(loop()))

    def _persist_offsets(self) -> None:
        self.consumer_offset_manager.persist_soon()  # encoded and written on its writer thread, not the loop
        # 4.9.8's persist timer also writes consumerFilter.json, dropping long-dead filters first (its encode
        # cleans); the clean runs here, on the loop that owns the table, not on the writer thread.
        self.consumer_filter_manager.clean(time.time_ns() // 1_000_000)
        self.consumer_filter_manager.persist_soon()

    def _scan_channels(self) -> None:
        self.client_processor.scan_not_active()
        self.filter_server_manager.scan_not_active()

    def _register_filter_server(self, ctx: ConnectionContext, cmd: RemotingCommand) -> RemotingCommand:
        """REGISTER_FILTER_SERVER (AdminBrokerProcessor.registerFilterServer, 4.2.0): remember the filter server
        by its connection; answer with this broker's id and name."""
        addr = cmd.ext_fields.get("filterServerAddr")
        if not addr:
            return create_response(cmd, ResponseCode.SYSTEM_ERROR, "the custom field <filterServerAddr> is null")
        try:
            self.filter_server_manager.register(ctx, addr)
        except FilterServerRefused as exc:
            return create_response(cmd, ResponseCode.SYSTEM_ERROR, str(exc))
        return create_response(cmd, ResponseCode.SUCCESS, None, {
            "brokerId": str(self.broker_config.broker_id), "brokerName": self.broker_config.broker_name})

    async def _register_async(self) -> None:
        assert self.loop is not None
        await self.loop.run_in_executor(None, self.register_all)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run a fire-and-forget coroutine on the broker's loop (keeps a reference until it ends)."""
        assert self.loop is not None
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def register_to_namesrv_soon(self) -> None:
        """Re-register after a topic change, coalescing a burst of changes into one registration.
        Safe from any thread."""
        loop = self.loop
        if loop is None or not self.listening or not self.broker_config.namesrv_addr:
            return
        if self._register_pending:
            self._register_again = True  # the registration under way may have read the table already
            return
        self._register_pending = True

        async def later() -> None:
            # One registration at a time, repeated while changes keep arriving: a heartbeat creating 1,000
            # retry topics costs a few registrations of the whole table, not one per topic.
            try:
                while True:
                    await asyncio.sleep(0.01)
                    self._register_again = False
                    await self._register_async()
                    if not self._register_again:
                        return
            finally:
                self._register_pending = False

        loop.call_soon_threadsafe(lambda: self.spawn(later()))

    def check_producer_transaction_state(self, group: str, header: dict[str, str], body: bytes) -> None:
        """Broker2Client.checkProducerTransactionState (on the loop): CHECK_TRANSACTION_STATE, oneway, to one
        live connection of the producer group (ProducerManager.getAvailableChannel)."""
        channel = self.producer_manager.available_channel(group, _is_live)
        if channel is None:
            log.warning("Check transaction failed, channel is null. groupId=%s", group)
            return
        req = create_request(RequestCode.CHECK_TRANSACTION_STATE, header, body)
        req.flag |= FLAG_ONEWAY
        self.spawn(channel.send(req))  # type: ignore[attr-defined]

    # ---- name server ------------------------------------------------------------------------------------
    def _namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in (self.broker_config.namesrv_addr or "").split(";") if a.strip()]

    def _register_header(self) -> dict[str, str]:
        bc = self.broker_config
        return {"brokerAddr": self.broker_addr, "brokerId": str(bc.broker_id), "brokerName": bc.broker_name,
                "clusterName": bc.broker_cluster_name,
                "haServerAddr": f"{bc.broker_ip1}:{self.message_store_config.ha_listen_port}",
                "compressed": "false"}

    def register_all(self) -> None:
        """registerBrokerAll: the topic table (with the broker's permission) to every name server."""
        tcm = self.topic_config_manager
        table = {}
        for name, tc in list(tcm.topic_config_table.items()):
            obj = tc.to_json()
            obj["perm"] = tc.perm & self.broker_config.broker_permission
            table[name] = obj
        reply = self.outer_api.register_broker_all(self._namesrv_addrs(), self._register_header(), table,
                                                   tcm.data_version.to_json(),
                                                   self.filter_server_manager.build_new_filter_server_list())
        self.registered = self.registered or reply.ok
        # A slave without haMasterAddress follows the master the name server names (BrokerController's
        # updateMasterHAServerAddrPeriodically).
        if (isinstance(self.ha, HAClient) and not self.message_store_config.ha_master_address
                and reply.ha_server_addr):
            self.ha.update_master_address(reply.ha_server_addr)
        # doRegisterBrokerAll: the synchronizer follows the reply's masterAddr, none when the master is gone.
        if self.slave_sync is not None and reply.ok:
            self.slave_sync.master_addr = reply.master_addr

    def unregister_all(self) -> None:
        self.outer_api.unregister_broker_all(self._namesrv_addrs(), self._register_header())

    def config_properties(self) -> str:
        """The broker's effective configuration as ``key=value`` lines under RocketMQ's key names."""
        lines = []
        for keys, obj in ((BROKER_KEYS, self.broker_config), (ROCKETMQ_KEYS, self.message_store_config)):
            for key, attr in sorted(keys.items()):
                value = getattr(obj, attr)
                if isinstance(value, bool):
                    text = str(value).lower()
                elif isinstance(value, enum.Enum):
                    text = value.name
                else:
                    text = "" if value is None else str(value)
                lines.append(f"{key}={text}")
        return "\n".join(lines) + "\n"

    def _replace_delay_offsets(self, table: dict[int, int]) -> None:
        if self.schedule_service is not None:
            self.schedule_service.replace_offsets(table)

    def _delay_offsets(self) -> dict[int, int]:
        """The delay levels' delivered offsets (empty before the schedule service is loaded)."""
        return {} if self.schedule_service is None else self.schedule_service.offset_table

    # ---- runtime info ------------------------------------------------------------------------------------
    def runtime_info(self) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO's table: RocketMQ's keys where they exist, plus this lab's."""
        info = dict(self.store.get_runtime_info())
        root = self.message_store_config.store_path_root_dir
        info.update({
            "brokerVersionDesc": f"reference_broker {__version__}",
            "bootTimestamp": str(self.boot_timestamp_ms),
            "commitLogDiskRatio": f"{disk_partition_space_used_percent(root / 'commitlog'):.4f}",
            "heldPullRequests": str(self.hold_service.held_count() if self.hold_service else 0),
            "flushDiskType": self.message_store_config.flush_disk_type.name,
            "brokerRole": self.message_store_config.broker_role.name,
            # This lab's: whether the put path's hot functions run compiled or pure (common/compiled.py).
            "putPathImpl": " ".join(f"{k}={v}" for k, v in compiled.runtime_info().items()),
            # This lab's: the interpreter's cyclic garbage collector since boot, every generation summed — how
            # often it ran and how many unreachable objects it found. Reference counting frees everything the
            # put path makes; a count that grows with the sends is a reference cycle per message (BENCHMARKS.md).
            **_gc_counts(),
        })
        info.update(self.broker_stats.runtime_info())
        if self.ha is not None:
            info.update(self.ha.runtime_info())
        return info


def _gc_counts() -> dict[str, str]:
    stats = gc.get_stats()
    return {"gcCollections": str(sum(g["collections"] for g in stats)),
            "gcCollected": str(sum(g["collected"] for g in stats))}


def _is_live(channel: object) -> bool:
    return not getattr(channel, "closed", True)


class _CheckHooks:
    """The transaction check service's view of the broker (transaction_check.CheckHooks). Called on the
    service's thread: whatever changes the broker's tables is handed to the loop."""

    def __init__(self, controller: BrokerController) -> None:
        self.controller = controller

    def _on_loop(self, fn: Any, *args: Any) -> None:
        loop = self.controller.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(fn, *args)

    def query_offset(self, topic: str, queue_id: int) -> int:
        return self.controller.consumer_offset_manager.query_offset(tx.CID_RMQ_SYS_TRANS, topic, queue_id)

    def save_progress(self, offsets: list[tuple[str, int, int]]) -> None:
        offsets_manager = self.controller.consumer_offset_manager
        applied = threading.Event()
        generation = [0]

        def apply() -> None:
            for topic, queue_id, offset in offsets:
                offsets_manager.commit_offset(self.controller.broker_addr, tx.CID_RMQ_SYS_TRANS, topic, queue_id,
                                              offset)
            generation[0] = offsets_manager.persist_soon()
            applied.set()

        self._on_loop(apply)
        if not (applied.wait(PROGRESS_WAIT_S)
                and offsets_manager.persister.wait_written(generation[0], PROGRESS_WAIT_S)):
            log.warning("the transaction check's progress is not on disk yet; its checks go out anyway")

    def check_producer(self, group: str, header: dict[str, str], body: bytes) -> None:
        self._on_loop(self.controller.check_producer_transaction_state, group, header, body)

    def half_queue_ids(self) -> list[int]:
        """The half topic's queues that exist in the store. (4.9.8 reads the topic table, adding the half topic
        to it with one queue when absent; here the topic table is left as the operator made it.)"""
        # a C-level copy: the dispatch thread may be adding a queue meanwhile
        return sorted(self.controller.store.consume_queue_table.get(tx.HALF_TOPIC, {}).copy())
