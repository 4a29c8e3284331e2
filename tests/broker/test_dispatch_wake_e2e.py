"""A broker whose dispatch idles long (``dispatchIdleIntervalMillis=5000``) still answers a held pull as soon as
its message is sent: holding the pull makes dispatch look every 1 ms (store/reput.py, docs/dispatch.md). Not a
latency figure (BENCHMARKS.md has those): the pull must be answered before the idle interval could have ended."""

from __future__ import annotations

import time

import pytest

from harness.launcher import Topology
from reference_broker.common.record import decode_messages
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import ResponseCode
from tests.broker.broker_helpers import held_pull_answered, pull_request, send_request

pytestmark = pytest.mark.e2e

IDLE_MS = 5000


def test_a_held_pull_is_answered_before_a_long_idle_interval_ends(tmp_path) -> None:
    with Topology(tmp_path / "topo", broker_conf={"dispatchIdleIntervalMillis": str(IDLE_MS)}) as topo, \
            RemotingClient("127.0.0.1", topo.brokers[0].port, timeout_s=10) as c:
        assert c.invoke(send_request("Idle", b"first")).code == ResponseCode.SUCCESS
        # sent, then pulled at once: the pull has what is written dispatched before it reads (a bounded wait,
        # which a busy machine may outlast: then the next pull has it)
        deadline = time.monotonic() + IDLE_MS / 1000 / 2
        while (first := c.invoke(pull_request("Idle", 0, 0))).code != ResponseCode.SUCCESS:
            assert time.monotonic() < deadline, "the sent message is not pullable before the idle interval ends"
            time.sleep(0.05)
        assert [m.body for m in decode_messages(first.body)] == [b"first"]
        resp, answered_after_send = held_pull_answered(c, "Idle", 1, b"second")
        assert resp.code == ResponseCode.SUCCESS
        assert [m.body for m in decode_messages(resp.body)] == [b"second"]
        assert answered_after_send < IDLE_MS / 1000 / 2, answered_after_send
