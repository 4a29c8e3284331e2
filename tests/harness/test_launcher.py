"""harness/launcher.py: a topology stops every broker it started, those added after its start included."""

from __future__ import annotations

import pytest

from harness.launcher import Topology

pytestmark = pytest.mark.e2e


def test_a_broker_added_later_is_stopped_with_the_topology(tmp_path):
    with Topology(tmp_path / "topo", brokers=0) as topo:
        broker = topo.add_broker("late")
        assert broker.alive and topo.brokers == [broker]
    assert not broker.alive
    assert topo.namesrv is not None and not topo.namesrv.alive
