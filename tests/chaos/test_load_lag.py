"""The chaos load keeps its consumer close behind (LoadSpec.max_lag, per queue): with the consumer stopped, the producer
stops max_lag sends ahead and goes on once the consumer is back. Real broker, real client."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from chaos.experiment import wait_route
from chaos.load import LoadSpec, Workload
from harness.launcher import Topology
from harness.records import RunRecord
from reference_broker.tools import admin

pytestmark = pytest.mark.e2e


def _wait(cond, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def test_the_producer_waits_for_a_consumer_more_than_max_lag_behind(tmp_path: Path) -> None:
    spec = LoadSpec(topic="LagTopic", queues=2, msg_size=128, in_flight=8, max_lag=100)
    with Topology(tmp_path / "topo") as topo:
        broker = topo.brokers[0]
        admin.update_topic(topo.namesrv_addr, spec.topic, spec.queues, spec.queues, broker_addr=broker.addr)
        wait_route(topo.namesrv_addr, spec.topic)
        record = RunRecord.create(tmp_path / "runs", "lag", {}, ["pytest"])
        w = Workload(topo.namesrv_addr, spec, record, record.clock)
        try:
            w.start()
            assert _wait(lambda: w.deliveries > 0, 30), "nothing delivered"
            w.stop_consuming()
            # Held: acknowledged sends stop growing at about max_lag (+ the window in flight) past the consumer.
            assert _wait(lambda: w.lag_held_s > 0.5, 30), "the producer never waited for the consumer"
            held_at = w.sent_ok
            time.sleep(3.0)
            # Held: only the one-a-second probe sends go out (they time the broker's return after a fault).
            assert w.sent_ok - held_at <= 3 * spec.in_flight, "the producer went on while the consumer was away"
            assert w.sent_ok > held_at, "no probe send while held"
            assert w.consumer_lag() <= spec.max_lag + spec.in_flight
            w.start_consumer()
            assert _wait(lambda: w.sent_ok > held_at + spec.max_lag, 30), "the producer did not resume"
        finally:
            w.close()
            record.finish()
