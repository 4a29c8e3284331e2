"""BrokerConfig and the ``broker.conf`` reader (common/.../BrokerConfig.java, 4.9.8 defaults).

``load_broker_conf`` reads RocketMQ's Java-properties ``key=value`` file. Broker keys land in
``BrokerConfig`` (``BROKER_KEYS``), store keys in ``MessageStoreConfig`` (store ``ROCKETMQ_KEYS``).
Unlike MixAll.properties2Object, which silently ignores unknown keys and reads any
non-"true" boolean as false, an unknown key or a bad value is an error naming the file,
the line, the key and the reason: a typo in broker.conf should stop the broker, not be
silently replaced by a default. A value of the right type must also mean something: each
key's range or format is in ``CONF_CHECKS`` (below ``BROKER_KEYS``), applied by
``parse_conf_value`` to every value wherever it comes from (the file, a command line).
"""

from __future__ import annotations

import ipaddress
import os
import platform
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Final

from reference_broker.broker.delay_level import parse_delay_levels
from reference_broker.common.names import validate_topic
from reference_broker.common.perm import PERM_READ, PERM_WRITE
from reference_broker.store.config import ROCKETMQ_KEYS, BrokerRole, MessageStoreConfig, coerce_value


def _local_host_name() -> str:
    # BrokerConfig.localHostName(); "DEFAULT_BROKER" when the host name is unknown.
    return platform.node() or "DEFAULT_BROKER"


@dataclass
class BrokerConfig:
    broker_cluster_name: str = "DefaultCluster"  # brokerClusterName
    broker_name: str = field(default_factory=_local_host_name)  # brokerName
    broker_id: int = 0  # brokerId (MixAll.MASTER_ID)
    listen_port: int = 10911  # listenPort (NettyServerConfig)
    namesrv_addr: str | None = field(default_factory=lambda: os.environ.get("NAMESRV_ADDR"))  # namesrvAddr
    # RocketMQ defaults brokerIP1 to the first non-loopback address; no socket lookups here.
    broker_ip1: str = "127.0.0.1"  # brokerIP1
    broker_permission: int = PERM_READ | PERM_WRITE  # brokerPermission
    default_topic_queue_nums: int = 8  # defaultTopicQueueNums (auto-created topics, TBW102)
    auto_create_topic_enable: bool = True  # autoCreateTopicEnable
    cluster_topic_enable: bool = True  # clusterTopicEnable
    broker_topic_enable: bool = True  # brokerTopicEnable
    auto_create_subscription_group: bool = True  # autoCreateSubscriptionGroup
    trace_topic_enable: bool = False  # traceTopicEnable
    msg_trace_topic_name: str = "RMQ_SYS_TRACE_TOPIC"  # msgTraceTopicName
    register_name_server_period_ms: int = 30_000  # registerNameServerPeriod (getter clamps)
    flush_consumer_offset_interval_ms: int = 5000  # flushConsumerOffsetInterval
    send_message_thread_pool_nums: int = 1  # sendMessageThreadPoolNums (1 in 4.9.x)
    send_thread_pool_queue_capacity: int = 10_000  # sendThreadPoolQueueCapacity
    pull_thread_pool_queue_capacity: int = 100_000  # pullThreadPoolQueueCapacity
    wait_time_mills_in_send_queue: int = 200  # waitTimeMillsInSendQueue
    wait_time_mills_in_pull_queue: int = 5000  # waitTimeMillsInPullQueue
    wait_time_mills_in_heartbeat_queue: int = 31_000  # waitTimeMillsInHeartbeatQueue
    wait_time_mills_in_transaction_queue: int = 3000  # waitTimeMillsInTransactionQueue
    long_polling_enable: bool = True  # longPollingEnable
    short_polling_time_mills: int = 1000  # shortPollingTimeMills
    broker_fast_failure_enable: bool = True  # brokerFastFailureEnable
    slave_read_enable: bool = False  # slaveReadEnable
    offset_check_in_slave: bool = False  # offsetCheckInSlave
    reject_transaction_message: bool = False  # rejectTransactionMessage
    transaction_timeout_ms: int = 6000  # transactionTimeOut
    transaction_check_max: int = 15  # transactionCheckMax
    transaction_check_interval_ms: int = 60_000  # transactionCheckInterval
    filter_server_nums: int = 0  # filterServerNums
    region_id: str = "DefaultRegion"  # regionId (MixAll.DEFAULT_TRACE_REGION_ID): every send answer's MSG_REGION
    trace_on: bool = True  # traceOn: every send answer's TRACE_ON
    enable_property_filter: bool = False  # enablePropertyFilter
    # The SQL92 filters' bloom filter and the consume queue's filter bits (consumer_filter.py, filter/bloom.py).
    enable_calc_filter_bit_map: bool = False  # enableCalcFilterBitMap
    expect_consumer_num_use_filter: int = 32  # expectConsumerNumUseFilter (the bloom filter's n)
    max_error_rate_of_bloom_filter: int = 20  # maxErrorRateOfBloomFilter (the bloom filter's f, in %)
    filter_data_clean_time_span_ms: int = 24 * 3600 * 1000  # filterDataCleanTimeSpan: dead filters kept this long

    def get_register_name_server_period_ms(self) -> int:
        """BrokerConfig.getRegisterNameServerPeriod: clamped to [10 s, 60 s]."""
        return max(10_000, min(60_000, self.register_name_server_period_ms))


