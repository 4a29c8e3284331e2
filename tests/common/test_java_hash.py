"""java_hash: Java's String.hashCode over UTF-16 code units, and the cached tag hash."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_broker.common import java_hash
from reference_broker.common.java_hash import concat_hash_code, string_hash_code, tags_hash_code


def reference_hash(s: str) -> int:
    """The Java formula written out: h = 31*h + unit over UTF-16 code units, signed 32-bit."""
    raw = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(raw), 2):
        h = (31 * h + int.from_bytes(raw[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


@pytest.mark.parametrize(
    ("s", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("TagA", 2598919),
        ("polygenelubricants", -2147483648),  # Integer.MIN_VALUE
    ],
)
def test_known_java_values(s: str, expected: int) -> None:
    assert string_hash_code(s) == expected


def test_non_ascii_uses_utf16_code_units() -> None:
    assert string_hash_code("é") == 0xE9
    s = "héllo wörld ✓"
    assert string_hash_code(s) == reference_hash(s)
    # A UTF-8 based hash would differ: é is two UTF-8 bytes but one UTF-16 unit.
    assert string_hash_code("hé") == ord("h") * 31 + 0xE9


def test_surrogate_pair_hashes_both_units() -> None:
    assert string_hash_code("😀") == 55357 * 31 + 56832
    assert string_hash_code("a😀") == (97 * 31 + 55357) * 31 + 56832
    assert string_hash_code("x😀y✓") == reference_hash("x😀y✓")


def test_long_strings_wrap_like_java_int() -> None:
    for s in ("k" * 1000, "TopicTest#KEY-123456789", "%RETRY%group-" * 37, "ключ-" * 50):
        h = string_hash_code(s)
        assert h == reference_hash(s)
        assert -(1 << 31) <= h < 1 << 31


def test_tags_hash_code_cache_equals_uncached() -> None:
    for tags in ("TagA", "TagA", "tag with spaces", "标签", "😀", ""):
        assert tags_hash_code(tags) == string_hash_code(tags)
    assert java_hash._TAG_CACHE["TagA"] == string_hash_code("TagA")
    # A second lookup is served from the cache and still agrees.
    assert tags_hash_code("TagA") == 2598919


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40), st.text(max_size=60))
def test_concat_hash_code_equals_the_hash_of_the_concatenation(prefix: str, s: str) -> None:
    """hash(a + b) via the cached-prefix polynomial split equals hashing a + b directly (ASCII or not)."""
    assert concat_hash_code(prefix, s) == string_hash_code(prefix + s)


def test_concat_hash_code_on_uniq_keys_reuses_the_producer_prefix() -> None:
    keys = [f"7F00000100002A9F1234{i:012X}" for i in range(0, 5000, 37)]
    for k in keys:
        assert concat_hash_code("TopicTest#", k) == string_hash_code("TopicTest#" + k)
