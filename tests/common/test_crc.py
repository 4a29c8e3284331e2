"""BODYCRC: common/crc.py computes UtilAll.crc32 (java.util.zip.CRC32, masked) whichever backend is in use."""

from __future__ import annotations

import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from reference_broker.common import crc


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=5000), start=st.integers(0, 64))
def test_crc32_equals_zlibs_masked(data: bytes, start: int) -> None:
    view = memoryview(data)[min(start, len(data)):]
    assert crc.crc32(view) == zlib.crc32(view) & 0x7FFFFFFF
    assert crc.raw_crc32(view) == zlib.crc32(view)


def test_known_values() -> None:
    assert crc.crc32(b"") == 0
    assert crc.raw_crc32(b"123456789") == 0xCBF43926  # the CRC-32 check value
    assert crc.crc32(b"123456789") == 0x4BF43926  # masked to a non-negative int
    assert crc.crc32(b"hello") == zlib.crc32(b"hello") & 0x7FFFFFFF
    big = bytes(range(256)) * 4096
    assert crc.crc32(big) == zlib.crc32(big) & 0x7FFFFFFF


def test_the_fast_backend_is_installed() -> None:
    """isal is a declared dependency: the zlib fallback is for platforms without its wheels."""
    assert crc.raw_crc32.__module__.startswith("isal")
