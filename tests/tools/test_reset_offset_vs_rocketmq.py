"""The rewinding rounds (rewind_flow.py) with Apache RocketMQ 4.9.8's name server and broker: our admin tool
and our client against its INVOKE_BROKER_TO_RESET_OFFSET, its RESET_CONSUMER_CLIENT_OFFSET (fastjson's
object-keyed ResetOffsetBody) and its CONSUMER_NOT_ONLINE answer. Skipped, with the reason, without the
distribution or java."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.launcher import Topology
from tests.client.helpers import create_topic
from tests.tools import rewind_flow

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def rmq(tmp_path_factory: pytest.TempPathFactory, rocketmq_home: Path) -> Iterator[Topology]:
    with Topology(tmp_path_factory.mktemp("rmq-rewind"), impl="rocketmq", rocketmq_home=rocketmq_home,
                  broker_conf={"mappedFileSizeCommitLog": 64 << 20}) as topo:
        yield topo
        topo.kill()


def test_backwards_while_the_group_consumes(rmq: Topology) -> None:
    create_topic(rmq, "RewindBack", 2)
    rewind_flow.backwards_with_a_live_consumer(rmq, "RewindBack")


def test_forwards_past_a_slow_consumer(rmq: Topology) -> None:
    create_topic(rmq, "RewindAhead", 1)
    rewind_flow.forwards_past_a_slow_consumer(rmq, "RewindAhead")


def test_with_nobody_online_the_stored_offsets_move(rmq: Topology) -> None:
    create_topic(rmq, "RewindStored", 2)
    rewind_flow.with_nobody_online(rmq, "RewindStored")
