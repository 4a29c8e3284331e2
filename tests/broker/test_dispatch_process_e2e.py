"""``dispatchInSeparateProcess=true`` through real processes: a name server, a broker, and the broker's dispatch
process (store/dispatchd.py), which writes the consume queues and the index while the broker reads them.

- the dispatch process dies with its broker on kill -9, and the restarted broker loses nothing acknowledged:
  every message is pullable once and found by key;
- a dispatch process killed alone is restarted by the broker, and every message is pullable exactly once;
- a held pull is answered when its message arrives, not at the hold service's next check.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.launcher import Topology
from reference_broker.common.record import decode_messages
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import ResponseCode
from reference_broker.tools import admin
from tests.broker.broker_helpers import held_pull_answered, pull_request, send_request

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

CONF = {"dispatchInSeparateProcess": "true", "flushConsumeQueueThoroughInterval": "1000"}
QUEUES = 4


@pytest.fixture
def topo(tmp_path: Path) -> Iterator[Topology]:
    with Topology(tmp_path / "topo", broker_conf=CONF) as t:
        yield t


def _status(topo: Topology) -> dict[str, str]:
    return admin.broker_status(topo.brokers[0].addr)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait(cond, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out: {what}"
        time.sleep(0.05)


def _send(c: RemotingClient, topic: str, bodies: list[bytes], keyed: bool = False) -> None:
    for i, body in enumerate(bodies):
        props = {"KEYS": body.decode()} if keyed else None
        r = c.invoke(send_request(topic, body, queue_id=i % QUEUES, props=props))
        assert r.code == ResponseCode.SUCCESS, r.remark


def _pull_all(c: RemotingClient, topic: str, expect: int, timeout_s: float = 20.0) -> list[bytes]:
    """Every message of the topic's queues, in queue order, once ``expect`` of them are pullable."""
    deadline = time.monotonic() + timeout_s
    while True:
        got: list[bytes] = []
        for q in range(QUEUES):
            offset = 0
            while True:
                r = c.invoke(pull_request(topic, q, offset, max_nums=32))
                if r.code != ResponseCode.SUCCESS:
                    break
                msgs = decode_messages(r.body)
                assert [m.queue_offset for m in msgs] == list(range(offset, offset + len(msgs)))
                got += [m.body for m in msgs]
                offset += len(msgs)
        if len(got) >= expect or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def test_kill9_of_the_broker_takes_its_dispatch_process_and_loses_nothing(topo: Topology) -> None:
    b = topo.brokers[0]
    bodies = [f"k9-{i:04d}".encode() for i in range(300)]
    with RemotingClient("127.0.0.1", b.port, timeout_s=10) as c:
        _send(c, "DpKill9", bodies[:250], keyed=True)
        time.sleep(2.5)  # a thorough flush round: the checkpoint's logics offset moves past these
        _send(c, "DpKill9", bodies[250:], keyed=True)
    child = int(_status(topo)["dispatchProcessPid"])
    assert child > 0 and _alive(child)
    b.kill()
    _wait(lambda: not _alive(child), 10, "the dispatch process dies with its broker")
    assert (b.store_root / "abort").exists()
    b.start()
    status = _status(topo)
    assert int(status["dispatchProcessPid"]) not in (0, child)
    with RemotingClient("127.0.0.1", b.port, timeout_s=10) as c:
        got = _pull_all(c, "DpKill9", len(bodies))
    assert sorted(got) == bodies  # each once
    ns = topo.namesrv_addr
    missing = [b_ for b_ in bodies if not admin.query_msg_by_key(ns, "DpKill9", b_.decode())]
    assert missing == []


def test_a_dispatch_process_killed_alone_is_restarted_and_every_message_is_pullable_once(topo: Topology) -> None:
    b = topo.brokers[0]
    bodies = [f"solo-{i:04d}".encode() for i in range(600)]
    stop = threading.Event()
    killed: list[int] = []

    def killer() -> None:  # kill -9 the dispatch process while messages are being sent
        time.sleep(0.3)
        pid = int(_status(topo)["dispatchProcessPid"])
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)
        stop.set()

    t = threading.Thread(target=killer)
    with RemotingClient("127.0.0.1", b.port, timeout_s=10) as c:
        t.start()
        _send(c, "DpSolo", bodies, keyed=True)
        t.join(30)
        assert killed, "the dispatch process was not killed"
        _wait(lambda: int(_status(topo)["dispatchProcessRestarts"]) >= 1, 20, "the broker restarts it")
        status = _status(topo)
        assert int(status["dispatchProcessPid"]) not in (0, killed[0])
        assert _alive(int(status["dispatchProcessPid"]))
        got = _pull_all(c, "DpSolo", len(bodies))
    assert sorted(got) == bodies  # none lost, none twice
    assert status["dispatchErrorCount"] == "0"
    missing = [b_ for b_ in bodies[::50] if not admin.query_msg_by_key(topo.namesrv_addr, "DpSolo", b_.decode())]
    assert missing == []


def test_a_held_pull_is_answered_when_its_message_arrives(tmp_path: Path) -> None:
    idle_ms = 5000  # the child's cadence while nothing waits: a held pull must make it look every 1 ms
    conf = {**CONF, "dispatchIdleIntervalMillis": str(idle_ms)}
    with Topology(tmp_path / "topo", broker_conf=conf) as topo, \
            RemotingClient("127.0.0.1", topo.brokers[0].port, timeout_s=10) as c:
        assert c.invoke(send_request("DpHeld", b"first")).code == ResponseCode.SUCCESS
        assert _pull_all(c, "DpHeld", 1, timeout_s=10) == [b"first"]
        resp, answered_after_send = held_pull_answered(c, "DpHeld", 1, b"second")
    assert resp.code == ResponseCode.SUCCESS
    assert [m.body for m in decode_messages(resp.body)] == [b"second"]
    # the hold service's own check (every 5 s with long polling) or the idle cadence would take seconds
    assert answered_after_send < idle_ms / 1000 / 2, answered_after_send
