"""Profile files: parsing `key = value` text into entries and resolving values for one machine (sans-IO).

File format (a subset of sysctl.conf(5), so a profile can also be fed to `sysctl -p` when it has no
`@keep` or RAM-scaled values):

    # comment lines directly above an entry are that entry's note (its source and reason)
    vm.swappiness = 1            # an inline comment is appended to the note
    vm.min_free_kbytes = 7000000 * ram / 96GiB
    vm.dirty_ratio = @keep

- Blank lines end a comment block. A comment block not followed directly by an entry is a free
  remark; the first one is the profile's header (its description).
- `#` and `;` start comments, as in sysctl.conf.
- Values:
  - a literal: one or more whitespace-separated fields (`256 256 32 0 0` for vm.lowmem_reserve_ratio);
    whitespace is normalised to single spaces, as the kernel prints multi-field values with tabs;
  - `N * ram / SIZE`: N scaled to this machine's RAM, i.e. floor(N * MemTotal / SIZE), where MemTotal is
    /proc/meminfo's (bytes) and SIZE an integer with an optional binary unit (B, KiB, MiB, GiB, TiB);
    used to carry a value quoted for one machine size over to this one;
  - `@keep`: record the value in force, change nothing (the `default` profile is all `@keep`).
- Keys are sysctl names (dots, no slashes); a key may appear once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sysctl_profiles.errors import ProfileError

KEEP_TOKEN = "@keep"

_KEY_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_\-]*(\.[A-Za-z0-9_][A-Za-z0-9_\-]*)+$")
_SCALED_RE = re.compile(r"^(\d+)\s*\*\s*ram\s*/\s*(\d+)\s*([A-Za-z]*)$")
_UNITS = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
_COMMENT_STARTS = ("#", ";")


@dataclass(frozen=True)
class Literal:
    """A value written as is (whitespace normalised)."""

    text: str

    def describe(self) -> str:
        return self.text


@dataclass(frozen=True)
class RamScaled:
    """floor(factor * ram / per_bytes): a value quoted for a machine with `per_bytes` of RAM."""

    factor: int
    per_bytes: int
    per_text: str

    def describe(self) -> str:
        return f"{self.factor} * ram / {self.per_text}"

    def resolve(self, ram_bytes: int) -> int:
        return self.factor * ram_bytes // self.per_bytes


@dataclass(frozen=True)
class Keep:
    """Record the value in force; never write it."""

    def describe(self) -> str:
        return KEEP_TOKEN


ValueExpr = Literal | RamScaled | Keep


@dataclass(frozen=True)
class Entry:
    key: str
    expr: ValueExpr
    note: str
    line: int


@dataclass(frozen=True)
class Profile:
    name: str
    source: str
    header: str
    entries: tuple[Entry, ...]
    remarks: tuple[str, ...] = ()

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(e.key for e in self.entries)


def normalise(value: str) -> str:
    """The comparison form of a sysctl value: fields separated by single spaces."""
    return " ".join(value.split())


def is_valid_key(key: str) -> bool:
    return bool(_KEY_RE.match(key))


def parse_size(text: str) -> int:
    """`96GiB` -> bytes. Binary units only: a profile should not leave 'G' open to two readings."""
    m = re.fullmatch(r"(\d+)\s*([A-Za-z]*)", text.strip())
    if not m or m.group(2) not in _UNITS:
        raise ValueError(f"bad size {text!r}: expected an integer with an optional unit {sorted(_UNITS)[1:]}")
    size = int(m.group(1)) * _UNITS[m.group(2)]
    if size <= 0:
        raise ValueError(f"bad size {text!r}: must be positive")
    return size


def parse_value(text: str) -> ValueExpr:
    """Parse the right-hand side of an entry; raises ValueError with the reason."""
    value = normalise(text)
    if not value:
        raise ValueError("empty value")
    if value == KEEP_TOKEN:
        return Keep()
    m = _SCALED_RE.match(value)
    if m:
        per = parse_size(m.group(2) + m.group(3))
        return RamScaled(int(m.group(1)), per, f"{m.group(2)}{m.group(3)}")
    # Anything that looks like a half-written expression is an error, not a literal string.
    if "@" in value or "*" in value or "ram" in value.split():
        raise ValueError(f"malformed expression {value!r}: expected a literal, '@keep' or 'N * ram / SIZE'")
    return Literal(value)


def _strip_inline_comment(text: str) -> tuple[str, str]:
    for mark in _COMMENT_STARTS:
        idx = text.find(f" {mark}")
        if idx >= 0:
            return text[:idx], text[idx + 2 :].strip()
    return text, ""


def parse_profile(text: str, name: str, source: str = "<string>") -> Profile:
    """Parse profile text; every problem is reported at once, with line numbers."""
    entries: list[Entry] = []
    remarks: list[str] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    block: list[str] = []

    def flush_block() -> None:
        if block:
            remarks.append("\n".join(block))
            block.clear()

    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            flush_block()
            continue
        if line.startswith(_COMMENT_STARTS):
            block.append(line[1:].strip())
            continue
        body, inline = _strip_inline_comment(line)
        key, eq, value_text = body.partition("=")
        key = key.strip()
        note_lines = [*block, inline] if inline else list(block)
        block.clear()
        if not eq:
            problems.append(f"line {lineno}: expected 'key = value', got {line!r}")
            continue
        if not is_valid_key(key):
            problems.append(f"line {lineno}: bad key {key!r} (expected a dotted sysctl name such as vm.swappiness)")
            continue
        if key in seen:
            problems.append(f"line {lineno}: {key} repeats line {seen[key]}")
            continue
        seen[key] = lineno
        try:
            expr = parse_value(value_text)
        except ValueError as e:
            problems.append(f"line {lineno}: {key}: {e}")
            continue
        entries.append(Entry(key, expr, "\n".join(note_lines), lineno))
    flush_block()
    if problems:
        raise ProfileError(f"profile {name} ({source}):\n  " + "\n  ".join(problems))
    header = remarks[0] if remarks else ""
    return Profile(name, source, header, tuple(entries), tuple(remarks[1:]))


def resolve(profile: Profile, ram_bytes: int) -> dict[str, str | None]:
    """Target value per key, in file order; None for `@keep` (record only)."""
    out: dict[str, str | None] = {}
    for e in profile.entries:
        if isinstance(e.expr, Keep):
            out[e.key] = None
        elif isinstance(e.expr, RamScaled):
            out[e.key] = str(e.expr.resolve(ram_bytes))
        else:
            out[e.key] = e.expr.text
    return out
