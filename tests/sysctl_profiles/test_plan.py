"""Checking targets, planning writes and restores (pure; no /proc/sys)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sysctl_profiles.errors import ProfileError
from sysctl_profiles.plan import (
    COUPLED_PAIRS,
    PARTNER,
    Change,
    DiffStatus,
    Reading,
    Unavailable,
    check_targets,
    diff_rows,
    keys_to_save,
    mismatches,
    plan_apply,
    restore_plan,
)

IN_FORCE: dict[str, Reading] = {
    "vm.swappiness": "60",
    "vm.dirty_ratio": "20",
    "vm.dirty_bytes": "0",
    "vm.lowmem_reserve_ratio": "256 256 32 0 0",
    "vm.numa_zonelist_order": "Node",
    "vm.drop_caches": Unavailable.UNREADABLE,
}


def test_check_returns_values_in_force_of_targets() -> None:
    assert check_targets({"vm.swappiness": "1", "vm.dirty_ratio": None}, IN_FORCE) == {
        "vm.swappiness": "60",
        "vm.dirty_ratio": "20",
    }


@pytest.mark.parametrize(
    ("targets", "message"),
    [
        ({"vm.no_such_key": "1"}, "unknown key vm.no_such_key"),
        ({"vm.drop_caches": "1"}, "vm.drop_caches is an action"),
        ({"vm.swappiness": "abc"}, "malformed value for vm.swappiness"),
        ({"vm.swappiness": "1 2"}, "malformed value for vm.swappiness"),  # the kernel would take "1" silently
        ({"vm.swappiness": "1.5"}, "expected an integer"),
        ({"vm.lowmem_reserve_ratio": "256 256 32"}, "expected 5 integers"),
        ({"vm.dirty_bytes": "0"}, "set vm.dirty_ratio instead"),
        ({"vm.dirty_bytes": "4096000", "vm.dirty_ratio": "10"}, "exclude each other"),
    ],
)
def test_check_rejects(targets: dict[str, str | None], message: str) -> None:
    with pytest.raises(ProfileError, match="nothing was changed") as err:
        check_targets(targets, IN_FORCE)
    assert message in str(err.value)


def test_check_accepts_words_where_the_kernel_has_words_and_keep_on_any_key() -> None:
    check_targets({"vm.numa_zonelist_order": "Zone", "vm.dirty_bytes": None, "vm.dirty_ratio": "5"}, IN_FORCE)


def test_check_lists_every_problem() -> None:
    with pytest.raises(ProfileError) as err:
        check_targets({"vm.nope": "1", "vm.swappiness": "x"}, IN_FORCE)
    assert "vm.nope" in str(err.value) and "vm.swappiness" in str(err.value)


def test_plan_skips_values_in_force_comparing_whitespace_normalised() -> None:
    current = {"vm.swappiness": "60", "vm.lowmem_reserve_ratio": "256 256 32 0 0", "vm.dirty_ratio": "20"}
    targets: dict[str, str | None] = {
        "vm.lowmem_reserve_ratio": "256\t256  32 0 0",
        "vm.swappiness": "1",
        "vm.dirty_ratio": None,
    }
    assert plan_apply(targets, current) == [Change("vm.swappiness", "60", "1")]


def test_plan_normalises_multi_field_targets() -> None:
    changes = plan_apply({"vm.lowmem_reserve_ratio": "32\t32 32 0 0"}, {"vm.lowmem_reserve_ratio": "256 256 32 0 0"})
    assert changes == [Change("vm.lowmem_reserve_ratio", "256 256 32 0 0", "32 32 32 0 0")]


def test_keys_to_save_include_coupled_partners_once() -> None:
    changes = [Change("vm.dirty_bytes", "0", "1"), Change("vm.swappiness", "1", "2"), Change("vm.dirty_ratio", "", "")]
    assert keys_to_save(changes) == ["vm.dirty_bytes", "vm.dirty_ratio", "vm.swappiness"]


def test_restore_nothing_when_all_in_force() -> None:
    saved = {"vm.swappiness": "60", "vm.dirty_bytes": "0", "vm.dirty_ratio": "20"}
    assert restore_plan(saved, saved) == []


def test_restore_pair_writes_only_the_non_zero_member() -> None:
    saved = {"vm.dirty_bytes": "0", "vm.dirty_ratio": "20", "vm.swappiness": "60"}
    now = {"vm.dirty_bytes": "4096000", "vm.dirty_ratio": "0", "vm.swappiness": "1"}
    assert restore_plan(saved, now) == [("vm.dirty_ratio", "20"), ("vm.swappiness", "60")]
    saved_bytes_mode = {"vm.dirty_ratio": "0", "vm.dirty_bytes": "4096000"}
    assert restore_plan(saved_bytes_mode, {"vm.dirty_ratio": "50", "vm.dirty_bytes": "0"}) == [
        ("vm.dirty_bytes", "4096000")
    ]


def test_restore_writes_values_that_are_missing_now() -> None:
    assert restore_plan({"vm.swappiness": "60"}, {}) == [("vm.swappiness", "60")]


# A model of the kernel's pair rule, checked against this machine's kernel in test_apply_root.py:
# writing either member zeroes the other; the bytes members of the dirty pairs refuse 0.
class ModelKernel:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = dict(values)

    def write(self, key: str, value: str) -> None:
        if key in ("vm.dirty_bytes", "vm.dirty_background_bytes") and value == "0":
            raise OSError(22, "Invalid argument")
        self.values[key] = value
        if key in PARTNER:
            self.values[PARTNER[key]] = "0"


@st.composite
def pair_states(draw: st.DrawFn) -> dict[str, str]:
    """A state the kernel can be in: per pair, one member non-zero (or, ratio mode, the ratio may be 0)."""
    out: dict[str, str] = {}
    for bytes_key, ratio_key in COUPLED_PAIRS:
        if draw(st.booleans()):
            out[bytes_key], out[ratio_key] = str(draw(st.integers(8192, 1 << 40))), "0"
        else:
            out[bytes_key], out[ratio_key] = "0", str(draw(st.integers(0, 100)))
    out["vm.swappiness"] = str(draw(st.integers(0, 200)))
    return out


@given(saved=pair_states(), now=pair_states(), subset=st.sets(st.sampled_from(range(len(COUPLED_PAIRS)))))
def test_restore_plan_recreates_saved_state_in_the_kernel_model(
    saved: dict[str, str], now: dict[str, str], subset: set[int]
) -> None:
    keep = {"vm.swappiness"} | {k for i in subset for k in COUPLED_PAIRS[i]}
    saved = {k: v for k, v in saved.items() if k in keep}
    kernel = ModelKernel(now)
    for key, value in restore_plan(saved, kernel.values):
        kernel.write(key, value)
    assert mismatches(saved, kernel.values) == []
    assert restore_plan(saved, kernel.values) == []


def test_mismatches_describe_what_is_wrong() -> None:
    assert mismatches({"a.b": "1", "c.d": "2"}, {"a.b": "1", "c.d": Unavailable.MISSING}) == [
        "c.d: wanted '2', in force no such key on this kernel"
    ]


def test_diff_rows() -> None:
    current = {k: v for k, v in IN_FORCE.items() if isinstance(v, str)}
    rows = diff_rows({"vm.swappiness": "60", "vm.dirty_ratio": "50", "vm.dirty_bytes": None}, current)
    assert [(r.key, r.status) for r in rows] == [
        ("vm.swappiness", DiffStatus.SAME),
        ("vm.dirty_ratio", DiffStatus.DIFFERS),
        ("vm.dirty_bytes", DiffStatus.RECORD_ONLY),
    ]
    assert rows[1].target == "50" and rows[1].in_force == "20"
