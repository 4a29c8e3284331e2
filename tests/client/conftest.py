"""Shared fixtures for the client's end-to-end tests: one real name server + broker per test module."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from reference_broker.client.config import ClientConfig

_names = itertools.count()


@pytest.fixture(scope="module")
def topo(tmp_path_factory):
    from harness.launcher import Topology

    with Topology(tmp_path_factory.mktemp("topo")) as t:
        yield t


@pytest.fixture
def cfg(topo) -> Callable[..., ClientConfig]:
    """A ClientConfig with its own instance name (so each client gets its own MQClientInstance) and short
    route/rebalance intervals, so tests need not wait for RocketMQ's 20-30 s defaults."""

    def make(name: str | None = None, **overrides: float) -> ClientConfig:
        settings = {"poll_name_server_interval_s": 1.0, "rebalance_interval_s": 1.0,
                    "persist_consumer_offset_interval_s": 1.0, "heartbeat_broker_interval_s": 5.0}
        settings.update(overrides)
        return ClientConfig(topo.namesrv_addr, name or f"t{next(_names)}", **settings)  # type: ignore[arg-type]

    return make

