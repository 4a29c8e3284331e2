"""FiltersrvController (filtersrv/.../FiltersrvController.java and processor/DefaultRequestProcessor.java,
4.2.0): the filter server process its broker starts (broker/filter_server_manager.py).

It listens on loopback (an ephemeral port, as 4.2.0's filter server does), registers with its broker by
REGISTER_FILTER_SERVER (301) every ``register_interval_s`` (4.2.0: every 10 s), and answers:

- REGISTER_MESSAGE_FILTER_CLASS (302): a consumer's filter (filter_class_manager.py);
- PULL_MESSAGE: the same pull forwarded to the broker (group FILTERSRV_CONSUMER, subscription ``*``, long
  polling as the consumer asked: 4.2.0's pullBlockIfNotFound), then only the records the group's ``match``
  accepts, byte for byte as the broker sent them, with the broker's offsets. As in 4.2.0: records found but
  none matching → PULL_RETRY_IMMEDIATELY with nextBeginOffset past them (the consumer goes on from there); a
  filter that fails → SYSTEM_ERROR with the reason; no filter registered → SYSTEM_ERROR "Find Filter class
  failed, not registered". suggestWhichBrokerId is always the master (0).

The uploaded code itself runs in sandboxed workers (sandbox.py); this process only parses their answers.
It ends with its broker: PR_SET_PDEATHSIG, and a watch on its parent's PID as a second line.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from typing import Final

from reference_broker.common.record import RecordError, decode_message
from reference_broker.filtersrv.filter_class_manager import FilterClassError, FilterClassManager
from reference_broker.filtersrv.filter_worker import Outcome, SandboxLimits
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import RemotingCommand, create_request, create_response
from reference_broker.remoting.errors import RemotingError
from reference_broker.remoting.headers import PULL_FLAG_SUBSCRIPTION, PULL_FLAG_SUSPEND, BadRequest, int_field
from reference_broker.remoting.headers import field as header_field
from reference_broker.remoting.server import ConnectionContext, RemotingServer

log = logging.getLogger(__name__)

FILTERSRV_CONSUMER_GROUP: Final = "FILTERSRV_CONSUMER"  # MixAll.FILTERSRV_CONSUMER_GROUP
REGISTER_INTERVAL_S: Final = 10.0  # FiltersrvController: registerFilterServerToBroker every 10 s
BROKER_SUSPEND_MAX_MS: Final = 20_000  # DefaultMQPullConsumer.brokerSuspendMaxTimeMillis
PARENT_WATCH_S: Final = 1.0
PR_SET_PDEATHSIG: Final = 1

Message = tuple[str, "str | None", str, bytes, "dict[str, str]"]


def die_with_parent(parent_pid: int) -> None:
    """SIGTERM when the parent (the broker) dies, whatever way; exit at once if it already has."""
    import ctypes
    import ctypes.util

    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if parent_pid and os.getppid() != parent_pid:
        os._exit(1)


class FiltersrvController:
    def __init__(self, broker_addr: str, host: str = "127.0.0.1", port: int = 0,
                 limits: SandboxLimits | None = None, register_interval_s: float = REGISTER_INTERVAL_S,
                 parent_pid: int = 0) -> None:
        self.broker_addr = broker_addr
        self.host = host
        self.requested_port = port
        self.register_interval_s = register_interval_s
        self.parent_pid = parent_pid
        self.server = RemotingServer()
        self.classes = FilterClassManager(limits or SandboxLimits())
        # Registrations (a worker start each) and the broker registration; a filter's batches run on its own
        # thread (FilterClassInfo.executor).
        self.executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="filtersrv")
        # Its own thread: uploads that take their whole start timeout must not delay it past the broker's expiry.
        self.register_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="filtersrv-register")
        self.broker = RemotingClient.from_addr(broker_addr, timeout_s=3.0)
        self.broker_name = ""
        self._tasks: list[asyncio.Task[None]] = []
        self.stopped = asyncio.Event()

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.server.port}"

    async def start(self) -> None:
        self.server.register(RequestCode.REGISTER_MESSAGE_FILTER_CLASS, self._register_class)
        self.server.register(RequestCode.PULL_MESSAGE, self._pull)
        await self.server.start(self.host, self.requested_port)
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._register_loop()))
        if self.parent_pid:
            self._tasks.append(loop.create_task(self._watch_parent()))

    async def shutdown(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.server.stop_listening()
        await self.server.stop()
        self.broker.close()
        self.classes.shutdown()
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.register_executor.shutdown(wait=False, cancel_futures=True)

    # ---- registration with the broker ---------------------------------------------------------------
    def register_once(self) -> bool:
        try:
            resp = self.broker.invoke(create_request(RequestCode.REGISTER_FILTER_SERVER,
                                                     {"filterServerAddr": self.addr}))
        except RemotingError as exc:
            log.warning("register to broker %s failed: %s", self.broker_addr, exc)
            return False
        if resp.code != ResponseCode.SUCCESS:
            log.warning("register to broker %s refused: %d %s", self.broker_addr, resp.code, resp.remark)
            return False
        self.broker_name = resp.ext_fields.get("brokerName", self.broker_name)
        return True

    async def _register_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await loop.run_in_executor(self.register_executor, self.register_once)
            await asyncio.sleep(self.register_interval_s)

    async def _watch_parent(self) -> None:
        while True:
            await asyncio.sleep(PARENT_WATCH_S)
            if os.getppid() != self.parent_pid:
                log.warning("the broker (pid %d) is gone: stopping", self.parent_pid)
                self.stopped.set()
                return

    # ---- REGISTER_MESSAGE_FILTER_CLASS -------------------------------------------------------------
    def _register_class(self, ctx: ConnectionContext, cmd: RemotingCommand) -> Awaitable[RemotingCommand]:
        return self._register_class_async(cmd)

    async def _register_class_async(self, cmd: RemotingCommand) -> RemotingCommand:
        try:
            group = header_field(cmd, "consumerGroup")
            topic = header_field(cmd, "topic")
            class_name = header_field(cmd, "className")
            class_crc = int_field(cmd, "classCRC")
        except BadRequest as exc:
            return create_response(cmd, ResponseCode.SYSTEM_ERROR, str(exc))
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self.executor, self.classes.register, group, topic, class_name,
                                       class_crc, cmd.body)
        except FilterClassError as exc:
            log.warning("filter class of %s/%s refused: %s", group, topic, exc)
            return create_response(cmd, ResponseCode.SYSTEM_ERROR, f"registerFilterClass error: {exc}")
        return create_response(cmd, ResponseCode.SUCCESS)

    # ---- PULL_MESSAGE --------------------------------------------------------------------------------
    def _pull(self, ctx: ConnectionContext, cmd: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand]:
        try:
            group = header_field(cmd, "consumerGroup")
            topic = header_field(cmd, "topic")
            queue_id = int_field(cmd, "queueId")
            offset = int_field(cmd, "queueOffset")
            max_nums = int_field(cmd, "maxMsgNums")
            suspend_ms = int_field(cmd, "suspendTimeoutMillis", 0)
        except BadRequest as exc:
            return create_response(cmd, ResponseCode.SYSTEM_ERROR, str(exc))
        info = self.classes.find(group, topic)
        if info is None:
            return create_response(cmd, ResponseCode.SYSTEM_ERROR, "Find Filter class failed, not registered")
        return self._pull_forward(cmd, group, topic, queue_id, offset, max_nums, suspend_ms)

    async def _pull_forward(self, cmd: RemotingCommand, group: str, topic: str, queue_id: int, offset: int,
                            max_nums: int, suspend_ms: int) -> RemotingCommand:
        suspend_ms = max(0, min(suspend_ms, BROKER_SUSPEND_MAX_MS))
        fwd = create_request(RequestCode.PULL_MESSAGE, {
            "consumerGroup": FILTERSRV_CONSUMER_GROUP, "topic": topic, "queueId": str(queue_id),
            "queueOffset": str(offset), "maxMsgNums": str(max_nums),
            "sysFlag": str(PULL_FLAG_SUSPEND | PULL_FLAG_SUBSCRIPTION), "commitOffset": "0",
            "suspendTimeoutMillis": str(suspend_ms), "subscription": "*", "subVersion": "0",
            "expressionType": "TAG"})
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[RemotingCommand] = loop.create_future()

        def done(resp: RemotingCommand | None, error: RemotingError | None) -> None:
            def settle() -> None:
                if fut.done():
                    return
                if resp is not None:
                    fut.set_result(resp)
                else:
                    fut.set_exception(error or RemotingError("no response"))
            loop.call_soon_threadsafe(settle)

        try:
            self.broker.invoke_async(fwd, done, suspend_ms / 1000 + 5.0)
            resp = await fut
        except (RemotingError, ValueError) as exc:
            return create_response(cmd, ResponseCode.SYSTEM_ERROR, f"Pull Callback Exception, {exc}")
        ext: dict[str, str] = {k: resp.ext_fields[k] for k in ("nextBeginOffset", "minOffset", "maxOffset")
                               if k in resp.ext_fields}
        ext["suggestWhichBrokerId"] = "0"
        if resp.code != ResponseCode.SUCCESS:
            return create_response(cmd, resp.code, resp.remark, ext)
        info = self.classes.find(group, topic)  # replaced or gone while the pull was held
        if info is None:
            return create_response(cmd, ResponseCode.SYSTEM_ERROR, "Find Filter class failed, not registered")
        try:
            records, messages = split_records(resp.body)
        except RecordError as exc:
            return create_response(cmd, ResponseCode.SYSTEM_ERROR, f"the broker's records do not decode: {exc}")
        try:
            verdicts = await loop.run_in_executor(info.executor, info.worker.match, messages)
        except RuntimeError:  # the filter was replaced meanwhile (its executor shut down): the pull is retried
            return create_response(cmd, ResponseCode.SYSTEM_ERROR, "the filter class was replaced, pull again")
        if verdicts.outcome is not Outcome.OK:
            log.warning("filter of %s/%s: %s", group, topic, verdicts.error)
            return create_response(cmd, ResponseCode.SYSTEM_ERROR,
                                   f"do Message Filter Exception, ConsumerGroup: {group} Topic: {topic} "
                                   f"{verdicts.error}", ext)
        body = b"".join(r for r, ok in zip(records, verdicts.matched, strict=True) if ok)
        if not body:
            return create_response(cmd, ResponseCode.PULL_RETRY_IMMEDIATELY, None, ext)
        return create_response(cmd, ResponseCode.SUCCESS, None, ext, body)


def split_records(body: bytes) -> tuple[list[bytes], list[Message]]:
    """A pull body's records (each as the broker sent it) and what ``match`` sees of each."""
    records: list[bytes] = []
    messages: list[Message] = []
    pos = 0
    while pos < len(body):
        m = decode_message(body, pos)
        if m.store_size <= 0:
            raise RecordError("a record of size 0")
        records.append(body[pos:pos + m.store_size])
        messages.append((m.topic, m.tags, m.keys, m.body, m.properties))
        pos += m.store_size
    return records, messages
