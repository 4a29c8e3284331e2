"""UtilAll.crc32: CRC-32 over a body, masked to a non-negative int (the commit log's BODYCRC).

The polynomial is java.util.zip.CRC32's (IEEE), as zlib's. ISA-L's SIMD implementation (the ``isal``
package) computes the same function about four times faster on a 1 KiB body here (0.13 vs 0.57 µs):
the store computes one per put and one per record a recovery scans. zlib's is the fallback where
``isal`` cannot be installed.
"""

from __future__ import annotations

try:
    from isal.isal_zlib import crc32 as raw_crc32
except ImportError:  # pragma: no cover - isal is a declared dependency; this keeps the store usable without it
    from zlib import crc32 as raw_crc32

__all__ = ["crc32", "raw_crc32"]


def crc32(data: bytes | bytearray | memoryview) -> int:
    """UtilAll.crc32: ``crc32(data) & 0x7FFFFFFF``."""
    return raw_crc32(data) & 0x7FFFFFFF
