"""java_hash.hash_codes: the batch hash equals ``string_hash_code`` string by string.

``hash_codes`` takes two paths: ASCII strings of one length that occur at least ``_VECTOR_MIN`` (8)
times are hashed together with numpy; everything else (non-ASCII, empty, rare lengths, longer than
``_VECTOR_MAX_LEN``) goes through ``string_hash_code``. Both must give Java's ``String.hashCode``.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from reference_broker.common import java_hash
from reference_broker.common.java_hash import hash_codes, string_hash_code
from tests.common.test_java_hash import reference_hash as java_formula  # the formula, independent of both paths

VECTOR_MIN = java_hash._VECTOR_MIN
VECTOR_MAX_LEN = java_hash._VECTOR_MAX_LEN


def expected_codes(strings: list[str]) -> list[int]:
    """The oracle: one ``string_hash_code`` per string."""
    return [string_hash_code(s) for s in strings]


def check(strings: list[str]) -> None:
    got = hash_codes(strings)
    assert got == expected_codes(strings)
    assert all(-(1 << 31) <= h < 1 << 31 for h in got)


ASCII = st.characters(max_codepoint=127)  # includes \x00 and \x7f, the extremes of a code unit


@st.composite
def ascii_group(draw: st.DrawFn) -> list[str]:
    """At least VECTOR_MIN ASCII strings of one length (the numpy path), some maybe repeated."""
    length = draw(st.one_of(st.integers(1, 12), st.sampled_from([31, 32, 40, 255, 256, 257, 300, 700])))
    count = draw(st.integers(VECTOR_MIN, VECTOR_MIN + 12))
    return draw(st.lists(st.text(ASCII, min_size=length, max_size=length), min_size=count, max_size=count))


@st.composite
def mixed_strings(draw: st.DrawFn) -> list[str]:
    """Groups for the numpy path shuffled among empty, short, non-ASCII and odd-length strings."""
    groups = draw(st.lists(ascii_group(), max_size=3))
    singles = draw(st.lists(
        st.one_of(
            st.just(""),
            st.text(ASCII, max_size=20),
            st.text(max_size=20),  # any code point but surrogates: BMP and astral (two UTF-16 units)
            st.text(st.sampled_from("é✓主😀a#"), min_size=1, max_size=10),
        ),
        max_size=25,
    ))
    strings = [s for g in groups for s in g] + singles
    return list(draw(st.permutations(strings)))


@settings(max_examples=200, deadline=None)
@given(mixed_strings())
def test_hash_codes_equals_string_hash_code_per_string(strings: list[str]) -> None:
    check(strings)


@settings(max_examples=100, deadline=None)
@given(mixed_strings())
def test_hash_codes_equals_the_java_formula(strings: list[str]) -> None:
    assert hash_codes(strings) == [java_formula(s) for s in strings]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(ASCII, min_size=5, max_size=5), min_size=VECTOR_MIN, max_size=40), st.data())
def test_hash_codes_with_empty_and_non_ascii_strings_of_the_same_length(strings: list[str],
                                                                        data: st.DataObject) -> None:
    """Empty strings and non-ASCII strings of the group's length stay out of the numpy group."""
    extra = data.draw(st.lists(st.one_of(st.just(""), st.text(st.sampled_from("é✓主"), min_size=5, max_size=5)),
                               min_size=1, max_size=VECTOR_MIN + 2))
    check(data.draw(st.permutations(strings + extra)))


def test_group_size_boundary() -> None:
    """VECTOR_MIN - 1 strings of one length take the scalar path, VECTOR_MIN the numpy one: same codes."""
    for n in (VECTOR_MIN - 1, VECTOR_MIN, VECTOR_MIN + 1):
        check([f"key-{i:04d}" for i in range(n)])
        check(["polygenelubricants"] * n)  # Integer.MIN_VALUE
        check([""] * n)


def test_known_java_values_through_the_numpy_path() -> None:
    strings = ["hello"] * VECTOR_MIN + ["TagA"] * VECTOR_MIN + ["polygenelubricants"] * VECTOR_MIN
    assert hash_codes(strings) == [99162322] * VECTOR_MIN + [2598919] * VECTOR_MIN + [-(2**31)] * VECTOR_MIN


def test_extreme_code_units() -> None:
    for ch in ("\x00", "\x7f", "\x01", "~"):
        for length in (1, 2, 7, 64, 1000):
            check([ch * length] * VECTOR_MIN + [ch * length + "x"])


def test_long_strings_past_the_cached_powers() -> None:
    """Lengths past the precomputed powers of 31 (they grow on demand, in both paths)."""
    for length in (4_096, 50_000):
        check([chr(33 + (i % 90)) * length for i in range(VECTOR_MIN)] + ["z" * length])


def test_longest_vectorised_length_does_not_overflow() -> None:
    """At _VECTOR_MAX_LEN the int64 dot product is closest to overflowing (all units 0x7f); one more
    character and the strings take the scalar path."""
    longest = ["\x7f" * VECTOR_MAX_LEN] * VECTOR_MIN
    assert hash_codes(longest) == [string_hash_code(longest[0])] * VECTOR_MIN
    # Closed form: 127 * (31^n - 1) / 30, exact in Python integers, then Java's int wrap.
    h = (127 * (31**VECTOR_MAX_LEN - 1) // 30) & 0xFFFFFFFF
    assert hash_codes(longest)[0] == (h - (1 << 32) if h >= 1 << 31 else h)
    beyond = ["\x7f" * (VECTOR_MAX_LEN + 1)] * VECTOR_MIN
    assert hash_codes(beyond) == [string_hash_code(beyond[0])] * VECTOR_MIN


def test_empty_input() -> None:
    assert hash_codes([]) == []
