"""RunInfo crosses locust's message bus as JSON; counts add up over processes."""

import pytest

from scenarios.contract import Counts, Phase, RunInfo
from scenarios.hub import run_command


def test_run_info_round_trip():
    info = RunInfo(run_dir="/r/x", run_id="20250101T000000-t-abcdef", tag="abcdef", scenario="t", namesrv="h:1",
                   group="g", phases=(Phase("p", (("a", 1), ("b", 2))),), processes=2, from_timestamp_ms=5)
    back = RunInfo.from_json(info.to_json())
    assert back == info
    assert back.all_topics == ["a", "b"] and back.phases[0].queues == 3


def test_counts_total():
    a = Counts("w0", attempted=3, ok=2, fail=1, received=2, in_flight=1, producing=True, finished=True)
    b = Counts("w1", attempted=1, unknown=1, received=1, error="boom", finished=False)
    t = Counts.total([a, b])
    assert (t.attempted, t.ok, t.fail, t.unknown, t.received, t.in_flight) == (4, 2, 1, 1, 3, 1)
    assert t.producing and not t.finished and t.error == "boom"
    assert Counts.from_dict({**a.to_dict(), "future_field": 1}) == a


def test_send_rate_spans_first_send_to_last_ack():
    c = Counts.total([Counts("w0", ok=100, first_send_ns=1_000_000_000, last_ack_ns=2_000_000_000),
                      Counts("w1", ok=100, first_send_ns=1_500_000_000, last_ack_ns=3_000_000_000)])
    assert (c.first_send_ns, c.last_ack_ns) == (1_000_000_000, 3_000_000_000)
    assert c.send_rate == 100.0
    assert Counts().send_rate is None


def test_only_agent_commands_run():
    with pytest.raises(ValueError, match="unknown command"):
        run_command(None, "__init__", {})  # type: ignore[arg-type]
