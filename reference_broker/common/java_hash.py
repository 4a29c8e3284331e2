"""Java's ``String.hashCode`` in Python: RocketMQ stores it in consume-queue tag codes and index keys.

``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units, wrapped to a signed 32-bit int.
The sum runs in C through ``map(operator.mul, ...)`` with precomputed powers of 31 mod 2^32,
so a 40-character key costs about a microsecond instead of a Python loop per character.
"""

from __future__ import annotations

import array
import operator
from collections.abc import Sequence
from typing import Final

import numpy as np

from reference_broker.common import compiled

_MASK: Final = 0xFFFFFFFF
_POWERS: list[int] = [1]  # 31^k mod 2^32, k = 0, 1, 2, ...


def _grow(n: int) -> None:
    while len(_POWERS) < n:
        _POWERS.append((_POWERS[-1] * 31) & _MASK)


_grow(256)


def string_hash_code(s: str) -> int:
    """``s.hashCode()`` as Java computes it (signed 32-bit)."""
    try:
        units: bytes | array.array[int] = s.encode("ascii")
    except UnicodeEncodeError:
        units = array.array("H")
        units.frombytes(s.encode("utf-16-le"))
    if len(units) > len(_POWERS):
        _grow(len(units))
    # Unit i is multiplied by 31^(n-1-i): pair the units, last first, with 31^0, 31^1, ...
    # (map stops at the shorter iterable, so the shared powers list is never sliced).
    h: int = sum(map(operator.mul, reversed(units), _POWERS)) & _MASK
    return h - 0x100000000 if h & 0x80000000 else h


_PART_CACHE: dict[str, int] = {}
_PART_CACHE_MAX: Final = 4096
_SPLIT_AT: Final = 20  # a UNIQ_KEY's first 20 hex digits (ip, pid, class loader) repeat per producer


def _raw(units: bytes) -> int:
    """Unsigned hash of ASCII units, mod 2^32."""
    if len(units) > len(_POWERS):
        _grow(len(units))
    h: int = sum(map(operator.mul, reversed(units), _POWERS)) & _MASK
    return h


def _cached_raw(part: str) -> int:
    h = _PART_CACHE.get(part)
    if h is None:
        h = _raw(part.encode("ascii"))
        if len(_PART_CACHE) >= _PART_CACHE_MAX:
            _PART_CACHE.clear()
        _PART_CACHE[part] = h
    return h


def concat_hash_code(prefix: str, s: str) -> int:
    """``(prefix + s).hashCode()``, reusing cached hashes of ``prefix`` and of ``s``'s first 20 characters.

    Java's hash is a polynomial, so hash(a + b) = hash(a) * 31^len(b) + hash(b) (mod 2^32). The index
    hashes ``topic#key`` for every message; topics and UNIQ_KEY prefixes repeat, so only the varying
    tail is summed per message. Non-ASCII strings (UTF-16 lengths differ) take the plain path.
    """
    if not (prefix.isascii() and s.isascii()):
        return string_hash_code(prefix + s)
    n = len(s)
    if n > _SPLIT_AT + 4:
        tail = s[_SPLIT_AT:]
        if len(tail) >= len(_POWERS):
            _grow(len(tail) + 1)
        hs = (_cached_raw(s[:_SPLIT_AT]) * _POWERS[len(tail)] + _raw(tail.encode("ascii"))) & _MASK
    else:
        hs = _raw(s.encode("ascii"))
    if n >= len(_POWERS):
        _grow(n + 1)
    h = (_cached_raw(prefix) * _POWERS[n] + hs) & _MASK
    return h - 0x100000000 if h & 0x80000000 else h


_VECTOR_MIN: Final = 8  # strings of one length hashed together from this many on
_VECTOR_MAX_LEN: Final = 1 << 20  # 127 * (2^32 - 1) * length stays below 2^63


def hash_codes(strings: Sequence[str]) -> list[int]:
    """``string_hash_code`` of each string. ASCII strings of one length are hashed together, as one
    product of their code units with the powers of 31 (the index hashes a run of keys this way)."""
    n = len(strings)
    if n >= _VECTOR_MIN:
        # The usual run: keys of one topic and one producer's UNIQ_KEY format, all ASCII of one length.
        length = len(strings[0])
        if 0 < length <= _VECTOR_MAX_LEN and all(len(s) == length for s in strings):
            joined = "".join(strings)
            if joined.isascii():
                return _hash_block(joined.encode("ascii"), n, length)
    out = [0] * n
    by_length: dict[int, list[int]] = {}
    for i, s in enumerate(strings):
        if s.isascii() and 0 < len(s) <= _VECTOR_MAX_LEN:
            group = by_length.get(len(s))
            if group is None:
                by_length[len(s)] = [i]
            else:
                group.append(i)
        else:
            out[i] = string_hash_code(s)
    for length, idx in by_length.items():
        if len(idx) < _VECTOR_MIN:
            for i in idx:
                out[i] = string_hash_code(strings[i])
            continue
        codes = _hash_block("".join([strings[i] for i in idx]).encode("ascii"), len(idx), length)
        for i, v in zip(idx, codes, strict=True):
            out[i] = v
    return out


def _hash_block(units: bytes, count: int, length: int) -> list[int]:
    """Signed hashes of ``count`` ASCII strings of ``length`` characters laid end to end in ``units``."""
    if length > len(_POWERS):
        _grow(length)
    weights = np.array(_POWERS[length - 1::-1], dtype=np.int64)
    h = (np.frombuffer(units, dtype=np.uint8).reshape(count, length).astype(np.int64) @ weights) & _MASK
    h -= (h >> 31) << 32  # to signed 32-bit
    codes: list[int] = h.tolist()
    return codes


_TAG_CACHE: dict[str, int] = {}
_TAG_CACHE_MAX: Final = 65536


def tags_hash_code(tags: str) -> int:
    """Tag hash with a bounded cache: tags repeat, keys do not."""
    h = _TAG_CACHE.get(tags)
    if h is None:
        h = string_hash_code(tags)
        if len(_TAG_CACHE) >= _TAG_CACHE_MAX:
            _TAG_CACHE.clear()
        _TAG_CACHE[tags] = h
    return h


# ---- the compiled twin (common/compiled.py) ---------------------------------------------------------------
pure_hash_codes: Final = hash_codes  # the reference: what the compiled function must equal
_compiled = compiled.load("_index_c")
if _compiled is not None:
    _compiled.bind(pure_hash_codes, string_hash_code)
    hash_codes = _compiled.hash_codes  # rebinding to the twin is the point
