"""Filter uploads (filtersrv/filter_class_manager.py), the broker's filter-server table
(broker/filter_server_manager.py), a pull body split into records (filtersrv/controller.py), and the client's
side: filterServerTable in routes and class-filter subscriptions."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from reference_broker.broker import filter_server_manager as fsm
from reference_broker.broker.filter_server_manager import FilterServerManager, FilterServerRefused
from reference_broker.client.route import TopicRouteData
from reference_broker.client.subscription import build_class_filter_subscription
from reference_broker.common import message as mc
from reference_broker.common.crc import crc32
from reference_broker.common.record import RecordError, prepare_record, write_record
from reference_broker.filtersrv import filter_class_manager
from reference_broker.filtersrv.controller import split_records
from reference_broker.filtersrv.filter_class_manager import FilterClassError, FilterClassManager
from reference_broker.filtersrv.filter_worker import Outcome, SandboxLimits

GOOD = b"def match(m):\n    return m.tags == 'A'\n"
OTHER = b"def match(m):\n    return m.tags == 'B'\n"


@pytest.fixture
def manager() -> Iterator[FilterClassManager]:
    m = FilterClassManager(SandboxLimits(cpu_s=10, memory_mib=256, budget_ms=100))
    yield m
    m.shutdown()


def test_an_upload_is_compiled_in_a_worker_and_a_repeat_of_the_same_crc_is_a_no_op(
        manager: FilterClassManager) -> None:
    assert manager.register("g", "T", "F", crc32(GOOD), GOOD) is True
    info = manager.find("g", "T")
    assert info is not None and info.worker.proc is not None
    pid = info.worker.proc.pid
    assert manager.register("g", "T", "F", crc32(GOOD), GOOD) is False
    again = manager.find("g", "T")
    assert again is info and again.worker.proc is not None and again.worker.proc.pid == pid
    assert info.worker.match([("T", "A", "", b"", {})]).matched == (True,)
    assert manager.find("g", "Other") is None and manager.find("h", "T") is None


def test_a_new_crc_replaces_the_filter_and_kills_the_old_worker(manager: FilterClassManager) -> None:
    manager.register("g", "T", "F", crc32(GOOD), GOOD)
    old = manager.find("g", "T")
    assert old is not None and old.worker.proc is not None
    old_proc = old.worker.proc
    assert manager.register("g", "T", "F", crc32(OTHER), OTHER) is True
    new = manager.find("g", "T")
    assert new is not None and new.worker.match([("T", "B", "", b"", {})]).matched == (True,)
    assert old_proc.poll() is not None


@pytest.mark.parametrize(("body", "crc", "word"), [
    (GOOD, crc32(GOOD) ^ 1, "does not match"),
    (b"\xff\xfe def match(m): pass", None, "not UTF-8"),
    (b"def match(m)\n", None, "SyntaxError"),
    (b"x = 1\n", None, "does not define match"),
    (b"import subprocess\ndef match(m):\n    return True\n", None, "refuses importing subprocess"),
    (b"#" * (300 * 1024), None, "over the limit"),
])
def test_a_bad_upload_is_refused_and_the_working_filter_stays(manager: FilterClassManager, body: bytes,
                                                               crc: int | None, word: str) -> None:
    manager.register("g", "T", "F", crc32(GOOD), GOOD)
    with pytest.raises(FilterClassError, match=word):
        manager.register("g", "T", "F", crc32(body) if crc is None else crc, body)
    info = manager.find("g", "T")
    assert info is not None and info.class_crc == crc32(GOOD)
    verdicts = info.worker.match([("T", "A", "", b"", {})])
    assert verdicts.outcome is Outcome.OK and verdicts.matched == (True,)


def test_the_same_filter_uploaded_at_once_by_two_consumers_starts_one_worker(manager: FilterClassManager) -> None:
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: manager.register("g", "T", "F", crc32(GOOD), GOOD), range(2)))
    assert sorted(results) == [False, True]
    info = manager.find("g", "T")
    assert info is not None and info.worker.starts == 1


def test_the_number_of_filters_is_bounded(manager: FilterClassManager, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(filter_class_manager, "MAX_FILTERS", 1)
    manager.register("g", "T", "F", crc32(GOOD), GOOD)
    with pytest.raises(FilterClassError, match="already holds 1 filters"):
        manager.register("h", "T", "F", crc32(GOOD), GOOD)
    assert manager.register("g", "T", "F", crc32(OTHER), OTHER) is True  # replacing one is not a new one


class _Ctx:
    pass


def test_the_broker_keeps_registered_filter_servers_until_they_close_or_go_quiet(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    changes: list[int] = []
    m = FilterServerManager(0, "127.0.0.1:1", tmp_path, lambda: changes.append(1))
    a, b = _Ctx(), _Ctx()
    m.register(a, "127.0.0.1:7001")  # type: ignore[arg-type]
    m.register(b, "127.0.0.1:7002")  # type: ignore[arg-type]
    m.register(a, "127.0.0.1:7001")  # type: ignore[arg-type]  # a re-registration changes nothing
    assert m.build_new_filter_server_list() == ["127.0.0.1:7001", "127.0.0.1:7002"]
    assert len(changes) == 2
    m.on_channel_close(b)  # type: ignore[arg-type]
    assert m.build_new_filter_server_list() == ["127.0.0.1:7001"]
    assert len(changes) == 3
    m.scan_not_active()
    assert m.build_new_filter_server_list() == ["127.0.0.1:7001"]
    later = time.monotonic() + fsm.FILTER_SERVER_MAX_IDLE_S + 1
    monkeypatch.setattr(fsm.time, "monotonic", lambda: later)
    m.scan_not_active()
    assert m.build_new_filter_server_list() == []
    assert len(changes) == 4
    assert m.pids() == []  # filterServerNums=0: no process


@pytest.mark.parametrize("addr", ["", "nohost", ":1", "h:0", "h:65536", "h:x", "h:" + "1" * 300])
def test_the_broker_refuses_a_filter_server_address_that_is_not_host_port(tmp_path: Path, addr: str) -> None:
    m = FilterServerManager(0, "127.0.0.1:1", tmp_path, lambda: None)
    with pytest.raises(FilterServerRefused):
        m.register(None, addr)
    assert m.build_new_filter_server_list() == []


def test_the_brokers_filter_server_table_is_bounded(tmp_path: Path) -> None:
    m = FilterServerManager(0, "127.0.0.1:1", tmp_path, lambda: None)
    for port in range(1, fsm.MAX_REGISTERED + 1):
        m.register(None, f"127.0.0.1:{port}")
    with pytest.raises(FilterServerRefused, match="already has"):
        m.register(None, "127.0.0.1:9999")
    m.register(None, "127.0.0.1:1")  # re-registering a known one still works
    assert len(m.build_new_filter_server_list()) == fsm.MAX_REGISTERED


def test_a_pull_body_splits_into_its_records_byte_for_byte() -> None:
    records = [_record(f"k{i}", "A" if i % 2 == 0 else "B", f"body-{i}".encode(), i) for i in range(3)]
    parts, messages = split_records(b"".join(records))
    assert parts == records
    assert [(m[0], m[1], m[2], m[3]) for m in messages] == [
        ("T", "A", "k0", b"body-0"), ("T", "B", "k1", b"body-1"), ("T", "A", "k2", b"body-2")]
    assert messages[1][4]["n"] == "1"
    with pytest.raises(RecordError):
        split_records(records[0][:-3])


def _record(key: str, tags: str, body: bytes, n: int) -> bytes:
    props = mc.properties_to_bytes({mc.PROPERTY_KEYS: key, mc.PROPERTY_TAGS: tags, "n": str(n)})
    r = prepare_record(b"T", body, props, 0, 0, 0, 1, bytes(4), 1, bytes([127, 0, 0, 1]), 10911)
    out = bytearray(r.size)
    write_record(out, 0, r, n, n * 100, 2, False)
    return bytes(out)


def test_a_route_carries_the_filter_server_table_and_a_change_in_it_is_a_change() -> None:
    base: dict[str, Any] = {"queueDatas": [], "brokerDatas": [], "filterServerTable": {}}
    plain = TopicRouteData.from_json(json.dumps(base))
    with_fs = TopicRouteData.from_json(json.dumps({**base, "filterServerTable": {"b:1": ["f:1", "f:2"]}}))
    assert plain.filter_server_table == {}
    assert with_fs.filter_server_table == {"b:1": ("f:1", "f:2")}
    assert plain.normalized() != with_fs.normalized()
    with pytest.raises(ValueError):
        TopicRouteData.from_json(json.dumps({**base, "filterServerTable": ["x"]}))


def test_a_class_filter_subscription_keeps_its_source_out_of_the_heartbeat() -> None:
    sub = build_class_filter_subscription("T", GOOD.decode(), "MyFilter")
    assert sub.class_filter_mode and sub.sub_string == "*"
    assert sub.filter_class_source == GOOD.decode() and sub.filter_class_name == "MyFilter"
    assert "def match" not in json.dumps(sub.to_json()) and sub.to_json()["classFilterMode"] is True
    with pytest.raises(ValueError):
        build_class_filter_subscription("T", "  ", "MyFilter")
