"""admin resetOffsetByTime on a real name server, broker and push consumers (the rounds: rewind_flow.py):
backwards and forwards with the group online (INVOKE_BROKER_TO_RESET_OFFSET, RESET_CONSUMER_CLIENT_OFFSET), and
with nobody online (the stored offsets)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.launcher import Topology
from tests.client.helpers import create_topic
from tests.tools import rewind_flow

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def topo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topology]:
    with Topology(tmp_path_factory.mktemp("rewind")) as t:
        yield t


def test_backwards_while_the_group_consumes(topo: Topology) -> None:
    create_topic(topo, "RewindBack", 2)
    rewind_flow.backwards_with_a_live_consumer(topo, "RewindBack")


def test_forwards_past_a_slow_consumer(topo: Topology) -> None:
    create_topic(topo, "RewindAhead", 1)
    rewind_flow.forwards_past_a_slow_consumer(topo, "RewindAhead")


def test_with_nobody_online_the_stored_offsets_move(topo: Topology) -> None:
    create_topic(topo, "RewindStored", 2)
    rewind_flow.with_nobody_online(topo, "RewindStored")
