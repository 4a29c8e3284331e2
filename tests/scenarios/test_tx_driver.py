"""The transactions scenario's plan per key (scenarios/tx_driver.py): the mix's fractions, read from the key
alone, and a mix that does not add up refused."""

from __future__ import annotations

from collections import Counter

import pytest

from scenarios.tx_driver import DEFAULT_MIX, PLANS, parse_mix, plan_of


def test_the_plans_follow_the_mix() -> None:
    mix = parse_mix("commit=0.4,rollback=0.2,unknown_commit=0.2,unknown_rollback=0.1,never=0.1")
    counts = Counter(plan_of(f"t-w0-{i:09d}", mix) for i in range(20_000))
    for plan in PLANS:
        assert abs(counts[plan] / 20_000 - mix[plan]) < 0.02, (plan, counts)


def test_a_key_has_one_plan_whoever_asks() -> None:
    mix = parse_mix(DEFAULT_MIX)
    assert all(plan_of(k, mix) == plan_of(k, dict(mix)) for k in (f"x-{i}" for i in range(100)))
    only = parse_mix("unknown_rollback=1")
    assert {plan_of(f"k{i}", only) for i in range(100)} == {"unknown_rollback"}


@pytest.mark.parametrize("text", ["commit=0.5", "commit=0.5,rollback=0.6", "commits=1", "commit=x", "commit"])
def test_a_bad_mix_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="--tx-mix"):
        parse_mix(text)
