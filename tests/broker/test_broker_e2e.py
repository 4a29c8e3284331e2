"""The broker as a real process (with a real name server): sockets, signals, restarts, bad input."""

from __future__ import annotations

import asyncio
import socket
import struct
import subprocess
import sys
import time

import pytest

from harness.launcher import Topology
from harness.ports import free_port
from reference_broker.common.record import decode_messages
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import create_request, encode, json_loads
from tests.broker.broker_helpers import make_controller, pull_request, send_request

pytestmark = pytest.mark.e2e


@pytest.fixture
def topo(tmp_path):
    with Topology(tmp_path / "topo") as t:
        yield t


def _client(topo, i=0):
    return RemotingClient("127.0.0.1", topo.brokers[i].port, timeout_s=10)


def _pull_all(c, topic, queue_id, start=0):
    out, offset = [], start
    while True:
        r = c.invoke(pull_request(topic, queue_id, offset))
        if r.code != ResponseCode.SUCCESS:
            return out
        msgs = decode_messages(r.body)
        out += msgs
        offset = int(r.ext_fields["nextBeginOffset"])


def _wait(pred, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached")


def test_send_route_pull_and_long_polling(topo):
    with _client(topo) as c, RemotingClient("127.0.0.1", topo.namesrv_port) as ns:
        r = c.invoke(send_request("E2E", b"hello"))
        assert r.code == ResponseCode.SUCCESS
        # the auto-created topic is registered with the name server right away (registerBrokerAll), not
        # at the next 30 s registration
        _wait(lambda: ns.invoke(create_request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "E2E"})).code == 0,
              timeout_s=5)
        route = ns.invoke(create_request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "E2E"}))
        assert json_loads(route.body)["brokerDatas"][0]["brokerAddrs"]["0"] == topo.brokers[0].addr
        _wait(lambda: len(_pull_all(c, "E2E", 0)) == 1)
        # a held pull is answered by the next send, long before its 15 s suspend time
        import threading
        got = {}

        def held():
            t0 = time.monotonic()
            got["resp"] = c.invoke(pull_request("E2E", 0, 1, suspend_ms=15_000), timeout_s=30)
            got["t"] = time.monotonic() - t0

        th = threading.Thread(target=held)
        th.start()
        time.sleep(0.3)
        assert th.is_alive()
        assert c.invoke(send_request("E2E", b"world")).code == ResponseCode.SUCCESS
        th.join(10)
        assert got["resp"].code == ResponseCode.SUCCESS
        assert [m.body for m in decode_messages(got["resp"].body)] == [b"world"]
        assert got["t"] < 5


def test_clean_shutdown_then_restart_keeps_messages_and_offsets(topo):
    b = topo.brokers[0]
    with _client(topo) as c:
        for i in range(20):
            assert c.invoke(send_request("Keep", b"m%d" % i)).code == ResponseCode.SUCCESS
        c.invoke(create_request(RequestCode.UPDATE_CONSUMER_OFFSET, {
            "consumerGroup": "cg", "topic": "Keep", "queueId": "0", "commitOffset": "7"}))
    assert b.stop() == 0
    assert not (b.store_root / "abort").exists(), "a clean shutdown removes the abort file"
    assert '"Keep@cg"' in (b.store_root / "config" / "consumerOffset.json").read_text()
    # the broker logs to {storePathRootDir}/logs/broker.log as well as to stderr
    broker_log = b.store_root / "logs" / "broker.log"
    assert "shut down (normally: True)" in broker_log.read_text()
    b.start()
    with _client(topo) as c:
        r = c.invoke(create_request(RequestCode.QUERY_CONSUMER_OFFSET, {
            "consumerGroup": "cg", "topic": "Keep", "queueId": "0"}))
        assert r.ext_fields["offset"] == "7"
        assert [m.body for m in _pull_all(c, "Keep", 0)] == [b"m%d" % i for i in range(20)]


def test_kill9_loses_no_acknowledged_message_under_async_flush(topo):
    b = topo.brokers[0]
    acked = []
    with _client(topo) as c:
        for i in range(300):
            r = c.invoke(send_request("K9", b"k%d" % i, queue_id=i % 4))
            if r.code == ResponseCode.SUCCESS:
                acked.append((i % 4, b"k%d" % i))
    b.kill()
    assert (b.store_root / "abort").exists()
    b.start()
    with _client(topo) as c:
        got = {(q, m.body) for q in range(4) for m in _pull_all(c, "K9", q)}
    assert len(acked) == 300
    assert set(acked) <= got


