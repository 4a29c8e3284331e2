"""reference_broker.common.start_phases: the store's start timed phase by phase, and its runtime-info text."""

from __future__ import annotations

import time

import pytest

from reference_broker.common.start_phases import StartPhases, parse_runtime_value


def test_phases_keep_start_order_add_up_and_round_trip_through_the_runtime_text() -> None:
    ph = StartPhases()
    with ph.phase("b"):
        time.sleep(0.002)
    with ph.phase("a"):
        pass
    with ph.phase("b"):
        time.sleep(0.002)
    assert list(ph.seconds) == ["b", "a"]
    assert ph.seconds["b"] >= 0.004
    back = parse_runtime_value(ph.runtime_value())
    assert list(back) == ["b", "a"] and abs(back["b"] - ph.seconds["b"]) < 0.0001


def test_a_phase_that_raises_is_still_timed() -> None:
    ph = StartPhases()
    with pytest.raises(OSError, match="boom"), ph.phase("x"):
        raise OSError("boom")
    assert "x" in ph.seconds


def test_malformed_runtime_text_is_left_out_not_raised() -> None:
    assert parse_runtime_value("") == {}
    assert parse_runtime_value("a:1.5,junk,b:x,:3,c:2") == {"a": 0.0015, "c": 0.002}
