"""The bloom filter behind the consume queue's filter bits (RocketMQ 4.9.8 filter/.../util/BloomFilter.java,
BloomFilterData.java, BitsArray.java). Sans-IO.

4.9.8's broker keeps one ``BloomFilter.createByFn(maxErrorRateOfBloomFilter, expectConsumerNumUseFilter)``
(defaults 20 %, 32 consumers: k = 3 hash functions over m = 112 bits, 14 bytes). Each SQL92 consumer group of a
topic gets the k bit positions of the string ``"group#topic"`` (its BloomFilterData); when a message is stored,
the positions of every group whose selector matches it are set in the message's bit map (the consume queue's
extension); a pull then skips a message whose bit map lacks one of its group's positions without reading it.

The positions follow "Less Hashing, Same Performance" (Kirsch, Mitzenmacher) as 4.9.8 computes them: the
low and high 32 bits of the first 64 bits of Guava's ``murmur3_128`` (seed 0) over the UTF-8 bytes give
``h1 + i*h2`` for i = 1..k, in Java's 32-bit arithmetic, flipped when negative, modulo m. Bit ``p`` of a bit map
is bit ``p % 8`` of byte ``p // 8`` (BitsArray).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

_M64: Final = (1 << 64) - 1
_C1: Final = 0x87C37B91114253D5
_C2: Final = 0x4CF5AD432745937F


def _rotl64(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def _fmix64(k: int) -> int:
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & _M64
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & _M64
    return k ^ (k >> 33)


def murmur3_x64_128(data: bytes, seed: int = 0) -> tuple[int, int]:
    """MurmurHash3_x64_128 (Austin Appleby's reference; Guava's Hashing.murmur3_128): (h1, h2), unsigned.
    Guava's ``HashCode.asLong()`` is h1 (the first 8 bytes, little-endian)."""
    h1 = h2 = seed & _M64
    n = len(data)
    end = n - n % 16
    for i in range(0, end, 16):
        k1 = int.from_bytes(data[i:i + 8], "little")
        k2 = int.from_bytes(data[i + 8:i + 16], "little")
        h1 ^= (_rotl64((k1 * _C1) & _M64, 31) * _C2) & _M64
        h1 = (_rotl64(h1, 27) + h2) & _M64
        h1 = (h1 * 5 + 0x52DCE729) & _M64
        h2 ^= (_rotl64((k2 * _C2) & _M64, 33) * _C1) & _M64
        h2 = (_rotl64(h2, 31) + h1) & _M64
        h2 = (h2 * 5 + 0x38495AB5) & _M64
    tail = data[end:]
    if len(tail) > 8:
        k2 = int.from_bytes(tail[8:], "little")
        h2 ^= (_rotl64((k2 * _C2) & _M64, 33) * _C1) & _M64
    if tail:
        k1 = int.from_bytes(tail[:8], "little")
        h1 ^= (_rotl64((k1 * _C1) & _M64, 31) * _C2) & _M64
    h1 ^= n
    h2 ^= n
    h1 = (h1 + h2) & _M64
    h2 = (h2 + h1) & _M64
    h1 = _fmix64(h1)
    h2 = _fmix64(h2)
    h1 = (h1 + h2) & _M64
    h2 = (h2 + h1) & _M64
    return h1, h2


def _int32(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x & 0x80000000 else x


class BloomFilterError(ValueError):
    """BloomFilter's IllegalArgumentException: bad parameters, or filter data of another filter."""


@dataclass(frozen=True)
class BloomFilterData:
    """A group's k bit positions in an m-bit map (BloomFilterData: bitPos, bitNum)."""

    bit_pos: tuple[int, ...]
    bit_num: int

    def to_json(self) -> dict[str, Any]:
        # fastjson's field order (alphabetical), as in 4.9.8's consumerFilter.json
        return {"bitNum": self.bit_num, "bitPos": list(self.bit_pos)}

    @classmethod
    def from_json(cls, obj: Any) -> BloomFilterData | None:
        """The persisted object, or None when absent; ValueError when it is not one."""
        if obj is None:
            return None
        if not isinstance(obj, dict):
            raise ValueError(f"bloomFilterData must be an object, got {type(obj).__name__}")
        num, pos = obj.get("bitNum"), obj.get("bitPos")
        if type(num) is not int or not isinstance(pos, list) or not all(type(p) is int for p in pos):
            raise ValueError("bloomFilterData must hold an integer bitNum and a list of integer bitPos")
        return cls(tuple(pos), num)


class BloomFilter:
    """BloomFilter.createByFn(f, n): error rate ``f`` % for ``n`` mapped strings."""

    def __init__(self, f: int, n: int) -> None:
        if f < 1 or f >= 100:
            raise BloomFilterError("f must be greater or equal than 1 and less than 100")
        if n < 1:
            raise BloomFilterError("n must be greater than 0")
        self.f = f
        self.n = n
        error_rate = f / 100.0
        # k = ceil(log_0.5(f)); m = ceil(n * log2(1/f) * log2(e)), rounded up to whole bytes (4.9.8's formulas,
        # in the same floating-point steps so that the edge cases round alike)
        self.k = math.ceil(math.log(error_rate) / math.log(0.5))
        if self.k < 1:
            raise BloomFilterError("Hash function num is less than 1, maybe you should change the value of error "
                                   "rate or bit num!")
        m = math.ceil(n * (math.log(1 / error_rate) / math.log(2)) * (math.log(math.e) / math.log(2)))
        self.m = int(8 * math.ceil(m / 8.0))

    @property
    def byte_length(self) -> int:
        return self.m // 8

    def calc_bit_positions(self, text: str) -> tuple[int, ...]:
        h64 = murmur3_x64_128(text.encode("utf-8"))[0]
        hash1 = _int32(h64)
        hash2 = _int32(h64 >> 32)
        out = []
        for i in range(1, self.k + 1):
            combined = _int32(hash1 + i * hash2)
            if combined < 0:
                combined = ~combined
            out.append(combined % self.m)
        return tuple(out)

    def generate(self, text: str) -> BloomFilterData:
        return BloomFilterData(self.calc_bit_positions(text), self.m)

    def is_valid(self, data: BloomFilterData | None) -> bool:
        """The data belongs to this filter: m bits, k positions (each within the map: ours, so that a hostile
        consumerFilter.json cannot index past a bit map)."""
        return (data is not None and data.bit_num == self.m and len(data.bit_pos) == self.k
                and all(0 <= p < self.m for p in data.bit_pos))

    def hash_to(self, data: BloomFilterData, bits: bytearray) -> None:
        """Set the data's positions in ``bits`` (an m-bit map)."""
        if not self.is_valid(data):
            raise BloomFilterError(f"Bloom filter data may not belong to this filter! {data}, {self}")
        for p in data.bit_pos:
            bits[p >> 3] |= 1 << (p & 7)

    def is_hit(self, data: BloomFilterData, bits: bytes) -> bool:
        """Every position of the data is set in ``bits``: the message may match (or a false positive)."""
        if not self.is_valid(data):
            raise BloomFilterError(f"Bloom filter data may not belong to this filter! {data}, {self}")
        if len(bits) * 8 != self.m:
            raise BloomFilterError(f"Length({len(bits) * 8}) of bits in BitsArray is not equal to {self.m}!")
        return all(bits[p >> 3] & (1 << (p & 7)) for p in data.bit_pos)

    def __repr__(self) -> str:
        return f"f: {self.f}, n: {self.n}, k: {self.k}, m: {self.m}"
