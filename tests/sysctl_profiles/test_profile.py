"""Profile files: parsing, value expressions, RAM scaling, and the contents of the shipped profiles."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sysctl_profiles.catalog import PROFILES_DIR, load_profile, profile_names
from sysctl_profiles.errors import ProfileError
from sysctl_profiles.plan import ACTION_KEYS, PARTNER
from sysctl_profiles.procsys import parse_mem_total
from sysctl_profiles.profile import Keep, Literal, RamScaled, normalise, parse_profile, parse_size, resolve

GiB = 1 << 30
SEEDS = Path("/work/shared/seeds")

GOOD = """\
# header line one
# header line two

# source: os.sh
vm.swappiness = 1
vm.dirty_ratio=50   # inline note
; semicolon comment, sysctl.conf style
vm.lowmem_reserve_ratio = 256\t256   32 0 0
vm.min_free_kbytes = 7000000 * ram / 96GiB
vm.page-cluster = @keep

# a free remark at the end
"""


def test_good_file_entries_notes_and_header() -> None:
    p = parse_profile(GOOD, "good")
    assert p.header == "header line one\nheader line two"
    assert p.keys == (
        "vm.swappiness",
        "vm.dirty_ratio",
        "vm.lowmem_reserve_ratio",
        "vm.min_free_kbytes",
        "vm.page-cluster",
    )
    by_key = {e.key: e for e in p.entries}
    assert by_key["vm.swappiness"].note == "source: os.sh"
    assert by_key["vm.swappiness"].expr == Literal("1")
    assert by_key["vm.dirty_ratio"].note == "inline note"
    assert by_key["vm.lowmem_reserve_ratio"].note == "semicolon comment, sysctl.conf style"
    assert by_key["vm.lowmem_reserve_ratio"].expr == Literal("256 256 32 0 0")
    assert by_key["vm.min_free_kbytes"].expr == RamScaled(7000000, 96 * GiB, "96GiB")
    assert by_key["vm.page-cluster"].expr == Keep()
    assert by_key["vm.swappiness"].line == 5
    assert p.remarks == ("a free remark at the end",)


def test_resolve_scales_to_ram_and_keeps_record_only_keys() -> None:
    p = parse_profile(GOOD, "good")
    targets = resolve(p, ram_bytes=48 * GiB)
    assert targets["vm.min_free_kbytes"] == "3500000"  # half the RAM of the 96 GiB machine -> half the value
    assert targets["vm.page-cluster"] is None
    assert targets["vm.lowmem_reserve_ratio"] == "256 256 32 0 0"
    assert list(targets) == list(p.keys)


def test_ram_scaling_rounds_down() -> None:
    expr = RamScaled(10, 3, "3")
    assert expr.resolve(1) == 3  # 10 * 1 / 3 = 3.33


@given(factor=st.integers(0, 10**12), ram=st.integers(1, 1 << 50), per=st.integers(1, 1 << 50))
def test_ram_scaling_is_floor_of_exact_ratio(factor: int, ram: int, per: int) -> None:
    v = RamScaled(factor, per, str(per)).resolve(ram)
    assert v * per <= factor * ram < (v + 1) * per


@pytest.mark.parametrize(
    ("text", "size"),
    [("96GiB", 96 * GiB), ("1", 1), ("512B", 512), ("4KiB", 4096), ("2 MiB", 2 << 20), ("1TiB", 1 << 40)],
)
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["96G", "96GB", "0GiB", "1.5GiB", "GiB", ""])
def test_bad_sizes(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("vm.swappiness 1", "expected 'key = value'"),
        ("vm.swappiness =", "empty value"),
        ("swappiness = 1", "bad key"),
        ("vm..swappiness = 1", "bad key"),
        ("vm/swappiness = 1", "bad key"),
        ("../etc.passwd = 1", "bad key"),
        ("vm.min_free_kbytes = 7000000 * ram / 96G", "bad size"),
        ("vm.min_free_kbytes = 7000000 * ram", "malformed expression"),
        ("vm.min_free_kbytes = 7000000 * mem / 96GiB", "malformed expression"),
        ("vm.swappiness = @kept", "malformed expression"),
    ],
)
def test_bad_lines_are_errors_with_line_numbers(line: str, problem: str) -> None:
    with pytest.raises(ProfileError) as err:
        parse_profile(f"# ok\nvm.dirty_ratio = 5\n{line}\n", "bad")
    assert "line 3" in str(err.value)
    assert problem in str(err.value)


def test_duplicate_key_is_an_error() -> None:
    with pytest.raises(ProfileError, match=r"line 2: vm.swappiness repeats line 1"):
        parse_profile("vm.swappiness = 1\nvm.swappiness = 2\n", "dup")


def test_all_problems_reported_at_once() -> None:
    with pytest.raises(ProfileError) as err:
        parse_profile("oops\nvm.x =\n", "many")
    assert "line 1" in str(err.value) and "line 2" in str(err.value)


@given(st.lists(st.text(alphabet=" \t0123456789", max_size=8), max_size=5))
def test_normalise_is_idempotent_and_single_spaced(parts: list[str]) -> None:
    v = normalise("\t".join(parts))
    assert normalise(v) == v
    assert "  " not in v and "\t" not in v and v == v.strip()


def test_mem_total_from_meminfo() -> None:
    assert parse_mem_total("MemFree: 5 kB\nMemTotal:       24684092 kB\n") == 24684092 * 1024


# ---------------------------------------------------------------- shipped profiles


def test_shipped_profiles_exist() -> None:
    assert {"default", "rocketmq-os", "seed-qa", "low-latency-async"} <= set(profile_names())


@pytest.mark.parametrize("name", profile_names())
def test_every_shipped_entry_has_a_note_and_no_action_key(name: str) -> None:
    p = load_profile(name)
    assert p.header, f"{name}: no header comment"
    for e in p.entries:
        assert e.note.strip(), f"{name}: {e.key} has no comment giving its source"
        assert e.key not in ACTION_KEYS
        assert e.key.startswith("vm.")


def test_default_records_every_key_of_the_other_profiles_and_changes_nothing() -> None:
    default = load_profile("default")
    assert all(isinstance(e.expr, Keep) for e in default.entries)
    for name in profile_names():
        for key in load_profile(name).keys:
            assert key in default.keys, f"default does not record {key} (set by {name})"
            if key in PARTNER:
                assert PARTNER[key] in default.keys


def _values(name: str, ram: int = 96 * GiB) -> dict[str, str | None]:
    return resolve(load_profile(name), ram)


def test_rocketmq_os_matches_os_sh() -> None:
    # apache/rocketmq distribution/bin/os.sh (4.9.8), minus vm.drop_caches (an action).
    assert _values("rocketmq-os") == {
        "vm.overcommit_memory": "1",
        "vm.zone_reclaim_mode": "0",
        "vm.max_map_count": "655360",
        "vm.dirty_background_ratio": "50",
        "vm.dirty_ratio": "50",
        "vm.dirty_writeback_centisecs": "360000",
        "vm.page-cluster": "3",
        "vm.swappiness": "1",
    }
    text = (PROFILES_DIR / "rocketmq-os.conf").read_text()
    for unapplied in ("vm.drop_caches", "deadline", "nofile", "memlock"):
        assert unapplied in text, f"rocketmq-os.conf should say why {unapplied} is not applied"


def test_seed_qa_values_are_the_seed_numbers_on_a_96gib_machine() -> None:
    assert _values("seed-qa") == {
        "vm.max_map_count": "655360",
        "vm.dirty_bytes": "20000000000",
        "vm.min_free_kbytes": "7000000",
        "vm.swappiness": "0",
        "vm.dirty_writeback_centisecs": "360000",
    }
    scaled = _values("seed-qa", ram=24 * GiB)
    assert scaled["vm.min_free_kbytes"] == "1750000"
    assert scaled["vm.dirty_bytes"] == "5000000000"


@pytest.mark.skipif(not SEEDS.is_dir(), reason="seed Q&A not present on this machine")
def test_seed_qa_numbers_appear_in_the_seed_text() -> None:
    text = "".join(p.read_text() for p in SEEDS.glob("00[02]_*.txt"))
    for key, value in _values("seed-qa").items():
        assert re.search(rf"{re.escape(key)}\s*=\s*{value}\b", text), f"{key}={value} not in the seed Q&A"


def test_low_latency_profile_explains_itself() -> None:
    p = load_profile("low-latency-async")
    assert "Reasoning" in p.header
    values = _values("low-latency-async")
    # The design's point: background writeback far below the hard limit, short expiry.
    assert int(values["vm.dirty_background_bytes"] or 0) * 8 < int(values["vm.dirty_bytes"] or 0)
    assert int(values["vm.dirty_expire_centisecs"] or 0) <= 100