def test_bad_bytes_close_only_that_connection(topo):
    port = topo.brokers[0].port
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(struct.pack(">ii", 8, (0 << 24) | 100) + b"not json")  # header length beyond the frame
        s.settimeout(5)
        assert s.recv(100) == b"", "the broker closes a connection that sends a bad frame"
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(struct.pack(">i", 64 * 1024 * 1024))  # a frame larger than 16 MiB
        s.settimeout(5)
        assert s.recv(100) == b""
    with _client(topo) as c:
        r = c.invoke(create_request(9999, {}))
        assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert c.invoke(send_request("Still", b"ok")).code == ResponseCode.SUCCESS
        bad = create_request(RequestCode.PULL_MESSAGE, {"consumerGroup": "g", "topic": "Still", "queueId": "x"})
        r = c.invoke(bad)
        assert r.code == ResponseCode.SYSTEM_ERROR and "not a number" in r.remark
    assert topo.brokers[0].alive


def test_sigterm_answers_held_pulls(topo):
    import threading
    with _client(topo) as c:
        c.invoke(send_request("Hold", b"x"))
        got = {}

        def held():
            got["resp"] = c.invoke(pull_request("Hold", 1, 0, suspend_ms=20_000), timeout_s=30)

        th = threading.Thread(target=held)
        th.start()
        time.sleep(0.3)
        t0 = time.monotonic()
        assert topo.brokers[0].stop() == 0
        th.join(10)
        assert "resp" in got and got["resp"].code == ResponseCode.PULL_NOT_FOUND
        assert time.monotonic() - t0 < 10


def test_shutdown_stops_accepting_before_held_pulls_are_answered(tmp_path):
    """An in-process broker: once shutdown begins no new connection or request is accepted, while a pull held
    on a connection opened before is still answered."""
    port = free_port()
    controller = make_controller(tmp_path, port=port)
    loop = asyncio.new_event_loop()
    seen = {}

    async def scenario():
        await controller.start()
        c = RemotingClient("127.0.0.1", port, timeout_s=10)
        early = socket.create_connection(("127.0.0.1", port))  # open, idle until shutdown has begun
        try:
            assert (await loop.run_in_executor(None, c.invoke, send_request("Bye", b"x"))).code == 0
            held = loop.run_in_executor(None, lambda: c.invoke(pull_request("Bye", 1, 0, suspend_ms=20_000), 30))
            deadline = loop.time() + 10
            while controller.hold_service.held_count() == 0 or len(controller.server.connections) < 2:
                assert loop.time() < deadline, "the pull was not held"
                await asyncio.sleep(0.01)
            wake_held_pulls = controller.hold_service.shutdown

            def probe_then_wake():  # runs on the broker's loop when shutdown wakes the held pulls
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=2).close()
                    seen["new connection"] = "accepted"
                except ConnectionRefusedError:
                    seen["new connection"] = "refused"
                early.sendall(encode(send_request("Late", b"late")))  # read by the loop after this returns
                wake_held_pulls()

            controller.hold_service.shutdown = probe_then_wake
            await controller.shutdown()
            resp = await held
        finally:
            c.close()
        early.settimeout(5)
        try:
            seen["late reply"] = early.recv(100)
        finally:
            early.close()
        return resp

    try:
        resp = loop.run_until_complete(asyncio.wait_for(scenario(), 60))
    finally:
        loop.close()
    assert resp.code == ResponseCode.PULL_NOT_FOUND, "the held pull is answered"
    assert seen["new connection"] == "refused"
    assert seen["late reply"] == b"", "a request that arrived after shutdown began is not served"


