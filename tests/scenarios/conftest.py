"""Shared fixtures: one real name server + broker for the driver and sampler tests of a module."""

from __future__ import annotations

import os

import pytest

from harness.driver import RocketMQDriver
from harness.launcher import Topology

# Small commit-log files: each topology reserves its first file up front.
SMALL_BROKER = {"mappedFileSizeCommitLog": str(64 << 20)}


@pytest.fixture(scope="module")
def topo(tmp_path_factory):
    with Topology(tmp_path_factory.mktemp("topo"), broker_conf=SMALL_BROKER) as t:
        yield t


@pytest.fixture
def driver(topo, request):
    d = RocketMQDriver(topo.namesrv_addr, instance=f"test-{request.node.name[:40]}-{os.getpid()}",
                       send_timeout_s=3.0, rebalance_interval_s=1.0, poll_name_server_interval_s=1.0)
    yield d
    d.stop()
