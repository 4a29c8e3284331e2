"""The bloom filter of the consume queue's filter bits (reference_broker/filter/bloom.py): MurmurHash3 against
Guava's published vectors, bit positions against a table observed from RocketMQ 4.9.8's own BloomFilter
(tests/java/BloomPositions.java over the distribution's jars) and its consumerFilter.json, a differential run
of random strings through the real jar (skipped without java or the distribution), and the bit-map rules."""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest

from reference_broker.filter.bloom import BloomFilter, BloomFilterData, BloomFilterError, murmur3_x64_128

DRIVER = Path(__file__).resolve().parents[1] / "java" / "BloomPositions.java"


# Guava's Murmur3Hash128Test: seed, (h1, h2) of the UTF-8 text.
GUAVA_VECTORS = [
    (0, "hell", 0x629942693E10F867, 0x92DB0B82BAEB5347),
    (1, "hello", 0xA78DDFF5ADAE8D10, 0x128900EF20900135),
    (2, "hello ", 0x8A486B23F422E826, 0xF962A2C58947765F),
    (3, "hello w", 0x2EA59F466F6BED8C, 0xC610990ACC428A17),
    (4, "hello wo", 0x79F6305A386C572C, 0x46305AED3483B94E),
    (5, "hello wor", 0xC2219D213EC1F1B5, 0xA1D8E2E0A52785BD),
    (0, "The quick brown fox jumps over the lazy dog", 0xE34BBC7BBC071B6C, 0x7A433CA9C49A9347),
]


@pytest.mark.parametrize(("seed", "text", "h1", "h2"), GUAVA_VECTORS)
def test_murmur3_matches_guavas_vectors(seed: int, text: str, h1: int, h2: int) -> None:
    assert murmur3_x64_128(text.encode(), seed) == (h1, h2)


# Observed on RocketMQ 4.9.8 (tests/java/BloomPositions.java): f, n, text → k, m, positions. The first two
# rows are also what 4.9.8's broker wrote in consumerFilter.json for GroupA / GroupB on TopicA.
OBSERVED_498 = [
    (20, 32, "GroupA#TopicA", 3, 112, (29, 107, 11)),
    (20, 32, "GroupB#TopicA", 3, 112, (103, 32, 24)),
    (20, 32, "GroupAx#TopicB", 3, 112, (100, 29, 41)),
    (10, 128, "x", 4, 616, (568, 558, 474, 275)),
    (1, 1, "abc", 7, 16, (9, 10, 4, 3, 13, 1, 0)),
    (50, 7, "a longer string that spans several sixteen byte blocks", 1, 16, (2,)),
    (20, 32, "héllo wörld ✓ 组#主题", 3, 112, (72, 89, 37)),
    (20, 32, "", 3, 112, (0, 0, 0)),
]


@pytest.mark.parametrize(("f", "n", "text", "k", "m", "positions"), OBSERVED_498)
def test_bit_positions_are_rocketmq_498s(f: int, n: int, text: str, k: int, m: int,
                                         positions: tuple[int, ...]) -> None:
    bloom = BloomFilter(f, n)
    assert (bloom.k, bloom.m) == (k, m)
    assert bloom.calc_bit_positions(text) == positions
    assert bloom.generate(text) == BloomFilterData(positions, m)


def test_random_strings_hash_as_rocketmq_498s_bloom_filter(rocketmq_home: Path) -> None:
    if shutil.which("java") is None:
        pytest.skip("no java on PATH (Debian: openjdk-17-jdk-headless)")
    rng = random.Random(30)
    alphabet = "abcXYZ019#_-%é✓组 "
    cases = []
    for _ in range(400):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        cases.append((rng.randint(1, 99), rng.randint(1, 300), text))
    lines = "".join(f"{f} {n} {t}\n" for f, n, t in cases)
    done = subprocess.run(["java", "-Xmx128m", "-XX:TieredStopAtLevel=1", "-cp", f"{rocketmq_home}/lib/*",
                           str(DRIVER)], input=lines, capture_output=True, text=True, timeout=180, encoding="utf-8")
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = done.stdout.split("\n")[:len(cases)]
    ours = []
    for f, n, t in cases:
        b = BloomFilter(f, n)
        ours.append(" ".join(str(x) for x in (b.k, b.m, *b.calc_bit_positions(t))))
    diffs = [(c, o, t) for c, o, t in zip(cases, ours, theirs, strict=True) if o != t]
    assert not diffs, diffs[:5]


def test_parameters_are_checked_as_4_9_8_checks_them() -> None:
    for f, n in ((0, 32), (100, 32), (20, 0)):
        with pytest.raises(BloomFilterError):
            BloomFilter(f, n)


def test_hash_to_sets_the_groups_bits_and_is_hit_reads_them() -> None:
    bloom = BloomFilter(20, 32)
    a, b = bloom.generate("GroupA#TopicA"), bloom.generate("GroupB#TopicA")
    bits = bytearray(bloom.byte_length)
    assert not bloom.is_hit(a, bytes(bits))
    bloom.hash_to(a, bits)
    # BitsArray: bit p is bit p % 8 of byte p // 8
    assert bits[29 // 8] & (1 << (29 % 8)) and bits[107 // 8] & (1 << (107 % 8)) and bits[11 // 8] & (1 << 3)
    assert sum(bin(x).count("1") for x in bits) == 3
    assert bloom.is_hit(a, bytes(bits)) and not bloom.is_hit(b, bytes(bits))
    bloom.hash_to(b, bits)
    assert bloom.is_hit(a, bytes(bits)) and bloom.is_hit(b, bytes(bits))


def test_filter_data_of_another_filter_is_refused() -> None:
    bloom = BloomFilter(20, 32)
    other = BloomFilter(10, 32).generate("G#T")
    assert not bloom.is_valid(other) and not bloom.is_valid(None)
    assert not bloom.is_valid(BloomFilterData((1, 2, 500), 112))  # a position past the map (a hostile file)
    with pytest.raises(BloomFilterError):
        bloom.hash_to(other, bytearray(bloom.byte_length))
    with pytest.raises(BloomFilterError):
        bloom.is_hit(bloom.generate("G#T"), bytes(3))  # a bit map of another length


def test_filter_data_json_round_trips_and_refuses_what_is_not_one() -> None:
    data = BloomFilter(20, 32).generate("GroupA#TopicA")
    assert data.to_json() == {"bitNum": 112, "bitPos": [29, 107, 11]}
    assert BloomFilterData.from_json(data.to_json()) == data
    assert BloomFilterData.from_json(None) is None
    for bad in ([1], {"bitNum": "112", "bitPos": [1]}, {"bitNum": 112, "bitPos": "1"}, {"bitNum": 112,
                                                                                        "bitPos": [1.5]}):
        with pytest.raises(ValueError):
            BloomFilterData.from_json(bad)
