"""PermName bits and their string form."""

from __future__ import annotations

import pytest

from reference_broker.common.perm import (
    PERM_INHERIT,
    PERM_PRIORITY,
    PERM_READ,
    PERM_WRITE,
    is_inherited,
    is_readable,
    is_writeable,
    perm_to_string,
)


def test_bits_are_rocketmqs() -> None:
    assert (PERM_PRIORITY, PERM_READ, PERM_WRITE, PERM_INHERIT) == (8, 4, 2, 1)


@pytest.mark.parametrize(("perm", "text", "r", "w", "x"), [
    (0, "---", False, False, False),
    (PERM_READ, "R--", True, False, False),
    (PERM_WRITE, "-W-", False, True, False),
    (PERM_READ | PERM_WRITE, "RW-", True, True, False),
    (PERM_READ | PERM_WRITE | PERM_INHERIT, "RWX", True, True, True),
    (PERM_INHERIT, "--X", False, False, True),
])
def test_predicates_and_string(perm: int, text: str, r: bool, w: bool, x: bool) -> None:
    assert (is_readable(perm), is_writeable(perm), is_inherited(perm)) == (r, w, x)
    assert perm_to_string(perm) == text
