import pytest

from reference_broker.broker.broker_config import BrokerConfError, BrokerConfig, load_broker_conf
from reference_broker.store.config import BrokerRole, FlushDiskType


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
