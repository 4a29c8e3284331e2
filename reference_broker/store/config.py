"""MessageStoreConfig: the store's typed configuration, RocketMQ 4.9.8 defaults, units in names.

Each field cites its RocketMQ key (store/.../config/MessageStoreConfig.java, 4.9.8) so that
``broker.conf`` files map onto it (see ``ROCKETMQ_KEYS``).
"""

from __future__ import annotations

import enum
import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any


class FlushDiskType(enum.Enum):
    SYNC_FLUSH = "SYNC_FLUSH"
    ASYNC_FLUSH = "ASYNC_FLUSH"


class BrokerRole(enum.Enum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


def _total_physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 << 30


@dataclass
class MessageStoreConfig:
    store_path_root_dir: Path = field(default_factory=lambda: Path.home() / "store")  # storePathRootDir
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024  # mappedFileSizeCommitLog: 1 GiB
    mapped_file_size_consume_queue: int = 300_000 * 20  # mappedFileSizeConsumeQueue: 300,000 units
    # Consume-queue files reserve disk space in steps (see mapped_file.py); 10,000 queues would
    # otherwise reserve 60 GB up front. Not a RocketMQ key.
    consume_queue_alloc_chunk_bytes: int = 64 * 1024
    # The commit log's page cache is kept filled this far ahead of the writer (store/warm.py); 0: off.
    # Not a RocketMQ key (its warmMapedFileEnable pre-touches whole files instead).
    commit_log_warm_ahead_bytes: int = 16 * 1024 * 1024
    flush_interval_commit_log_ms: int = 500  # flushIntervalCommitLog
    flush_commit_log_timed: bool = True  # flushCommitLogTimed (true since 4.9.1)
    flush_commit_log_least_pages: int = 4  # flushCommitLogLeastPages
    flush_commit_log_thorough_interval_ms: int = 10_000  # flushCommitLogThoroughInterval
    # TransientStorePool: records go to an anonymous buffer and are committed into the file with a
    # write every commitIntervalCommitLog (or once commitCommitLogLeastPages are pending); readers see
    # them once committed. RocketMQ uses it only with ASYNC_FLUSH on a master (isTransientStorePoolEnable).
    transient_store_pool_enable: bool = False  # transientStorePoolEnable
    transient_store_pool_size: int = 5  # transientStorePoolSize (accepted; buffers are made per file here)
    commit_interval_commit_log_ms: int = 200  # commitIntervalCommitLog
    commit_commit_log_least_pages: int = 4  # commitCommitLogLeastPages
    commit_commit_log_thorough_interval_ms: int = 200  # commitCommitLogThoroughInterval
    flush_interval_consume_queue_ms: int = 1000  # flushIntervalConsumeQueue
    flush_consume_queue_least_pages: int = 2  # flushConsumeQueueLeastPages
    flush_consume_queue_thorough_interval_ms: int = 60_000  # flushConsumeQueueThoroughInterval
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH  # flushDiskType
    sync_flush_timeout_ms: int = 5000  # syncFlushTimeout
    slave_timeout_ms: int = 3000  # slaveTimeout: how long a SYNC_MASTER put waits for the slave's ack
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER  # brokerRole
    file_reserved_time_hours: int = 72  # fileReservedTime
    clean_resource_interval_ms: int = 10_000  # cleanResourceInterval
    delete_when: str = "04"  # deleteWhen
    disk_max_used_space_ratio: int = 75  # diskMaxUsedSpaceRatio (getter clamps to [10, 95])
    disk_space_warning_level_ratio: float = 0.90  # rocketmq.broker.diskSpaceWarningLevelRatio
    disk_space_clean_forcibly_ratio: float = 0.85  # rocketmq.broker.diskSpaceCleanForciblyRatio
    delete_commit_log_files_interval_ms: int = 100  # deleteCommitLogFilesInterval
    delete_consume_queue_files_interval_ms: int = 100  # deleteConsumeQueueFilesInterval
    destroy_mapped_file_interval_forcibly_ms: int = 120_000  # destroyMapedFileIntervalForcibly
    redelete_hanged_file_interval_ms: int = 120_000  # redeleteHangedFileInterval
    clean_file_forcibly_enable: bool = True  # cleanFileForciblyEnable
    max_message_size: int = 4 * 1024 * 1024  # maxMessageSize
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024  # maxTransferBytesOnMessageInMemory
    max_transfer_count_on_message_in_memory: int = 32  # maxTransferCountOnMessageInMemory
    max_transfer_bytes_on_message_in_disk: int = 64 * 1024  # maxTransferBytesOnMessageInDisk
    max_transfer_count_on_message_in_disk: int = 8  # maxTransferCountOnMessageInDisk
    access_message_in_memory_max_ratio: int = 40  # accessMessageInMemoryMaxRatio
    message_index_enable: bool = True  # messageIndexEnable
    message_index_safe: bool = False  # messageIndexSafe
    max_hash_slot_num: int = 5_000_000  # maxHashSlotNum
    max_index_num: int = 20_000_000  # maxIndexNum
    max_msgs_num_batch: int = 64  # maxMsgsNumBatch
    default_query_max_num: int = 32  # defaultQueryMaxNum
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"  # messageDelayLevel
    check_crc_on_recover: bool = True  # checkCRCOnRecover
    # 5.x keys, not in 4.9.8; both false there. On here (a deliberate difference, README): a record
    # ends with a CRC over all of it, and recovery checks that instead of BODYCRC, so a torn page in
    # a record's topic or properties is truncated, not served (record.py, "whole-record CRC").
    # Verification needs the appended CRC: with enabledAppendPropCRC off it is off too.
    enabled_append_prop_crc: bool = True  # enabledAppendPropCRC
    force_verify_prop_crc: bool = True  # forceVerifyPropCRC
    duplication_enable: bool = False  # duplicationEnable
    # Not a RocketMQ key (a deliberate extension, README): dispatch only what is flushed, so a consumer never
    # reads a record a power cut can still take. 4.9.8 dispatches up to the written position: a group that
    # read past the flushed offset before a cut is then past the queue offsets the recovered queue gives out
    # again, and never delivers the messages that take them (docs/dispatch_flushed_only.md). False = 4.9.8.
    dispatch_flushed_only: bool = False
    # Not a RocketMQ key (a deliberate difference, README): how long dispatch waits when it found nothing new while
    # nothing waits for it (no pull held). 4.9.8's ReputMessageService waits 1 ms always: 1 = 4.9.8. A pull that
    # finds nothing has it dispatch at once, and while a pull is held it waits 1 ms (store/reput.py, docs/dispatch.md).
    dispatch_idle_interval_ms: int = 10
    # Not a RocketMQ key (a lab extension, README; docs/dispatch.md): dispatch — the consume queues, the index and
    # their flushes — runs in a child process of its own (store/dispatchd.py) instead of a thread of the broker's
    # interpreter. False = 4.9.8's ReputMessageService thread.
    dispatch_in_separate_process: bool = False
    # Not a RocketMQ key: start abnormal recovery at the checkpoint's recover offset (checkpoint.py)
    # rather than at the start of the newest file older than the checkpoint's time. False = 4.9.8.
    recover_from_checkpoint_offset: bool = True
    os_page_cache_busy_timeout_ms: int = 1000  # osPageCacheBusyTimeOutMills
    # putMsgIndexHightWater (600,000 in 4.9.8; the design Q&A's 400,000: docs/claims.md): dispatch backlog, in
    # messages, past which each put sleeps 1 ms so the writer cannot run away from the dispatcher.
    put_msg_index_high_water: int = 600_000
    # The consume queue's extension (consume_queue_ext.py): each message's store time and SQL92 filter bit map.
    enable_consume_queue_ext: bool = False  # enableConsumeQueueExt
    mapped_file_size_consume_queue_ext: int = 48 * 1024 * 1024  # mappedFileSizeConsumeQueueExt
    # bitMapLengthConsumeQueueExt: accepted, and replaced at start by the bloom filter's bit count (as 4.9.8's
    # ConsumerFilterManager replaces it)
    bit_map_length_consume_queue_ext: int = 64
    # Classic master/slave replication (store/ha, reference_broker/ha). The broker listens on listenPort + 1
    # unless haListenPort is set (BrokerStartup always overrides it in 4.9.8).
    ha_listen_port: int = 10912  # haListenPort
    ha_send_heartbeat_interval_ms: int = 5000  # haSendHeartbeatInterval
    ha_housekeeping_interval_ms: int = 20_000  # haHousekeepingInterval
    ha_transfer_batch_size: int = 32 * 1024  # haTransferBatchSize
    ha_master_address: str | None = None  # haMasterAddress (a slave learns it from the name server otherwise)
    ha_slave_fallbehind_max: int = 256 * 1024 * 1024  # haSlaveFallbehindMax
    store_host: tuple[str, int] = ("127.0.0.1", 10911)  # brokerIP1:listenPort (offsetMsgId)
    total_physical_memory_bytes: int = field(default_factory=_total_physical_memory)

    def verify_prop_crc(self) -> bool:
        """Recovery checks the whole-record CRC (only when records carry one: see the fields)."""
        return self.force_verify_prop_crc and self.enabled_append_prop_crc

    def is_transient_store_pool_enable(self) -> bool:
        """MessageStoreConfig.isTransientStorePoolEnable: ASYNC_FLUSH on a master only."""
        return (self.transient_store_pool_enable and self.flush_disk_type is FlushDiskType.ASYNC_FLUSH
                and self.broker_role is not BrokerRole.SLAVE)

    def separate_dispatch_refusal(self) -> tuple[str, str] | None:
        """Why ``dispatch_in_separate_process`` cannot run with the rest of this configuration: (the other key,
        the reason), or None. The dispatch process reads whole records the broker has written to the file."""
        if not self.dispatch_in_separate_process:
            return None
        if self.broker_role is BrokerRole.SLAVE:
            return "brokerRole", "a slave dispatches replicated chunks that may end inside a record"
        if self.enable_consume_queue_ext:
            return "enableConsumeQueueExt", "the extension's filter bit maps need the broker's consumer filters"
        if self.transient_store_pool_enable:
            return "transientStorePoolEnable", "staged records are not in the file the dispatch process reads"
        if self.dispatch_flushed_only:
            return "dispatchFlushedOnly", "the dispatch process follows the written position"
        return None

    @property
    def store_path_commit_log(self) -> Path:
        return self.store_path_root_dir / "commitlog"

    @property
    def store_path_consume_queue(self) -> Path:
        return self.store_path_root_dir / "consumequeue"

    @property
    def store_path_consume_queue_ext(self) -> Path:
        """StorePathConfigHelper.getStorePathConsumeQueueExt."""
        return self.store_path_root_dir / "consumequeue_ext"

    @property
    def store_path_index(self) -> Path:
        return self.store_path_root_dir / "index"

    def get_disk_max_used_space_ratio(self) -> int:
        """The getter clamps to [10, 95] (MessageStoreConfig.getDiskMaxUsedSpaceRatio)."""
        return min(95, max(10, self.disk_max_used_space_ratio))

    def get_mapped_file_size_consume_queue(self) -> int:
        """Rounded up to a whole number of 20-byte units (getMappedFileSizeConsumeQueue)."""
        units = -(-self.mapped_file_size_consume_queue // 20)
        return units * 20

    def delay_level_table_ms(self) -> dict[int, int]:
        """Parse messageDelayLevel (ScheduleMessageService.parseDelayLevel): level (1-based) → ms.

        RocketMQ's units are s, m, h and d; ``ms`` is our addition so tests and experiments can use
        sub-second levels. An empty table is accepted (no delays) here; the delay service refuses it."""
        units = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
        table: dict[int, int] = {}
        for i, item in enumerate(self.message_delay_level.split()):
            m = re.fullmatch(r"(\d+)(ms|s|m|h|d)", item)
            if m is None:
                raise ValueError(f"messageDelayLevel: bad level {item!r} (expected e.g. 500ms, 5s, 2m, 1h, 1d)")
            table[i + 1] = int(m.group(1)) * units[m.group(2)]
        return table


# RocketMQ broker.conf key → our field name, for the store's part of the configuration.
ROCKETMQ_KEYS: dict[str, str] = {
    "storePathRootDir": "store_path_root_dir",
    "mappedFileSizeCommitLog": "mapped_file_size_commit_log",
    "mappedFileSizeConsumeQueue": "mapped_file_size_consume_queue",
    "flushIntervalCommitLog": "flush_interval_commit_log_ms",
    "flushCommitLogTimed": "flush_commit_log_timed",
    "flushCommitLogLeastPages": "flush_commit_log_least_pages",
    "flushCommitLogThoroughInterval": "flush_commit_log_thorough_interval_ms",
    "transientStorePoolEnable": "transient_store_pool_enable",
    "transientStorePoolSize": "transient_store_pool_size",
    "commitIntervalCommitLog": "commit_interval_commit_log_ms",
    "commitCommitLogLeastPages": "commit_commit_log_least_pages",
    "commitCommitLogThoroughInterval": "commit_commit_log_thorough_interval_ms",
    "flushIntervalConsumeQueue": "flush_interval_consume_queue_ms",
    "flushConsumeQueueLeastPages": "flush_consume_queue_least_pages",
    "flushConsumeQueueThoroughInterval": "flush_consume_queue_thorough_interval_ms",
    "flushDiskType": "flush_disk_type",
    "syncFlushTimeout": "sync_flush_timeout_ms",
    "slaveTimeout": "slave_timeout_ms",
    "brokerRole": "broker_role",
    "fileReservedTime": "file_reserved_time_hours",
    "cleanResourceInterval": "clean_resource_interval_ms",
    "deleteWhen": "delete_when",
    "diskMaxUsedSpaceRatio": "disk_max_used_space_ratio",
    "deleteCommitLogFilesInterval": "delete_commit_log_files_interval_ms",
    "deleteConsumeQueueFilesInterval": "delete_consume_queue_files_interval_ms",
    "destroyMapedFileIntervalForcibly": "destroy_mapped_file_interval_forcibly_ms",
    "redeleteHangedFileInterval": "redelete_hanged_file_interval_ms",
    "cleanFileForciblyEnable": "clean_file_forcibly_enable",
    "maxMessageSize": "max_message_size",
    "maxTransferBytesOnMessageInMemory": "max_transfer_bytes_on_message_in_memory",
    "maxTransferCountOnMessageInMemory": "max_transfer_count_on_message_in_memory",
    "maxTransferBytesOnMessageInDisk": "max_transfer_bytes_on_message_in_disk",
    "maxTransferCountOnMessageInDisk": "max_transfer_count_on_message_in_disk",
    "accessMessageInMemoryMaxRatio": "access_message_in_memory_max_ratio",
    "messageIndexEnable": "message_index_enable",
    "messageIndexSafe": "message_index_safe",
    "maxHashSlotNum": "max_hash_slot_num",
    "maxIndexNum": "max_index_num",
    "messageDelayLevel": "message_delay_level",
    "checkCRCOnRecover": "check_crc_on_recover",
    "enabledAppendPropCRC": "enabled_append_prop_crc",
    "forceVerifyPropCRC": "force_verify_prop_crc",
    "duplicationEnable": "duplication_enable",
    "dispatchFlushedOnly": "dispatch_flushed_only",
    "dispatchIdleIntervalMillis": "dispatch_idle_interval_ms",
    "dispatchInSeparateProcess": "dispatch_in_separate_process",
    "recoverFromCheckpointOffset": "recover_from_checkpoint_offset",
    "osPageCacheBusyTimeOutMills": "os_page_cache_busy_timeout_ms",
    "putMsgIndexHightWater": "put_msg_index_high_water",
    "enableConsumeQueueExt": "enable_consume_queue_ext",
    "mappedFileSizeConsumeQueueExt": "mapped_file_size_consume_queue_ext",
    "bitMapLengthConsumeQueueExt": "bit_map_length_consume_queue_ext",
    "haListenPort": "ha_listen_port",
    "haSendHeartbeatInterval": "ha_send_heartbeat_interval_ms",
    "haHousekeepingInterval": "ha_housekeeping_interval_ms",
    "haTransferBatchSize": "ha_transfer_batch_size",
    "haMasterAddress": "ha_master_address",
    "haSlaveFallbehindMax": "ha_slave_fallbehind_max",
}


def coerce_value(name: str, raw: str) -> Any:
    """Turn a ``broker.conf`` string into the type of field ``name``; ValueError with a reason."""
    by_name = {f.name: f for f in fields(MessageStoreConfig)}
    f = by_name[name]
    default = MessageStoreConfig().__getattribute__(name)
    raw = raw.strip()
    if isinstance(default, bool):
        if raw.lower() not in ("true", "false"):
            raise ValueError(f"{name}: expected true or false, got {raw!r}")
        return raw.lower() == "true"
    if isinstance(default, int):
        try:
            return int(raw)
        except ValueError:
            raise ValueError(f"{name}: expected an integer, got {raw!r}") from None
    if isinstance(default, float):
        return float(raw)
    if isinstance(default, enum.Enum):
        try:
            return type(default)(raw)
        except ValueError:
            allowed = ", ".join(m.value for m in type(default))
            raise ValueError(f"{name}: expected one of {allowed}, got {raw!r}") from None
    if isinstance(default, Path):
        return Path(raw).expanduser()
    del f
    return raw
