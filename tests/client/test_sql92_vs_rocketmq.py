"""The client's SQL92 round (sql92_flow.py) against Apache RocketMQ 4.9.8's name server and brokers: the same
selections, and the same refusals at start, as on the reference broker (test_e2e_sql92.py). Skipped, with
the reason, without the distribution or java."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.launcher import Topology
from reference_broker.client import ClientConfig
from reference_broker.tools import admin
from tests.client import sql92_flow
from tests.client.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

N = 20


@pytest.fixture(scope="module")
def rmq(tmp_path_factory: pytest.TempPathFactory, rocketmq_home: Path) -> Iterator[Topology]:
    with Topology(tmp_path_factory.mktemp("rmq-sql92"), brokers=0, impl="rocketmq", rocketmq_home=rocketmq_home,
                  broker_conf={"mappedFileSizeCommitLog": 64 << 20}) as topo:
        topo.add_broker("broker-a", {"enablePropertyFilter": "true"})
        topo.add_broker("broker-b", {"enablePropertyFilter": "false"})
        yield topo
        topo.kill()


def _cfg(topo: Topology, name: str) -> ClientConfig:
    return ClientConfig(topo.namesrv_addr, name, poll_name_server_interval_s=1.0, rebalance_interval_s=1.0,
                        persist_consumer_offset_interval_s=1.0)


def _topic(topo: Topology, topic: str, broker: int) -> None:
    """Create the topic on one broker and wait for its route: a producer without one sends by the default
    topic's route (4 queues), which 4.9.8 refuses for a topic it knows with 2."""
    admin.update_topic(topo.namesrv_addr, topic, 2, 2, broker_addr=topo.brokers[broker].addr)

    def routed() -> bool:
        try:
            return bool(admin.read_queues(topo.namesrv_addr, topic))
        except admin.AdminError:
            return False

    wait_for(routed, 30, f"the route of {topic}")


def test_our_client_selects_with_sql92_on_rocketmq_498(rmq: Topology) -> None:
    _topic(rmq, "SqlPush", 0)
    sql92_flow.send(_cfg(rmq, "p"), "SqlPush", N)
    sql92_flow.push_receives_the_selected(_cfg(rmq, "c"), "SqlPush", "SqlPushGroup", N)
    sql92_flow.pull_pulls_the_selected(_cfg(rmq, "q"), "SqlPush", N)


def test_rocketmq_498_refuses_a_malformed_selector_at_start(rmq: Topology) -> None:
    _topic(rmq, "SqlBad", 0)
    sql92_flow.start_is_refused(_cfg(rmq, "bad"), "SqlBad", "SqlBadGroup", *sql92_flow.MALFORMED)


def test_rocketmq_498_without_property_filtering_refuses_the_push_consumer(rmq: Topology) -> None:
    _topic(rmq, "SqlOff", 1)
    sql92_flow.start_is_refused(_cfg(rmq, "off"), "SqlOff", "SqlOffGroup", *sql92_flow.NOT_ENABLED)
