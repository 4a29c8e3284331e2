"""The big-backlog parts of the backlog scenario: the disk fit, the head readers' histogram, the size options."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from scenarios.backlog_control import MIN_FREE_SHARE, fit_backlog
from scenarios.head_latency import LatencyHistogram, merge_stages
from scenarios.options import OptionError, Settings, settings_from

GiB = 1 << 30


def test_a_backlog_that_fits_is_kept() -> None:
    assert fit_backlog(4 * GiB, 250 * GiB, 60 * GiB) == (4 * GiB, None)


def test_a_backlog_that_would_fill_the_disk_is_scaled_down_and_says_so() -> None:
    total, free = 100 * GiB, 20 * GiB
    fits, why = fit_backlog(8 * GiB, total, free)
    assert why is not None and "scaled down from 8.00 GiB" in why
    assert 0 < fits < 8 * GiB
    assert free - 1.5 * fits >= MIN_FREE_SHARE * total - 1  # what the run writes leaves 15 % free


def test_no_room_at_all_is_zero() -> None:
    assert fit_backlog(GiB, 100 * GiB, 10 * GiB)[0] == 0


def test_histogram_quantiles_are_within_two_percent_and_merge() -> None:
    a, b = LatencyHistogram(), LatencyHistogram()
    for ms in range(1, 1001):
        (a if ms % 2 else b).add(ms * 1_000_000)
    merged = merge_stages([{"drain": a.to_json()}, {"drain": b.to_json()}])["drain"]
    assert merged.n == 1000 and merged.max_ns == 1000 * 1_000_000
    for q, exact in ((0.5, 500), (0.99, 990)):
        got = merged.quantile_ms(q)
        assert got is not None and exact <= got <= exact * 1.02
    assert merged.summary()["max_ms"] == 1000.0
    assert LatencyHistogram().summary()["p99_ms"] is None


def test_sizes_are_read_with_units_from_the_command_line_and_the_environment() -> None:
    s = settings_from(SimpleNamespace(backlog_bytes="4GiB", memory_max="1GiB"), Settings())
    assert s.backlog_bytes == 4 * GiB and s.memory_max == GiB
    with pytest.raises(OptionError, match="memory_max"):
        settings_from(SimpleNamespace(memory_max="a lot"), Settings())
