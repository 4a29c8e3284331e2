"""Checking targets against the values in force, planning writes and planning a restore (sans-IO).

Inputs are plain mappings (key -> value text as the kernel prints it); outputs are lists of
writes. The I/O shell (`procsys`, `session`) reads /proc/sys, feeds these functions and performs
the writes they return.

Kernel facts the plans rely on (mm/page-writeback.c, mm/util.c; checked on this machine's 6.x kernel):
- Some keys come in pairs of which only one is in force: writing `vm.dirty_bytes` sets
  `vm.dirty_ratio` to 0 and vice versa; likewise `vm.dirty_background_bytes`/`_ratio` and
  `vm.overcommit_kbytes`/`_ratio`. `vm.dirty_bytes = 0` and `vm.dirty_background_bytes = 0` are
  rejected (EINVAL). So a change to one member saves both, and a restore writes only the member
  that was non-zero: writing it zeroes its partner, which is exactly the saved state.
- Some keys are actions, not settings (`vm.drop_caches`, `vm.compact_memory`, `vm.stat_refresh`):
  writing does something once, reading gives nothing to restore. Profiles may not name them.
- The kernel parses only what it needs: writing "1 2" to vm.swappiness sets 1 and succeeds. So a
  value's shape (number of integer fields) is checked here against the value in force.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sysctl_profiles.errors import ProfileError
from sysctl_profiles.profile import normalise

# (bytes-like member, ratio member): writing either zeroes the other.
COUPLED_PAIRS: tuple[tuple[str, str], ...] = (
    ("vm.dirty_bytes", "vm.dirty_ratio"),
    ("vm.dirty_background_bytes", "vm.dirty_background_ratio"),
    ("vm.overcommit_kbytes", "vm.overcommit_ratio"),
)
PARTNER: dict[str, str] = {a: b for a, b in COUPLED_PAIRS} | {b: a for a, b in COUPLED_PAIRS}
_BYTES_MEMBERS = frozenset(a for a, _ in COUPLED_PAIRS)

# Writing these triggers an action (free page cache, compact memory, refresh counters).
ACTION_KEYS: frozenset[str] = frozenset({"vm.drop_caches", "vm.compact_memory", "vm.stat_refresh"})

_INT_RE = re.compile(r"^-?\d+$")


class Unavailable(enum.Enum):
    """Why a key has no value in force."""

    MISSING = "no such key on this kernel"
    UNREADABLE = "not readable (write-only or permission denied)"


Reading = str | Unavailable


@dataclass(frozen=True)
class Change:
    key: str
    before: str
    after: str


class DiffStatus(enum.Enum):
    SAME = "same"
    DIFFERS = "differs"
    RECORD_ONLY = "record only"


@dataclass(frozen=True)
class DiffRow:
    key: str
    target: str | None
    in_force: str
    status: DiffStatus


def _is_int_fields(value: str) -> bool:
    fields = value.split()
    return bool(fields) and all(_INT_RE.match(f) for f in fields)


def check_targets(targets: Mapping[str, str | None], readings: Mapping[str, Reading]) -> dict[str, str]:
    """Raise ProfileError listing every problem; return the values in force of the target keys."""
    problems: list[str] = []
    current: dict[str, str] = {}
    for key, target in targets.items():
        if key in ACTION_KEYS:
            problems.append(f"{key} is an action, not a setting: it cannot be recorded or restored")
            continue
        reading = readings.get(key, Unavailable.MISSING)
        if isinstance(reading, Unavailable):
            word = "unknown key" if reading is Unavailable.MISSING else "unreadable key"
            problems.append(f"{word} {key}: {reading.value}")
            continue
        current[key] = reading
        if target is None:
            continue
        if _is_int_fields(reading):
            want = len(reading.split())
            got = target.split()
            if len(got) != want or not _is_int_fields(target):
                shape = "an integer" if want == 1 else f"{want} integers"
                problems.append(f"malformed value for {key}: {target!r} (in force {reading!r}; expected {shape})")
                continue
        if key in _BYTES_MEMBERS and normalise(target) == "0":
            problems.append(f"{key} = 0 means 'use {PARTNER[key]}': set {PARTNER[key]} instead")
    for a, b in COUPLED_PAIRS:
        if targets.get(a) is not None and targets.get(b) is not None:
            problems.append(f"{a} and {b} exclude each other (writing one zeroes the other): set only one")
    if problems:
        raise ProfileError("\n  ".join(["profile cannot be applied; nothing was changed:", *problems]))
    return current


def plan_apply(targets: Mapping[str, str | None], current: Mapping[str, str]) -> list[Change]:
    """Writes that make the targets true, in profile order; values already in force are skipped."""
    return [
        Change(key, current[key], normalise(target))
        for key, target in targets.items()
        if target is not None and normalise(current[key]) != normalise(target)
    ]


def keys_to_save(changes: Sequence[Change]) -> list[str]:
    """Every key a write can alter: the changed keys and their coupled partners."""
    out: list[str] = []
    for ch in changes:
        for key in (ch.key, PARTNER.get(ch.key)):
            if key is not None and key not in out:
                out.append(key)
    return out


def _pair_leader(a: str, b: str, saved: Mapping[str, str]) -> str:
    """The member of a coupled pair whose write recreates the saved pair."""
    if normalise(saved[a]) != "0":
        return a
    # Ratio member: the bytes member of a dirty pair cannot be written as 0.
    return b


def restore_plan(saved: Mapping[str, str], current: Mapping[str, Reading]) -> list[tuple[str, str]]:
    """Writes that put `saved` back, given what is in force now; nothing when all match already."""
    writes: list[tuple[str, str]] = []
    done: set[str] = set()

    def differs(key: str) -> bool:
        now = current.get(key, Unavailable.MISSING)
        return isinstance(now, Unavailable) or normalise(now) != normalise(saved[key])

    for key in saved:
        if key in done:
            continue
        partner = PARTNER.get(key)
        if partner is not None and partner in saved:
            a, b = (key, partner) if key in _BYTES_MEMBERS else (partner, key)
            done.update((a, b))
            if differs(a) or differs(b):
                leader = _pair_leader(a, b, saved)
                writes.append((leader, normalise(saved[leader])))
            continue
        done.add(key)
        if differs(key):
            writes.append((key, normalise(saved[key])))
    return writes


def mismatches(wanted: Mapping[str, str], current: Mapping[str, Reading]) -> list[str]:
    """Human-readable list of keys whose value in force is not the wanted one."""
    out = []
    for key, value in wanted.items():
        now = current.get(key, Unavailable.MISSING)
        if isinstance(now, Unavailable) or normalise(now) != normalise(value):
            shown = now.value if isinstance(now, Unavailable) else repr(normalise(now))
            out.append(f"{key}: wanted {normalise(value)!r}, in force {shown}")
    return out


def diff_rows(targets: Mapping[str, str | None], current: Mapping[str, str]) -> list[DiffRow]:
    rows = []
    for key, target in targets.items():
        now = normalise(current[key])
        if target is None:
            status = DiffStatus.RECORD_ONLY
        elif normalise(target) == now:
            status = DiffStatus.SAME
        else:
            status = DiffStatus.DIFFERS
        rows.append(DiffRow(key, None if target is None else normalise(target), now, status))
    return rows
