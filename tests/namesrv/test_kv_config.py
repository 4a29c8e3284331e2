"""The name server's KV config (namesrv/kv_config.py): the table, its file, and the four request codes; end to end,
a value put through the ``namesrv`` CLI survives a restart of the process."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.ports import free_port
from reference_broker.namesrv.kv_config import KVConfigManager
from reference_broker.namesrv.processor import NamesrvProcessor
from reference_broker.namesrv.route_info import RouteInfoManager
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import RemotingCommand, create_request, json_loads


def _ask(p: NamesrvProcessor, code: RequestCode, **fields: str) -> RemotingCommand:
    return p.process(create_request(code, fields))


def test_put_get_list_delete_answer_as_4_9_8(tmp_path: Path) -> None:
    p = NamesrvProcessor(RouteInfoManager(), kv_config=KVConfigManager(tmp_path / "kv.json"))
    missing = _ask(p, RequestCode.GET_KV_CONFIG, namespace="ns", key="k")
    assert (missing.code, missing.remark) == (ResponseCode.QUERY_NOT_FOUND, "No config item, Namespace: ns Key: k")
    none = _ask(p, RequestCode.GET_KVLIST_BY_NAMESPACE, namespace="ns")
    assert (none.code, none.remark) == (ResponseCode.QUERY_NOT_FOUND, "No config item, Namespace: ns")
    assert _ask(p, RequestCode.PUT_KV_CONFIG, namespace="ns", key="k", value="v").code == ResponseCode.SUCCESS
    got = _ask(p, RequestCode.GET_KV_CONFIG, namespace="ns", key="k")
    assert got.code == ResponseCode.SUCCESS and got.ext_fields == {"value": "v"}
    listed = _ask(p, RequestCode.GET_KVLIST_BY_NAMESPACE, namespace="ns")
    assert listed.code == ResponseCode.SUCCESS and json_loads(listed.body) == {"table": {"k": "v"}}
    assert _ask(p, RequestCode.DELETE_KV_CONFIG, namespace="ns", key="k").code == ResponseCode.SUCCESS
    assert _ask(p, RequestCode.GET_KV_CONFIG, namespace="ns", key="k").code == ResponseCode.QUERY_NOT_FOUND
    # The namespace outlives its last key (KVConfigManager keeps the empty map): listed, empty.
    emptied = _ask(p, RequestCode.GET_KVLIST_BY_NAMESPACE, namespace="ns")
    assert emptied.code == ResponseCode.SUCCESS and json_loads(emptied.body) == {"table": {}}


def test_a_missing_field_is_a_clear_error(tmp_path: Path) -> None:
    p = NamesrvProcessor(RouteInfoManager(), kv_config=KVConfigManager(tmp_path / "kv.json"))
    r = _ask(p, RequestCode.PUT_KV_CONFIG, namespace="ns", key="k")
    assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, "the custom field <value> is null")
    assert not (tmp_path / "kv.json").exists()


def test_the_file_is_4_9_8s_wrapper_and_loads_back(tmp_path: Path) -> None:
    path = tmp_path / "namesrv" / "kvConfig.json"
    kv = KVConfigManager(path)
    kv.put("ORDER_TOPIC_CONFIG", "TopicA", "broker-a:4")
    kv.put("ns", "k", "v")
    kv.put("ns", "k", "v2")
    assert json.loads(path.read_text()) == {"configTable": {"ORDER_TOPIC_CONFIG": {"TopicA": "broker-a:4"},
                                                            "ns": {"k": "v2"}}}
    assert json.loads((path.parent / "kvConfig.json.bak").read_text())["configTable"]["ns"] == {"k": "v"}
    again = KVConfigManager(path)
    again.load()
    assert again.get("ns", "k") == "v2" and again.get("ORDER_TOPIC_CONFIG", "TopicA") == "broker-a:4"


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"configTable": {"ns": {"k": 1}}}'])
def test_an_unreadable_file_is_kept_aside_and_the_server_starts_empty(
        tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "kvConfig.json"
    path.write_text(text)
    kv = KVConfigManager(path)
    with caplog.at_level(logging.ERROR, logger="reference_broker.namesrv.kv_config"):
        kv.load()
    assert kv.table == {}
    assert "cannot be read" in caplog.text
    assert (tmp_path / "kvConfig.json.corrupt").read_text() == text
    kv.put("ns", "k", "v")  # the next put writes a good file; the bad one stays aside
    assert (tmp_path / "kvConfig.json.corrupt").read_text() == text


def _start(port: int, kv_path: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-m", "reference_broker", "namesrv", "--host", "127.0.0.1", "-p",
                             str(port), "--kv-config-path", str(kv_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    assert "boot success" in proc.stdout.readline()
    return proc


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(10)
    if proc.stdout is not None:
        proc.stdout.close()


@pytest.mark.e2e
def test_a_value_put_over_the_wire_survives_a_restart(tmp_path: Path) -> None:
    kv_path = tmp_path / "ns" / "kvConfig.json"
    port = free_port()
    proc = _start(port, kv_path)
    try:
        with RemotingClient("127.0.0.1", port, timeout_s=5) as c:
            r = c.invoke(create_request(RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": "v"}))
            assert r.code == ResponseCode.SUCCESS
    finally:
        _stop(proc)
    time.sleep(0.1)
    proc = _start(port, kv_path)
    try:
        with RemotingClient("127.0.0.1", port, timeout_s=5) as c:
            r = c.invoke(create_request(RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "k"}))
    finally:
        _stop(proc)
    assert r.code == ResponseCode.SUCCESS and r.ext_fields["value"] == "v"
