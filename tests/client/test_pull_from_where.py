"""Where a push consumer starts on a queue it has just been given (computePullFromWhere)."""

from __future__ import annotations

import pytest

from reference_broker.client.message import ConsumeFromWhere
from reference_broker.client.rebalance import pull_from_where

LAST = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
TIME = ConsumeFromWhere.CONSUME_FROM_TIMESTAMP


def decide(stored: int, where: ConsumeFromWhere, retry: bool = False) -> int:
    return pull_from_where(stored, where, retry, lambda: 500, lambda: 120)


@pytest.mark.parametrize("where", [LAST, FIRST, TIME])
def test_a_stored_offset_wins(where: ConsumeFromWhere) -> None:
    assert decide(42, where) == 42
    assert decide(0, where) == 0


@pytest.mark.parametrize(("where", "retry", "expected"), [
    (LAST, False, 500),  # new group: the queue's max offset
    (LAST, True, 0),  # ... but a retry queue from its start
    (FIRST, False, 0),
    (FIRST, True, 0),
    (TIME, False, 120),  # searched by consume_timestamp
    (TIME, True, 500),
])
def test_new_group_starts_where_configured(where: ConsumeFromWhere, retry: bool, expected: int) -> None:
    assert decide(-1, where, retry) == expected


@pytest.mark.parametrize("where", [LAST, FIRST, TIME])
def test_broker_unreachable_means_not_now(where: ConsumeFromWhere) -> None:
    assert decide(-2, where) == -1
