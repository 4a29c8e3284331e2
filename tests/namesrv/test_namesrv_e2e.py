"""The name server over real sockets, and the ``namesrv`` CLI as a subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from typing import Any

import pytest

from harness.ports import free_port
from reference_broker.namesrv.server import NameServer
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import RemotingCommand, create_request

M = "127.0.0.1:10911"


def register_body(topics: dict[str, int], counter: int = 1) -> bytes:
    table = {t: {"topicName": t, "readQueueNums": n, "writeQueueNums": n, "perm": 6, "topicSysFlag": 0,
                 "order": False, "topicFilterType": "SINGLE_TAG"} for t, n in topics.items()}
    body = {"filterServerList": [],
            "topicConfigSerializeWrapper": {"dataVersion": {"counter": counter, "timestamp": 1},
                                            "topicConfigTable": table}}
    return json.dumps(body).encode()


def register(client: RemotingClient, body: bytes, broker_id: int = 0, addr: str = M,
             **extra: str) -> RemotingCommand:
    fields = {"brokerName": "b1", "brokerAddr": addr, "clusterName": "c1", "haServerAddr": "127.0.0.1:10912",
              "brokerId": str(broker_id), **extra}
    return client.invoke(create_request(RequestCode.REGISTER_BROKER, fields, body))


def route(client: RemotingClient, topic: str) -> RemotingCommand:
    return client.invoke(create_request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))


@pytest.fixture
def server() -> Iterator[NameServer]:
    ns = NameServer("127.0.0.1", 0, scan_interval_s=60)
    st = ns.start_in_thread()
    yield ns
    st.stop()


@pytest.fixture
def client(server: NameServer) -> Iterator[RemotingClient]:
    with RemotingClient("127.0.0.1", server.port) as c:
        yield c


def test_register_then_route(client: RemotingClient) -> None:
    resp = register(client, register_body({"T": 4}))
    assert resp.code == ResponseCode.SUCCESS and resp.ext_fields == {}
    slave = register(client, register_body({"T": 1}), broker_id=1, addr="127.0.0.1:10921")
    assert slave.code == ResponseCode.SUCCESS
    assert slave.ext_fields == {"haServerAddr": "127.0.0.1:10912", "masterAddr": M}
    resp = route(client, "T")
    assert resp.code == ResponseCode.SUCCESS
    data: dict[str, Any] = json.loads(resp.body)
    assert data["queueDatas"] == [
        {"brokerName": "b1", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0, "writeQueueNums": 4}]
    assert data["brokerDatas"] == [
        {"brokerAddrs": {"0": M, "1": "127.0.0.1:10921"}, "brokerName": "b1", "cluster": "c1"}]
    info = client.invoke(create_request(RequestCode.GET_BROKER_CLUSTER_INFO))
    assert json.loads(info.body)["clusterAddrTable"] == {"c1": ["b1"]}
    unreg = client.invoke(create_request(RequestCode.UNREGISTER_BROKER, {
        "brokerName": "b1", "brokerAddr": M, "clusterName": "c1", "brokerId": "0"}))
    assert unreg.code == ResponseCode.SUCCESS
    assert route(client, "T").code == ResponseCode.SUCCESS  # the slave still holds b1
    client.invoke(create_request(RequestCode.UNREGISTER_BROKER, {
        "brokerName": "b1", "brokerAddr": "127.0.0.1:10921", "clusterName": "c1", "brokerId": "1"}))
    assert route(client, "T").code == ResponseCode.TOPIC_NOT_EXIST


def test_unknown_topic(client: RemotingClient) -> None:
    resp = route(client, "nope")
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST == 17
    assert resp.remark is not None
    assert resp.remark.startswith("No topic route info in name server for the topic: nope")


@pytest.mark.parametrize(("body", "extra", "remark"), [
    (b"{not json", {}, "not valid JSON"),
    (b"[1]", {}, "must be a JSON object"),
    (json.dumps({"topicConfigSerializeWrapper": {"topicConfigTable": {"T": {"readQueueNums": "x"}}}}).encode(),
     {}, "readQueueNums"),
    (b"{}", {"bodyCrc32": "12345"}, "crc32 not match"),
])
def test_bad_register_body(client: RemotingClient, body: bytes, extra: dict[str, str], remark: str) -> None:
    resp = register(client, body, **extra)
    assert resp.code == ResponseCode.SYSTEM_ERROR == 1
    assert resp.remark is not None and remark in resp.remark
    assert json.loads(client.invoke(create_request(RequestCode.GET_BROKER_CLUSTER_INFO)).body) == {
        "brokerAddrTable": {}, "clusterAddrTable": {}}


def test_crc_and_legacy_body(client: RemotingClient) -> None:
    body = register_body({"T": 2})
    assert register(client, body, bodyCrc32=str(zlib.crc32(body) & 0x7FFFFFFF)).code == ResponseCode.SUCCESS
    legacy = json.dumps({"topicConfigTable": {"L": {"readQueueNums": 1, "writeQueueNums": 1, "perm": 6}},
                         "dataVersion": {"counter": 9, "timestamp": 9}}).encode()
    assert register(client, legacy).code == ResponseCode.SUCCESS
    assert route(client, "L").code == ResponseCode.SUCCESS


def test_missing_header_field(client: RemotingClient) -> None:
    resp = client.invoke(create_request(RequestCode.REGISTER_BROKER, {"brokerName": "b1"}, b"{}"))
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert resp.remark is not None and "is null" in resp.remark
    resp = client.invoke(create_request(RequestCode.GET_ROUTEINFO_BY_TOPIC))
    assert resp.code == ResponseCode.SYSTEM_ERROR and resp.remark == "the custom field <topic> is null"
    resp = client.invoke(create_request(RequestCode.UNREGISTER_BROKER, {
        "brokerName": "b1", "brokerAddr": M, "clusterName": "c1", "brokerId": "zero"}))
    assert resp.code == ResponseCode.SYSTEM_ERROR and resp.remark is not None and "brokerId" in resp.remark


def test_expiry_over_the_wire() -> None:
    ns = NameServer("127.0.0.1", 0, scan_interval_s=0.05, broker_expired_ms=200)
    st = ns.start_in_thread()
    try:
        with RemotingClient("127.0.0.1", ns.port) as c:
            assert register(c, register_body({"T": 4})).code == ResponseCode.SUCCESS
            assert route(c, "T").code == ResponseCode.SUCCESS
            deadline = time.monotonic() + 5
            while route(c, "T").code == ResponseCode.SUCCESS:
                assert time.monotonic() < deadline, "broker never expired"
                time.sleep(0.05)
            info = json.loads(c.invoke(create_request(RequestCode.GET_BROKER_CLUSTER_INFO)).body)
            assert info == {"brokerAddrTable": {}, "clusterAddrTable": {}}
    finally:
        st.stop()


@pytest.mark.e2e
def test_cli_subprocess() -> None:
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "reference_broker", "namesrv", "-p", str(port),
                             "--host", "127.0.0.1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    try:
        assert proc.stdout is not None
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(proc.stdout.readline() if proc.stdout else ""))
        reader.start()
        reader.join(10)
        assert line and line[0].strip() == "The Name Server boot success. serializeType=JSON", line
        with RemotingClient("127.0.0.1", port) as c:
            info = c.invoke(create_request(RequestCode.GET_BROKER_CLUSTER_INFO))
            assert info.code == ResponseCode.SUCCESS
            assert json.loads(info.body) == {"brokerAddrTable": {}, "clusterAddrTable": {}}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()
        if proc.stderr:
            proc.stderr.close()