# broker.conf key → BrokerConfig field.
BROKER_KEYS: dict[str, str] = {
    "brokerClusterName": "broker_cluster_name",
    "brokerName": "broker_name",
    "brokerId": "broker_id",
    "listenPort": "listen_port",
    "namesrvAddr": "namesrv_addr",
    "brokerIP1": "broker_ip1",
    "brokerPermission": "broker_permission",
    "defaultTopicQueueNums": "default_topic_queue_nums",
    "autoCreateTopicEnable": "auto_create_topic_enable",
    "clusterTopicEnable": "cluster_topic_enable",
    "brokerTopicEnable": "broker_topic_enable",
    "autoCreateSubscriptionGroup": "auto_create_subscription_group",
    "traceTopicEnable": "trace_topic_enable",
    "msgTraceTopicName": "msg_trace_topic_name",
    "registerNameServerPeriod": "register_name_server_period_ms",
    "flushConsumerOffsetInterval": "flush_consumer_offset_interval_ms",
    "sendMessageThreadPoolNums": "send_message_thread_pool_nums",
    "sendThreadPoolQueueCapacity": "send_thread_pool_queue_capacity",
    "pullThreadPoolQueueCapacity": "pull_thread_pool_queue_capacity",
    "waitTimeMillsInSendQueue": "wait_time_mills_in_send_queue",
    "waitTimeMillsInPullQueue": "wait_time_mills_in_pull_queue",
    "waitTimeMillsInHeartbeatQueue": "wait_time_mills_in_heartbeat_queue",
    "waitTimeMillsInTransactionQueue": "wait_time_mills_in_transaction_queue",
    "longPollingEnable": "long_polling_enable",
    "shortPollingTimeMills": "short_polling_time_mills",
    "brokerFastFailureEnable": "broker_fast_failure_enable",
    "slaveReadEnable": "slave_read_enable",
    "offsetCheckInSlave": "offset_check_in_slave",
    "rejectTransactionMessage": "reject_transaction_message",
    "transactionTimeOut": "transaction_timeout_ms",
    "transactionCheckMax": "transaction_check_max",
    "transactionCheckInterval": "transaction_check_interval_ms",
    "filterServerNums": "filter_server_nums",
    "regionId": "region_id",
    "traceOn": "trace_on",
    "enablePropertyFilter": "enable_property_filter",
    "enableCalcFilterBitMap": "enable_calc_filter_bit_map",
    "expectConsumerNumUseFilter": "expect_consumer_num_use_filter",
    "maxErrorRateOfBloomFilter": "max_error_rate_of_bloom_filter",
    "filterDataCleanTimeSpan": "filter_data_clean_time_span_ms",
}

JAVA_INT_MAX: Final = 2**31 - 1  # int fields of BrokerConfig / MessageStoreConfig
JAVA_LONG_MAX: Final = 2**63 - 1  # long fields


@dataclass(frozen=True)
class Between:
    """An integer in ``lo..hi`` (both included); ``why`` is shown with the error."""

    lo: int
    hi: int = JAVA_INT_MAX
    why: str = ""

    def __call__(self, value: Any) -> None:
        if not self.lo <= value <= self.hi:
            raise ValueError(f"must be {self.lo}..{self.hi}, got {value}" + (f" ({self.why})" if self.why else ""))


