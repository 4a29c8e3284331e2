import subprocess
import sys
from dataclasses import fields

import pytest

from reference_broker.broker.broker_config import (
    BROKER_KEYS,
    CONF_CHECKS,
    BrokerConfError,
    BrokerConfig,
    load_broker_conf,
    parse_conf_value,
)
from reference_broker.store.config import ROCKETMQ_KEYS, BrokerRole, FlushDiskType, MessageStoreConfig


def _conf(tmp_path, text):
    p = tmp_path / "broker.conf"
    p.write_text(text)
    return p


def test_defaults():
    bc = BrokerConfig()
    assert (bc.broker_cluster_name, bc.broker_id, bc.listen_port, bc.broker_permission) == (
        "DefaultCluster",
        0,
        10911,
        6,
    )
    assert bc.default_topic_queue_nums == 8 and bc.auto_create_topic_enable and bc.auto_create_subscription_group
    assert bc.flush_consumer_offset_interval_ms == 5000 and bc.wait_time_mills_in_send_queue == 200
    assert bc.long_polling_enable and bc.short_polling_time_mills == 1000 and bc.broker_fast_failure_enable
    assert not bc.slave_read_enable


@pytest.mark.parametrize(("value", "want"), [(30_000, 30_000), (1000, 10_000), (600_000, 60_000)])
def test_register_period_clamped(value, want):
    assert BrokerConfig(register_name_server_period_ms=value).get_register_name_server_period_ms() == want


def test_good_file_with_comments_blank_lines_and_store_keys(tmp_path):
    p = _conf(
        tmp_path,
        "# a comment\n! another\n\n"
        "brokerClusterName = MyCluster\n"
        "  brokerName=broker-a\n"
        "brokerId:0\n"
        "listenPort = 10921\n"
        "brokerIP1=10.0.0.5\n"
        "namesrvAddr=127.0.0.1:9876;127.0.0.2:9876\n"
        "autoCreateTopicEnable=false\n"
        "deleteWhen=04\n"
        "fileReservedTime=48\n"
        "brokerRole=SYNC_MASTER\n"
        "flushDiskType=SYNC_FLUSH\n"
        "mappedFileSizeCommitLog=1048576\n"
        f"storePathRootDir={tmp_path / 'store'}\n",
    )
    bc, sc = load_broker_conf(p)
    assert bc.broker_cluster_name == "MyCluster" and bc.broker_name == "broker-a" and bc.listen_port == 10921
    assert bc.namesrv_addr == "127.0.0.1:9876;127.0.0.2:9876"
    assert bc.auto_create_topic_enable is False
    assert sc.flush_disk_type is FlushDiskType.SYNC_FLUSH and sc.broker_role is BrokerRole.SYNC_MASTER
    assert sc.mapped_file_size_commit_log == 1048576 and sc.file_reserved_time_hours == 48
    assert sc.store_path_root_dir == tmp_path / "store"
    assert sc.store_host == ("10.0.0.5", 10921)


def test_line_continuation(tmp_path):
    bc, _ = load_broker_conf(_conf(tmp_path, "namesrvAddr=a:1;\\\n    b:2\n"))
    assert bc.namesrv_addr == "a:1;b:2"


@pytest.mark.parametrize(
    ("text", "line", "key", "reason"),
    [
        ("brokerName=a\n\nbrokerNmae=b\n", 3, "brokerNmae", "unknown key"),
        ("# c\nlistenPort=abc\n", 2, "listenPort", "integer"),
        ("autoCreateTopicEnable=yes\n", 1, "autoCreateTopicEnable", "true or false"),
        ("\n\n\n\nflushDiskType=FAST\n", 5, "flushDiskType", "SYNC_FLUSH"),
        ("mappedFileSizeCommitLog=1G\n", 1, "mappedFileSizeCommitLog", "integer"),
    ],
)
def test_bad_lines_name_file_line_key_reason(tmp_path, text, line, key, reason):
    p = _conf(tmp_path, text)
    with pytest.raises(BrokerConfError) as ei:
        load_broker_conf(p)
    msg = str(ei.value)
    assert f"{p}:{line}:" in msg and key in msg and reason in msg