def test_bad_config_files_are_reported_with_line_numbers(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=b\nlistenPort=notaport\n")
    p = subprocess.run([sys.executable, "-m", "reference_broker", "broker", "-c", str(conf)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "broker.conf:2: listenPort" in p.stderr
    conf.write_text("brokerName=b\nstorePathRootDirr=/tmp/x\n")
    p = subprocess.run([sys.executable, "-m", "reference_broker", "broker", "-c", str(conf)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "unknown key" in p.stderr
    p = subprocess.run([sys.executable, "-m", "reference_broker", "broker", "-c", str(tmp_path / "missing.conf")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "not found" in p.stderr


def test_garbage_topics_json_stops_the_broker_clearly(tmp_path):
    # A garbage topics.json alone is not fatal (ConfigManager.load falls back to the .bak, and no .bak is a
    # fresh start, as in RocketMQ); a garbage .bak as well is.
    store = tmp_path / "store"
    (store / "config").mkdir(parents=True)
    (store / "config" / "topics.json").write_text("{garbage")
    (store / "config" / "topics.json.bak").write_text("{garbage")
    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerName=b\nlistenPort={free_port()}\nstorePathRootDir={store}\n")
    p = subprocess.run([sys.executable, "-m", "reference_broker", "broker", "-c", str(conf)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    assert f"the broker cannot start: cannot load {store / 'config' / 'topics.json'};" in p.stderr


def test_delay_levels_fire_in_order_and_survive_a_restart(tmp_path):
    """Delayed messages reach their real topic after their delay, exactly once, across a clean restart."""
    conf = {"messageDelayLevel": "300ms 600ms 900ms"}
    with Topology(tmp_path / "d", broker_conf=conf) as topo:
        b = topo.brokers[0]
        sent_at = {}
        with _client(topo) as c:
            for i in range(30):
                level = 1 + i % 3
                r = c.invoke(send_request("Delayed", b"d%d" % i, queue_id=0,
                                          props={"DELAY": str(level), "KEYS": f"k{i}"}))
                assert r.code == ResponseCode.SUCCESS
                sent_at[b"d%d" % i] = (time.monotonic(), level)
            # nothing is visible in the real topic yet: it sits in SCHEDULE_TOPIC_XXXX
            assert _pull_all(c, "Delayed", 0) == []
        time.sleep(0.4)
        assert b.stop() == 0  # a restart while deliveries are under way
        delay_offsets = (b.store_root / "config" / "delayOffset.json").read_text()
        assert "offsetTable" in delay_offsets
        b.start()
        with _client(topo) as c:
            _wait(lambda: len(_pull_all(c, "Delayed", 0)) >= 30, timeout_s=20)
            time.sleep(1.5)  # anything duplicated would show up by now
            got = _pull_all(c, "Delayed", 0)
        bodies = [m.body for m in got]
        assert sorted(bodies) == sorted(sent_at), "every delayed message exactly once"
        for m in got:
            assert "DELAY" not in m.properties, "DELAY is cleared on delivery"
            assert m.properties["REAL_TOPIC"] == "Delayed"  # kept, as messageTimeup keeps it
            assert m.store_timestamp - m.born_timestamp >= 300 * (1 + int(m.body[1:]) % 3) - 50
        # within one level, delivery keeps the send order
        for level in (1, 2, 3):
            seq = [int(b[1:]) for b in bodies if 1 + int(b[1:]) % 3 == level]
            assert seq == sorted(seq)


def test_transient_store_pool_serves_committed_sends_and_keeps_them_across_a_clean_restart(tmp_path):
    """transientStorePoolEnable=true on a real broker: sends are acknowledged when staged, readable once the
    commit thread has written them (commitIntervalCommitLog), and a SIGTERM commits the rest before exit."""
    conf = {"transientStorePoolEnable": "true", "commitIntervalCommitLog": "50"}
    with Topology(tmp_path / "tsp", broker_conf=conf) as topo:
        b = topo.brokers[0]
        with _client(topo) as c:
            cfg = c.invoke(create_request(RequestCode.GET_BROKER_CONFIG, {}))
            assert "transientStorePoolEnable=true" in cfg.body.decode()
            for i in range(50):
                assert c.invoke(send_request("Pool", b"p%d" % i)).code == ResponseCode.SUCCESS
            _wait(lambda: len(_pull_all(c, "Pool", 0)) == 50)
            for i in range(50, 60):  # staged, and maybe not yet committed when the broker is stopped
                assert c.invoke(send_request("Pool", b"p%d" % i)).code == ResponseCode.SUCCESS
        assert b.stop() == 0
        assert not (b.store_root / "abort").exists()
        b.start()
        with _client(topo) as c:
            assert [m.body for m in _pull_all(c, "Pool", 0)] == [b"p%d" % i for i in range(60)]
