"""Scenario options: --host forms, values typed back from the web form, broker.conf keys, validation, and the
registration on locust's own parser."""

import pytest
from locust.argument_parser import get_parser

from scenarios.options import OptionError, Settings, parse_host, register, settings_from


@pytest.mark.parametrize(("host", "want"), [
    (None, None), ("", None), ("  ", None),
    ("rmq://127.0.0.1:9876", "127.0.0.1:9876"),
    ("10.0.0.1:9876", "10.0.0.1:9876"),
    ("rmq://a:1;b:2", "a:1;b:2"),
    ("rmq://ns.example:9876/", "ns.example:9876"),
])
def test_parse_host(host, want):
    assert parse_host(host) == want


@pytest.mark.parametrize("host", ["http://127.0.0.1:8089", "rmq://nohost", "rmq://h:port"])
def test_parse_host_refuses_other_schemes_and_bad_addresses(host):
    with pytest.raises(OptionError):
        parse_host(host)


class _Ns:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def test_settings_from_types_values_as_the_defaults_do():
    # The web UI hands back strings for options whose default was None; numbers keep their type.
    s = settings_from(_Ns(rate="2500", message_size="512", sync="true", queue_counts="1,10", broker_conf=["a=b"],
                          unrelated="x"), Settings())
    assert (s.rate, s.message_size, s.sync, s.queue_counts, s.broker_conf) == (2500.0, 512, True, (1, 10), ("a=b",))


def test_settings_validation():
    with pytest.raises(OptionError, match="--queues"):
        settings_from(_Ns(queues=5000), Settings())
    with pytest.raises(OptionError, match="--flush"):
        settings_from(_Ns(flush="SOMETIMES"), Settings())
    with pytest.raises(OptionError):
        settings_from(_Ns(queue_counts="1,x"), Settings())


def test_broker_conf_dict_puts_the_flush_mode_first_and_keys_after():
    s = Settings(flush="SYNC_FLUSH", broker_conf=("mappedFileSizeCommitLog=1048576", " flushDiskType = ASYNC_FLUSH "))
    assert s.broker_conf_dict() == {"flushDiskType": "ASYNC_FLUSH", "mappedFileSizeCommitLog": "1048576"}
    with pytest.raises(OptionError):
        Settings(broker_conf=("novalue",)).broker_conf_dict()


def test_params_are_json_ready():
    p = Settings(queue_counts=(1, 2), broker_conf=("k=v",)).params()
    assert p["queue_counts"] == [1, 2] and p["broker_conf"] == ["k=v"] and "extra" not in p


def test_register_on_locusts_parser():
    parser = get_parser()
    register(parser, Settings(rate=42.0), ("backlog_bytes", "cold", "queue_counts"))
    ns = parser.parse_args(["-f", "x.py", "--rate", "7", "--backlog-bytes", "1024", "--cold", "--no-record",
                            "--broker-conf", "a=1", "--broker-conf", "b=2", "--fio"])
    s = settings_from(ns, Settings(rate=42.0))
    assert (s.rate, s.backlog_bytes, s.cold, s.record, s.broker_conf, s.fio) == (7.0, 1024, True, False,
                                                                                ("a=1", "b=2"), "quick")
    defaults = settings_from(parser.parse_args(["-f", "x.py"]), Settings(rate=42.0))
    assert defaults.rate == 42.0 and defaults.queue_counts == (1, 100, 1000, 10000) and defaults.fio == ""