def test_missing_file(tmp_path):
    with pytest.raises(BrokerConfError, match="not found"):
        load_broker_conf(tmp_path / "nope.conf")


# (bad line, words the reason must contain). Each is loaded as line 3 of a file, after a good line and a comment.
BAD_VALUES = [
    ("mappedFileSizeCommitLog=-5", "1..2147483647"),
    ("mappedFileSizeCommitLog=0", "got 0"),
    ("mappedFileSizeCommitLog=2147483648", "1..2147483647"),  # a Java int
    ("mappedFileSizeConsumeQueue=0", "20-byte units"),
    ("maxMessageSize=0", "size in bytes"),
    ("listenPort=0", "1..65535"),
    ("listenPort=65536", "1..65535"),
    ("brokerId=-1", "master"),
    ("brokerName=", "no value"),
    ("brokerClusterName=", "no value"),
    ("storePathRootDir=", "no value"),
    ("brokerIP1=localhost", "IPv4 or IPv6"),
    ("namesrvAddr=127.0.0.1", "HOST:PORT"),
    ("namesrvAddr=127.0.0.1:9876;host:0", "'host:0'"),
    ("namesrvAddr=:9876", "HOST:PORT"),
    ("namesrvAddr=;", "no address"),
    ("brokerPermission=8", "PermName"),
    ("defaultTopicQueueNums=0", "auto-created topic"),
    ("msgTraceTopicName=my topic", "illegal characters"),
    ("registerNameServerPeriod=5000", "10000..60000"),
    ("flushConsumerOffsetInterval=0", "period"),
    ("sendThreadPoolQueueCapacity=0", "capacity"),
    ("waitTimeMillsInSendQueue=-1", "got -1"),
    ("cleanResourceInterval=0", "period"),
    ("flushIntervalCommitLog=-1", "time in ms"),
    ("flushCommitLogLeastPages=-1", "pages"),
    ("commitCommitLogThoroughInterval=-1", "time in ms"),
    ("syncFlushTimeout=0", "timeout"),
    ("fileReservedTime=-1", "hours"),
    ("deleteWhen=xx", "'xx' is not an hour"),
    ("deleteWhen=24", "'24' is not an hour"),
    ("deleteWhen=04;x", "'x' is not an hour"),
    ("deleteWhen=04; 16", "' 16' is not an hour"),  # Integer.parseInt takes no spaces
    ("deleteWhen=;", "no hour"),
    ("deleteWhen=-1", "'-1' is not an hour"),
    ("diskMaxUsedSpaceRatio=9", "10..95"),
    ("diskMaxUsedSpaceRatio=96", "10..95"),
    ("accessMessageInMemoryMaxRatio=101", "0..100"),
    ("maxTransferCountOnMessageInDisk=0", "got 0"),
    ("transientStorePoolSize=0", "buffers"),
    ("messageDelayLevel=1s 5x", "level 2 is '5x'"),
    ("messageDelayLevel=", "no value"),
    ("flushDiskType=FAST", "SYNC_FLUSH, ASYNC_FLUSH"),
    ("brokerRole=MASTER", "ASYNC_MASTER, SYNC_MASTER, SLAVE"),
]


@pytest.mark.parametrize(("line", "reason"), BAD_VALUES, ids=[b for b, _ in BAD_VALUES])
def test_bad_values_name_file_line_key_reason(tmp_path, line, reason):
    key = line.partition("=")[0]
    p = _conf(tmp_path, f"brokerName=b\n# the bad line is next\n{line}\nbrokerId=0\n")
    with pytest.raises(BrokerConfError) as ei:
        load_broker_conf(p)
    msg = str(ei.value)
    assert msg.startswith(f"{p}:3: {key}: ")
    said = msg.removeprefix(f"{p}:3: {key}: ")
    assert reason in said and key not in said  # the reason does not repeat the key