def _non_empty(value: Any) -> None:
    if not str(value).strip():
        raise ValueError("must not be empty")


def _ip_address(value: Any) -> None:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"{value!r} is not an IPv4 or IPv6 address (it is stored in every message as 4 or 16 "
                         "bytes; RocketMQ would resolve a host name, this broker does not)") from None


def _namesrv_addr(value: Any) -> None:
    """BrokerStartup checks every ';'-separated address with RemotingUtil.string2SocketAddress (exit -3).
    Empty items are skipped, as the controller skips them."""
    addrs = [a.strip() for a in str(value).split(";") if a.strip()]
    if not addrs:
        raise ValueError('no address; expected HOST:PORT[;HOST:PORT...], e.g. "127.0.0.1:9876;192.168.0.1:9876"')
    for addr in addrs:
        host, sep, port = addr.rpartition(":")
        if not (sep and host and port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
            raise ValueError(f"{addr!r} is not HOST:PORT with a port 1..65535; expected HOST:PORT[;HOST:PORT...], "
                             'e.g. "127.0.0.1:9876;192.168.0.1:9876"')


def _host_port(value: Any) -> None:
    """RemotingUtil.string2SocketAddress: HOST:PORT (the master's HA address)."""
    host, sep, port = str(value).strip().rpartition(":")
    if not (sep and host and port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        raise ValueError(f"{value!r} is not HOST:PORT with a port 1..65535, e.g. 127.0.0.1:10912")


_HOUR: Final = re.compile(r"[0-9]+")


def _delete_when(value: Any) -> None:
    """UtilAll.isItTimeToDo: ``when.split(";")``, each item Integer.parseInt'ed and compared with the hour of
    day. RocketMQ accepts any int there: an item that is not a number throws on every clean run and one
    that is no hour never matches, so time-based cleaning silently never runs. Java's split drops trailing
    empty items ("04;" is "04"); parseInt takes no spaces."""
    items = str(value).split(";")
    while items and not items[-1]:
        items.pop()
    if not items:
        raise ValueError("no hour; expected hours of the day 00..23 separated by ';', e.g. 04 or 04;16")
    for item in items:
        if not _HOUR.fullmatch(item) or int(item) > 23:
            raise ValueError(f"{item!r} is not an hour of the day 00..23; expected hours separated by ';', "
                             "e.g. 04 or 04;16 (UtilAll.isItTimeToDo)")


def _message_delay_level(value: Any) -> None:
    # The schedule service's own parser.
    try:
        parse_delay_levels(str(value))
    except ValueError as e:
        raise ValueError(str(e).removeprefix("messageDelayLevel: ")) from None


def _topic(value: Any) -> None:
    problem = validate_topic(str(value))
    if problem is not None:
        raise ValueError(problem)


# Periods of tasks RocketMQ runs with ScheduledExecutorService.scheduleAtFixedRate, which throws
# IllegalArgumentException for a period <= 0 (an asyncio or thread loop would spin here).
_PERIOD_MS: Final = Between(1, why="the period of a scheduled task, in ms")
# Sleeps, waits and timeouts: Thread.sleep and await throw IllegalArgumentException for a negative time.
_WAIT_MS: Final = Between(0, why="a time in ms")
_WAIT_MS_LONG: Final = Between(0, JAVA_LONG_MAX, "a time in ms")
_PAGES: Final = Between(0, why="pages of 4 KiB; 0: whatever is dirty")
_SIZE: Final = Between(1, why="a size in bytes")
_COUNT: Final = Between(1)

# broker.conf key → the check of its value (after it has been read as its field's type). The check raises
# ValueError with the reason. Type errors, booleans and the enums (flushDiskType, brokerRole: the reason lists
# the allowed values) are caught when the value is read; every int and str key has an entry here.
# Upper bounds are the Java field's type unless RocketMQ narrows them.
CONF_CHECKS: Final[dict[str, Callable[[Any], None]]] = {
    # BrokerConfig
    "brokerClusterName": _non_empty,
    "brokerName": _non_empty,
    "brokerId": Between(0, JAVA_LONG_MAX, "0 is the master (MixAll.MASTER_ID), a slave is > 0"),
    # Port 0 (any free port) cannot be used: brokerIP1:listenPort is the store host in every offsetMsgId
    # and the address registered with the name server.
    "listenPort": Between(1, 65535, "a fixed TCP port"),
    "namesrvAddr": _namesrv_addr,
    "brokerIP1": _ip_address,
    "brokerPermission": Between(0, 7, "PermName.isValid: READ 4 | WRITE 2 | INHERIT 1"),
    "defaultTopicQueueNums": Between(1, why="queues of an auto-created topic"),
    "msgTraceTopicName": _topic,
    # RocketMQ clamps this into 10 s..60 s where it is used; rejected here, not clamped: a value the broker
    # would silently replace is as much a mistake as a typo (see the module docstring).
    "registerNameServerPeriod": Between(10_000, 60_000, "RocketMQ uses 10000..60000 ms whatever is set"),
    "flushConsumerOffsetInterval": _PERIOD_MS,
    "sendMessageThreadPoolNums": Between(1, why="ThreadPoolExecutor size"),
    "sendThreadPoolQueueCapacity": Between(1, why="LinkedBlockingQueue capacity"),
    "pullThreadPoolQueueCapacity": Between(1, why="LinkedBlockingQueue capacity"),
    "waitTimeMillsInSendQueue": _WAIT_MS_LONG,
    "waitTimeMillsInPullQueue": _WAIT_MS_LONG,
    "waitTimeMillsInHeartbeatQueue": _WAIT_MS_LONG,
    "waitTimeMillsInTransactionQueue": _WAIT_MS_LONG,
    "shortPollingTimeMills": _WAIT_MS_LONG,
    "transactionTimeOut": _WAIT_MS_LONG,
    "transactionCheckMax": Between(0, why="checks before a half message is discarded"),
    "transactionCheckInterval": Between(1, JAVA_LONG_MAX, "the period of the transaction check, in ms"),
    "filterServerNums": Between(0),
    # BloomFilter.createByFn refuses f outside 1..99 and n < 1 (4.9.8 then fails to start the broker)
    "maxErrorRateOfBloomFilter": Between(1, 99, why="the bloom filter's error rate in %"),
    "expectConsumerNumUseFilter": Between(1, 1 << 20, why="consumer groups the bloom filter is sized for"),
    "filterDataCleanTimeSpan": Between(0, JAVA_LONG_MAX),
    "regionId": _non_empty,
    # MessageStoreConfig
    # an ext file holds at least one unit of the largest size (20 bytes + a 32 KiB bit map)
    "mappedFileSizeConsumeQueueExt": Between(1 << 16, why="bytes of a consume-queue extension file"),
    "bitMapLengthConsumeQueueExt": Between(8, 8 * 32_000, "bits; replaced by the bloom filter's at start"),
    "storePathRootDir": _non_empty,
    "mappedFileSizeCommitLog": _SIZE,
    # getMappedFileSizeConsumeQueue rounds up to whole 20-byte units, which must still fit an int.
    "mappedFileSizeConsumeQueue": Between(1, JAVA_INT_MAX // 20 * 20, "a size in bytes, rounded up to 20-byte units"),
    "maxMessageSize": _SIZE,
    # Flush and commit intervals may be 0 (RocketMQ's Thread.sleep(0) / waitForRunning(0): flush continuously).
    "flushIntervalCommitLog": _WAIT_MS,
    "flushCommitLogLeastPages": _PAGES,
    "flushCommitLogThoroughInterval": _WAIT_MS,
    "transientStorePoolSize": Between(1, why="buffers in the pool"),
    "commitIntervalCommitLog": _WAIT_MS,
    "commitCommitLogLeastPages": _PAGES,
    "commitCommitLogThoroughInterval": _WAIT_MS,
    "flushIntervalConsumeQueue": _WAIT_MS,
    "flushConsumeQueueLeastPages": _PAGES,
    "flushConsumeQueueThoroughInterval": _WAIT_MS,
    # 0 would report FLUSH_DISK_TIMEOUT for nearly every SYNC_FLUSH put.
    "syncFlushTimeout": Between(1, why="a timeout in ms"),
    "fileReservedTime": Between(0, why="hours a file is kept; 0: expired at once"),
    "cleanResourceInterval": _PERIOD_MS,
    "deleteWhen": _delete_when,
    # RocketMQ's getter clamps into 10..95; rejected here, not clamped (as registerNameServerPeriod).
    "diskMaxUsedSpaceRatio": Between(10, 95, "a percentage; RocketMQ uses 10..95 whatever is set"),
    "deleteCommitLogFilesInterval": _WAIT_MS,
    "deleteConsumeQueueFilesInterval": _WAIT_MS,
    "destroyMapedFileIntervalForcibly": _WAIT_MS,
    "redeleteHangedFileInterval": _WAIT_MS,
    "maxTransferBytesOnMessageInMemory": _SIZE,
    "maxTransferCountOnMessageInMemory": _COUNT,
    "maxTransferBytesOnMessageInDisk": _SIZE,
    "maxTransferCountOnMessageInDisk": _COUNT,
    "accessMessageInMemoryMaxRatio": Between(0, 100, "a percentage of physical memory"),
    "maxHashSlotNum": _COUNT,
    "maxIndexNum": _COUNT,
    "messageDelayLevel": _message_delay_level,
    "osPageCacheBusyTimeOutMills": _WAIT_MS_LONG,
    "putMsgIndexHightWater": Between(0, why="a dispatch backlog in messages"),
    # 0 would spin the dispatch thread; past a minute, readers nobody nudges (delay levels) would lag that long.
    "dispatchIdleIntervalMillis": Between(1, 60_000, "a time in ms dispatch waits while nothing waits for it"),
    # 0 would answer FLUSH_SLAVE_TIMEOUT to nearly every SYNC_MASTER put that waits.
    "slaveTimeout": Between(1, why="a timeout in ms"),
    "haListenPort": Between(1, 65535, "a fixed TCP port (slaves connect to it)"),
    "haSendHeartbeatInterval": _PERIOD_MS,
    "haHousekeepingInterval": Between(1, why="a time in ms after which a silent connection is closed"),
    "haTransferBatchSize": _SIZE,
    "haMasterAddress": _host_port,
    "haSlaveFallbehindMax": Between(0, why="bytes a slave may lag and still count as available"),
}

_BOOL_FIELDS = {f.name for f in fields(BrokerConfig) if f.type in ("bool", bool)}
_INT_FIELDS = {f.name for f in fields(BrokerConfig) if f.type in ("int", int)}


class BrokerConfError(ValueError):
    """A broker.conf that cannot be used; the message names the file, line, key and reason."""


def coerce_broker_value(name: str, raw: str) -> Any:
    """A broker.conf string as the type of BrokerConfig field ``name``; ValueError with a reason."""
    raw = raw.strip()
    if name in _BOOL_FIELDS:
        if raw.lower() not in ("true", "false"):
            raise ValueError(f"expected true or false, got {raw!r}")
        return raw.lower() == "true"
    if name in _INT_FIELDS:
        try:
            return int(raw)
        except ValueError:
            raise ValueError(f"expected an integer, got {raw!r}") from None
    return raw


def parse_properties(text: str) -> list[tuple[int, str, str]]:
    """Java-properties lines → (line number, key, value). Comments (# or !), blank lines,
    ``=``/``:``/whitespace separators, backslash line continuation."""
    out: list[tuple[int, str, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        lineno = i + 1
        line = lines[i].lstrip()
        i += 1
        if not line or line[0] in "#!":
            continue
        while line.endswith("\\") and not line.endswith("\\\\") and i < len(lines):
            line = line[:-1] + lines[i].lstrip()
            i += 1
        sep = len(line)
        for j, ch in enumerate(line):
            if ch in "=: \t":
                sep = j
                break
        key = line[:sep]
        rest = line[sep:].lstrip(" \t")
        if rest[:1] in ("=", ":"):
            rest = rest[1:]
        out.append((lineno, key, rest.strip()))
    return out


def parse_conf_value(key: str, raw: str) -> Any:
    """A broker.conf value (``key`` as RocketMQ spells it) as its field's type, checked by ``CONF_CHECKS``;
    ValueError with the reason. The one check for a value from the file or from a command line."""
    if key in BROKER_KEYS:
        name, coerce = BROKER_KEYS[key], coerce_broker_value
    elif key in ROCKETMQ_KEYS:
        name, coerce = ROCKETMQ_KEYS[key], coerce_value
    else:
        raise ValueError("unknown key")
    try:
        value = coerce(name, raw)
    except ValueError as e:
        raise ValueError(str(e).removeprefix(f"{name}: ")) from None  # the store's reasons name the field
    if not raw.strip():
        raise ValueError("no value")
    check = CONF_CHECKS.get(key)
    if check is not None:
        check(value)
    return value


def _conf_text(path: Path, data: bytes) -> str:
    """The file as text: UTF-8, with a leading byte-order mark dropped (an editor's, never part of a key);
    a line that is not UTF-8 is reported with its number. (4.9.8's Properties.load reads ISO-8859-1, so a
    BOM there silently becomes part of the first key and that setting is ignored.)"""
    data = data.removeprefix(b"\xef\xbb\xbf")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        for lineno, line in enumerate(data.split(b"\n"), 1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as e:
                raise BrokerConfError(f"{path}:{lineno}: not UTF-8 (byte 0x{line[e.start]:02x} at column "
                                      f"{e.start + 1})") from None
        raise  # pragma: no cover (a whole that fails has a line that fails)


def load_broker_conf(path: Path | str) -> tuple[BrokerConfig, MessageStoreConfig]:
    """Read a broker.conf into (BrokerConfig, MessageStoreConfig); BrokerConfError when unusable."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise BrokerConfError(f"{path}: broker config file not found") from None
    except OSError as e:
        raise BrokerConfError(f"{path}: cannot read broker config file: {e}") from None
    text = _conf_text(path, data)
    broker = BrokerConfig()
    store = MessageStoreConfig()
    lines: dict[str, int] = {}  # key → the line that set it (the last one wins, as in Properties)
    for lineno, key, value in parse_properties(text):
        try:
            parsed = parse_conf_value(key, value)
        except ValueError as e:
            raise BrokerConfError(f"{path}:{lineno}: {key}: {e}") from None
        lines[key] = lineno
        if key in BROKER_KEYS:
            setattr(broker, BROKER_KEYS[key], parsed)
        else:
            setattr(store, ROCKETMQ_KEYS[key], parsed)
    if "haListenPort" not in lines:
        store.ha_listen_port = broker.listen_port + 1  # BrokerStartup: listenPort + 1
    problem = _contradiction(broker, store, lines)
    if problem is not None:
        key, reason = problem
        raise BrokerConfError(f"{path}:{lines.get(key, 0)}: {key}: {reason}")
    store.store_host = (broker.broker_ip1, broker.listen_port)
    return broker, store


def _contradiction(broker: BrokerConfig, store: MessageStoreConfig, lines: dict[str, int]) -> tuple[str, str] | None:
    """Keys that cannot hold together: (the key to blame, why), or None. 4.9.8's BrokerStartup exits on a
    slave with brokerId 0 ("Slave's brokerId must be > 0") but silently sets a master's brokerId to 0 and
    haListenPort to listenPort + 1; here each is an error naming the line (a set key is never overridden)."""
    role = store.broker_role
    # Blame a key the file set: the later of the two when both are set.
    blame_id = "brokerId" if lines.get("brokerId", 0) >= lines.get("brokerRole", 0) else "brokerRole"
    if role is BrokerRole.SLAVE and broker.broker_id == 0:
        return blame_id, "brokerRole SLAVE needs brokerId >= 1 (0 is the master, MixAll.MASTER_ID)"
    if role is not BrokerRole.SLAVE and broker.broker_id != 0:
        return blame_id, (f"brokerRole {role.value} is a master, whose brokerId is 0 (got {broker.broker_id}); "
                          "a slave sets brokerRole=SLAVE")
    if "haListenPort" not in lines and store.ha_listen_port > 65535:
        return "listenPort", "65535 leaves no port for HA (listenPort + 1): set haListenPort"
    refused = store.separate_dispatch_refusal()
    if refused is not None:
        return refused[0], f"cannot be used with dispatchInSeparateProcess=true: {refused[1]}"
    if store.ha_listen_port == broker.listen_port:
        return "haListenPort", (f"equals listenPort {broker.listen_port} "
                                "(the HA port needs its own; the default is listenPort + 1)")
    return None
