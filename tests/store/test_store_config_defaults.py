"""MessageStoreConfig(): every default pinned against RocketMQ's MessageStoreConfig.java (4.9.8).

Each row names the RocketMQ field. Where the field is a ``broker.conf`` key, the row also checks that
``ROCKETMQ_KEYS`` maps that key onto the attribute, so a renamed attribute cannot silently lose its key.
The last test fails when a field is added without a pinned default here.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from reference_broker.store.config import ROCKETMQ_KEYS, BrokerRole, FlushDiskType, MessageStoreConfig
from reference_broker.store.message_store import MessageStore

GiB = 1024 * 1024 * 1024
MiB = 1024 * 1024
KiB = 1024

# (RocketMQ field, our attribute, MessageStoreConfig's 4.9.8 default). RocketMQ field None: not a RocketMQ key.
DEFAULTS: list[tuple[str | None, str, Any]] = [
    # -- files
    ("mappedFileSizeCommitLog", "mapped_file_size_commit_log", 1 * GiB),  # 1073741824
    ("mappedFileSizeConsumeQueue", "mapped_file_size_consume_queue", 300_000 * 20),  # 6,000,000
    # -- commit-log flush (FlushRealTimeService) and commit (CommitRealTimeService)
    ("flushIntervalCommitLog", "flush_interval_commit_log_ms", 500),
    ("flushCommitLogTimed", "flush_commit_log_timed", True),  # true since 4.9.1 (commit 5fe0041686)
    ("flushCommitLogLeastPages", "flush_commit_log_least_pages", 4),
    ("flushCommitLogThoroughInterval", "flush_commit_log_thorough_interval_ms", 10_000),
    ("commitIntervalCommitLog", "commit_interval_commit_log_ms", 200),
    ("commitCommitLogLeastPages", "commit_commit_log_least_pages", 4),
    ("commitCommitLogThoroughInterval", "commit_commit_log_thorough_interval_ms", 200),
    ("transientStorePoolEnable", "transient_store_pool_enable", False),
    ("transientStorePoolSize", "transient_store_pool_size", 5),
    # -- consume-queue flush (FlushConsumeQueueService)
    ("flushIntervalConsumeQueue", "flush_interval_consume_queue_ms", 1000),
    ("flushConsumeQueueLeastPages", "flush_consume_queue_least_pages", 2),
    ("flushConsumeQueueThoroughInterval", "flush_consume_queue_thorough_interval_ms", 60_000),
    # -- flush type, group commit, role
    ("flushDiskType", "flush_disk_type", FlushDiskType.ASYNC_FLUSH),
    ("syncFlushTimeout", "sync_flush_timeout_ms", 5000),
    ("slaveTimeout", "slave_timeout_ms", 3000),
    ("brokerRole", "broker_role", BrokerRole.ASYNC_MASTER),
    # -- cleaning (CleanCommitLogService)
    ("fileReservedTime", "file_reserved_time_hours", 72),
    ("cleanResourceInterval", "clean_resource_interval_ms", 10_000),
    ("deleteWhen", "delete_when", "04"),
    ("diskMaxUsedSpaceRatio", "disk_max_used_space_ratio", 75),
    # 4.9.8: JVM properties rocketmq.broker.diskSpaceWarningLevelRatio / diskSpaceCleanForciblyRatio read by
    # DefaultMessageStore.CleanCommitLogService (5.x: MessageStoreConfig ints 90 / 85); no broker.conf key.
    ("diskSpaceWarningLevelRatio", "disk_space_warning_level_ratio", 0.90),
    ("diskSpaceCleanForciblyRatio", "disk_space_clean_forcibly_ratio", 0.85),
    ("deleteCommitLogFilesInterval", "delete_commit_log_files_interval_ms", 100),
    ("deleteConsumeQueueFilesInterval", "delete_consume_queue_files_interval_ms", 100),
    ("destroyMapedFileIntervalForcibly", "destroy_mapped_file_interval_forcibly_ms", 120_000),
    ("redeleteHangedFileInterval", "redelete_hanged_file_interval_ms", 120_000),
    ("cleanFileForciblyEnable", "clean_file_forcibly_enable", True),
    # -- message size and the getMessage transfer limits
    ("maxMessageSize", "max_message_size", 4 * MiB),  # 4194304
    ("maxTransferBytesOnMessageInMemory", "max_transfer_bytes_on_message_in_memory", 256 * KiB),
    ("maxTransferCountOnMessageInMemory", "max_transfer_count_on_message_in_memory", 32),
    ("maxTransferBytesOnMessageInDisk", "max_transfer_bytes_on_message_in_disk", 64 * KiB),
    ("maxTransferCountOnMessageInDisk", "max_transfer_count_on_message_in_disk", 8),
    ("accessMessageInMemoryMaxRatio", "access_message_in_memory_max_ratio", 40),
    # -- index
    ("messageIndexEnable", "message_index_enable", True),
    ("messageIndexSafe", "message_index_safe", False),
    ("maxHashSlotNum", "max_hash_slot_num", 5_000_000),
    ("maxIndexNum", "max_index_num", 20_000_000),
    ("maxMsgsNumBatch", "max_msgs_num_batch", 64),
    ("defaultQueryMaxNum", "default_query_max_num", 32),
    # -- delay levels
    ("messageDelayLevel", "message_delay_level", "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"),
    # -- recovery, busy page cache, dispatch back-pressure
    ("checkCRCOnRecover", "check_crc_on_recover", True),
    ("duplicationEnable", "duplication_enable", False),
    ("osPageCacheBusyTimeOutMills", "os_page_cache_busy_timeout_ms", 1000),
    ("putMsgIndexHightWater", "put_msg_index_high_water", 600_000),
    # -- the consume queue's extension (ConsumeQueueExt)
    ("enableConsumeQueueExt", "enable_consume_queue_ext", False),
    ("mappedFileSizeConsumeQueueExt", "mapped_file_size_consume_queue_ext", 48 * MiB),
    ("bitMapLengthConsumeQueueExt", "bit_map_length_consume_queue_ext", 64),
    # -- classic HA (HAService, HAConnection, HAClient)
    ("haListenPort", "ha_listen_port", 10912),  # BrokerStartup: listenPort + 1
    ("haSendHeartbeatInterval", "ha_send_heartbeat_interval_ms", 5000),
    ("haHousekeepingInterval", "ha_housekeeping_interval_ms", 20_000),
    ("haTransferBatchSize", "ha_transfer_batch_size", 32 * KiB),
    ("haSlaveFallbehindMax", "ha_slave_fallbehind_max", 256 * MiB),
    ("haMasterAddress", "ha_master_address", None),
    # brokerIP1:listenPort, which offsetMsgIds carry; the broker's listen port 10911 (BrokerStartup).
    (None, "store_host", ("127.0.0.1", 10911)),
    # -- deliberate differences (README "Deliberate differences"): 5.x keys, false in 5.x and absent in 4.9.8
    ("enabledAppendPropCRC", "enabled_append_prop_crc", True),
    ("forceVerifyPropCRC", "force_verify_prop_crc", True),
    # -- not RocketMQ fields: our extensions, pinned so a change is deliberate
    ("recoverFromCheckpointOffset", "recover_from_checkpoint_offset", True),  # broker.conf key of our own
    ("dispatchFlushedOnly", "dispatch_flushed_only", False),  # broker.conf key of our own; off = 4.9.8
    ("dispatchIdleIntervalMillis", "dispatch_idle_interval_ms", 10),  # broker.conf key of our own; 1 = 4.9.8
    ("dispatchInSeparateProcess", "dispatch_in_separate_process", False),  # ours; false = 4.9.8's thread
    (None, "consume_queue_alloc_chunk_bytes", 64 * KiB),
    (None, "commit_log_warm_ahead_bytes", 16 * MiB),
]

# Defaults that depend on the machine: the home directory and the physical memory.
ENVIRONMENT_DEFAULTS = {"store_path_root_dir", "total_physical_memory_bytes"}

# Fields ROCKETMQ_KEYS does not map: 4.9.8 reads the two ratios from JVM properties; maxMsgsNumBatch and
# defaultQueryMaxNum are MessageStoreConfig keys that our broker.conf reader does not map (yet).
NOT_IN_BROKER_CONF = {"diskSpaceWarningLevelRatio", "diskSpaceCleanForciblyRatio",
                      "maxMsgsNumBatch", "defaultQueryMaxNum"}


@pytest.mark.parametrize(("rocketmq_field", "attr", "expected"), DEFAULTS, ids=[row[1] for row in DEFAULTS])
def test_default(rocketmq_field: str | None, attr: str, expected: Any) -> None:
    value = getattr(MessageStoreConfig(), attr)
    assert value == expected
    assert type(value) is type(expected)  # 0.9 is not 90, True is not 1
    if rocketmq_field is not None and rocketmq_field not in NOT_IN_BROKER_CONF:
        assert ROCKETMQ_KEYS.get(rocketmq_field) == attr


def test_keys_not_in_broker_conf_are_really_absent() -> None:
    """When one of these gains a mapping, move it out of NOT_IN_BROKER_CONF so the mapping is checked."""
    assert NOT_IN_BROKER_CONF.isdisjoint(ROCKETMQ_KEYS)


def test_every_field_has_a_pinned_default() -> None:
    pinned = {attr for _field, attr, _value in DEFAULTS}
    assert {f.name for f in fields(MessageStoreConfig)} == pinned | ENVIRONMENT_DEFAULTS


def test_environment_defaults() -> None:
    cfg = MessageStoreConfig()
    assert cfg.store_path_root_dir == Path.home() / "store"  # storePathRootDir: user.home/store
    assert cfg.total_physical_memory_bytes > 0  # StoreUtil.TOTAL_PHYSICAL_MEMORY_SIZE


def test_consume_queue_file_size_is_a_whole_number_of_units() -> None:
    """getMappedFileSizeConsumeQueue: 300,000 units of 20 bytes; a configured size rounds up to whole units."""
    assert MessageStoreConfig().get_mapped_file_size_consume_queue() == 6_000_000
    assert MessageStoreConfig(mapped_file_size_consume_queue=1001).get_mapped_file_size_consume_queue() == 1020


@pytest.mark.parametrize(("configured", "effective"), [(75, 75), (5, 10), (10, 10), (95, 95), (99, 95), (-1, 10)])
def test_disk_max_used_space_ratio_getter_clamps_to_10_95(configured: int, effective: int) -> None:
    """getDiskMaxUsedSpaceRatio clamps to [10, 95] (so 99, apache/rocketmq#4707, acts as 95)."""
    assert MessageStoreConfig(disk_max_used_space_ratio=configured).get_disk_max_used_space_ratio() == effective


def test_message_delay_level_has_18_levels() -> None:
    """messageDelayLevel: levels 1-18 (ScheduleMessageService.parseDelayLevel), queueId = level - 1."""
    s, m, h = 1000, 60_000, 3_600_000
    assert MessageStoreConfig().delay_level_table_ms() == {
        1: 1 * s, 2: 5 * s, 3: 10 * s, 4: 30 * s, 5: 1 * m, 6: 2 * m, 7: 3 * m, 8: 4 * m, 9: 5 * m,
        10: 6 * m, 11: 7 * m, 12: 8 * m, 13: 9 * m, 14: 10 * m, 15: 20 * m, 16: 30 * m, 17: 1 * h, 18: 2 * h,
    }


def test_transient_store_pool_effective_only_for_async_flush_masters() -> None:
    """isTransientStorePoolEnable: off by default; when on, only ASYNC_FLUSH on a non-SLAVE uses it."""
    assert not MessageStoreConfig().is_transient_store_pool_enable()
    assert MessageStoreConfig(transient_store_pool_enable=True).is_transient_store_pool_enable()
    assert not MessageStoreConfig(transient_store_pool_enable=True,
                                  flush_disk_type=FlushDiskType.SYNC_FLUSH).is_transient_store_pool_enable()
    assert not MessageStoreConfig(transient_store_pool_enable=True,
                                  broker_role=BrokerRole.SLAVE).is_transient_store_pool_enable()


def test_store_schedules_cleaning_after_60_s(tmp_path: Path) -> None:
    """DefaultMessageStore.start: cleanFilesPeriodically first runs after 60 s, then every cleanResourceInterval."""
    store = MessageStore(MessageStoreConfig(store_path_root_dir=tmp_path))
    try:
        assert store.clean_initial_delay_s == 60.0
    finally:
        store.shutdown()