GOOD_EDGES = [
    "listenPort=1", "listenPort=65534", "brokerId=0", "brokerPermission=0", "brokerPermission=7",
    "registerNameServerPeriod=10000", "registerNameServerPeriod=60000", "namesrvAddr=a:1;b:65535;",
    "brokerIP1=::1", "mappedFileSizeCommitLog=1", "mappedFileSizeCommitLog=2147483647",
    "mappedFileSizeConsumeQueue=1", "mappedFileSizeConsumeQueue=2147483640", "flushIntervalCommitLog=0",
    "flushCommitLogLeastPages=0", "flushConsumeQueueLeastPages=0", "fileReservedTime=0", "deleteWhen=00",
    "deleteWhen=23", "deleteWhen=04;16", "deleteWhen=4;", "diskMaxUsedSpaceRatio=10", "diskMaxUsedSpaceRatio=95",
    "accessMessageInMemoryMaxRatio=0", "accessMessageInMemoryMaxRatio=100", "messageDelayLevel=100ms 1d",
    "waitTimeMillsInSendQueue=0", "transactionCheckMax=0", "brokerRole=SYNC_MASTER", "haListenPort=1",
]


@pytest.mark.parametrize("line", GOOD_EDGES)
def test_edge_values_are_accepted(tmp_path, line):
    key, _, raw = line.partition("=")
    load_broker_conf(_conf(tmp_path, f"brokerName=b\n{line}\n"))
    assert parse_conf_value(key, raw) is not None  # the function a command line would use agrees


def test_every_int_and_str_key_has_a_check():
    """Booleans and enums are checked by their type; every other key needs a range or a format."""
    types = {f.name: type(getattr(BrokerConfig(), f.name)) for f in fields(BrokerConfig)}
    types |= {f.name: type(getattr(MessageStoreConfig(), f.name)) for f in fields(MessageStoreConfig)}
    keys = {**BROKER_KEYS, **ROCKETMQ_KEYS}
    need = {k for k, name in keys.items() if types[name] in (int, str)}
    assert need - CONF_CHECKS.keys() == set()
    assert CONF_CHECKS.keys() - keys.keys() == set()


def test_command_line_values_use_the_same_checks():
    assert parse_conf_value("namesrvAddr", "127.0.0.1:9876") == "127.0.0.1:9876"
    assert parse_conf_value("listenPort", "10911") == 10911
    with pytest.raises(ValueError, match=r"1\.\.65535"):
        parse_conf_value("listenPort", "0")
    with pytest.raises(ValueError, match="unknown key"):
        parse_conf_value("listenport", "10911")


def run_broker_cli(tmp_path, name, extra_lines, namesrv):
    """``python -m reference_broker broker -n namesrv -c <tmp>/name`` on a fresh store directory: (result, store)."""
    store = tmp_path / "store"
    conf = tmp_path / name
    conf.write_text(f"storePathRootDir={store}\nbrokerName=b\n{extra_lines}listenPort=10911\n")
    p = subprocess.run([sys.executable, "-m", "reference_broker", "broker", "-n", namesrv, "-c", str(conf)],
                       capture_output=True, text=True, timeout=60)
    return p, store


@pytest.mark.e2e
def test_cli_rejects_a_bad_value_before_creating_anything(tmp_path):
    p, store = run_broker_cli(tmp_path, "bad.conf", "mappedFileSizeCommitLog=-5\n", "127.0.0.1:1")
    assert p.returncode != 0
    assert "bad.conf:3: mappedFileSizeCommitLog: must be 1..2147483647, got -5" in p.stderr
    assert not store.exists()


@pytest.mark.e2e
def test_cli_rejects_a_bad_name_server_address_before_creating_anything(tmp_path):
    p, store = run_broker_cli(tmp_path, "good.conf", "", "127.0.0.1:99999")
    assert p.returncode == 2  # click's usage error
    assert "Invalid value for -n" in p.stderr and "127.0.0.1:99999" in p.stderr
    assert not store.exists()


def test_a_line_that_is_not_utf8_is_reported_with_its_number(tmp_path):
    conf = tmp_path / "latin1.conf"
    conf.write_bytes(b"brokerName=b\n# comment\nbrokerClusterName=caf\xe9\n")
    with pytest.raises(BrokerConfError, match=r"latin1.conf:3: not UTF-8 \(byte 0xe9 at column 22\)"):
        load_broker_conf(conf)


