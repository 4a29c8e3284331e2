"""MessageSelector.by_sql end to end on a real name server and two real reference brokers — broker-a with
enablePropertyFilter=true, broker-b without (the round itself: sql92_flow.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.launcher import Topology
from reference_broker.client import ClientConfig
from tests.client import sql92_flow
from tests.client.helpers import create_topic

pytestmark = pytest.mark.e2e

N = 20


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topology]:
    with Topology(tmp_path_factory.mktemp("sql92"), brokers=0) as topo:
        topo.add_broker("broker-a", {"enablePropertyFilter": "true"})
        yield topo


def _cfg(topo: Topology, name: str) -> ClientConfig:
    return ClientConfig(topo.namesrv_addr, name, poll_name_server_interval_s=1.0, rebalance_interval_s=1.0,
                        persist_consumer_offset_interval_s=1.0)


def test_push_and_pull_consumers_get_exactly_what_the_selector_matches(brokers: Topology) -> None:
    create_topic(brokers, "SqlPush", 2)
    sql92_flow.send(_cfg(brokers, "p"), "SqlPush", N)
    sql92_flow.push_receives_the_selected(_cfg(brokers, "c"), "SqlPush", "SqlPushGroup", N)
    sql92_flow.pull_pulls_the_selected(_cfg(brokers, "q"), "SqlPush", N)


def test_a_malformed_selector_is_refused_when_the_push_consumer_starts(brokers: Topology) -> None:
    create_topic(brokers, "SqlBad", 1)
    sql92_flow.start_is_refused(_cfg(brokers, "bad"), "SqlBad", "SqlBadGroup", *sql92_flow.MALFORMED)


def test_a_broker_without_property_filtering_refuses_the_push_consumer(tmp_path: Path) -> None:
    with Topology(tmp_path) as topo:
        create_topic(topo, "SqlOff", 1)
        sql92_flow.start_is_refused(_cfg(topo, "off"), "SqlOff", "SqlOffGroup", *sql92_flow.NOT_ENABLED)