def test_a_utf8_byte_order_mark_is_not_part_of_the_first_key(tmp_path):
    conf = tmp_path / "bom.conf"
    conf.write_bytes(b"\xef\xbb\xbfbrokerName=with-bom\nlistenPort=10915\n")
    broker, _ = load_broker_conf(conf)
    assert broker.broker_name == "with-bom"


@pytest.mark.e2e
def test_cli_names_the_line_that_is_not_utf8(tmp_path):
    store = tmp_path / "store"
    conf = tmp_path / "bad.conf"
    conf.write_bytes(f"storePathRootDir={store}\nbrokerName=b\xff\n".encode("latin-1"))
    p = subprocess.run([sys.executable, "-m", "reference_broker", "broker", "-n", "127.0.0.1:1", "-c", str(conf)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "bad.conf:2: not UTF-8" in p.stderr
    assert not store.exists()


def test_ha_keys_are_read(tmp_path):
    """The classic-HA keys of MessageStoreConfig (4.9.8) land in the store's configuration."""
    _bc, sc = load_broker_conf(_conf(tmp_path, (
        "brokerName=b\nbrokerId=1\nbrokerRole=SLAVE\nhaListenPort=20912\nhaSendHeartbeatInterval=1000\n"
        "haHousekeepingInterval=4000\nhaTransferBatchSize=65536\nhaMasterAddress=10.0.0.1:10912\n"
        "haSlaveFallbehindMax=1024\nslaveTimeout=500\n")))
    assert (sc.ha_listen_port, sc.ha_send_heartbeat_interval_ms, sc.ha_housekeeping_interval_ms,
            sc.ha_transfer_batch_size, sc.ha_master_address, sc.ha_slave_fallbehind_max, sc.slave_timeout_ms) == (
        20912, 1000, 4000, 65536, "10.0.0.1:10912", 1024, 500)


@pytest.mark.parametrize(("line", "reason"), [
    ("haMasterAddress=10.0.0.1", "is not HOST:PORT"),
    ("haListenPort=70000", "1..65535"),
    ("slaveTimeout=0", "must be 1.."),
    ("haTransferBatchSize=0", "must be 1.."),
])
def test_bad_ha_values_name_file_line_key(tmp_path, line, reason):
    key = line.split("=")[0]
    with pytest.raises(BrokerConfError, match=rf"broker\.conf:2: {key}: .*{reason}"):
        load_broker_conf(_conf(tmp_path, f"brokerName=b\n{line}\n"))


@pytest.mark.parametrize(("text", "line", "key", "reason"), [
    ("brokerName=b\nbrokerRole=SLAVE\n", 2, "brokerRole", "SLAVE needs brokerId >= 1"),  # brokerId left at 0
    ("brokerName=b\nbrokerRole=SLAVE\nbrokerId=0\n", 3, "brokerId", "SLAVE needs brokerId >= 1"),
    ("brokerName=b\nbrokerId=2\n", 2, "brokerId", "ASYNC_MASTER is a master, whose brokerId is 0"),
    ("brokerId=1\nbrokerRole=SYNC_MASTER\n", 2, "brokerRole", "SYNC_MASTER is a master"),
    ("listenPort=20911\nhaListenPort=20911\n", 2, "haListenPort", "equals listenPort 20911"),
    ("brokerName=b\nlistenPort=65535\n", 2, "listenPort", "no port for HA"),
])
def test_contradictions_name_file_line_key(tmp_path, text, line, key, reason):
    p = _conf(tmp_path, text)
    with pytest.raises(BrokerConfError) as e:
        load_broker_conf(p)
    assert str(e.value).startswith(f"{p}:{line}: {key}: ")
    assert reason in str(e.value)


def test_slave_and_ha_port_default(tmp_path):
    bc, sc = load_broker_conf(_conf(tmp_path, "brokerName=b\nbrokerRole=SLAVE\nbrokerId=1\nlistenPort=20911\n"))
    assert (bc.broker_id, sc.broker_role, sc.ha_listen_port) == (1, BrokerRole.SLAVE, 20912)  # listenPort + 1
    _bc, sc = load_broker_conf(_conf(tmp_path, "listenPort=20911\nhaListenPort=30000\n"))
    assert sc.ha_listen_port == 30000  # a set haListenPort is kept (4.9.8 overrides it)
