"""This module owns the chaos workload's message identity and bodies: a unique key per send and a body that
is a pure function of that key, so every delivered message can be checked byte for byte.

Body layout: ``<key>|<size>|`` repeated and cut to ``size`` bytes. The key also travels in the KEYS property;
a delivery whose body does not rebuild from its own key and length, or whose key property disagrees with
the key at the start of the body, is *corrupted*. The store's own CRC covers the body only where recovery
checks it; this check covers whatever a consumer is actually handed.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

SEPARATOR: Final = b"|"
# Prefixes of the keys a corrupted or unkeyed delivery is recorded under: never a key the workload sent,
# so the checker counts them as "unexpected" (invalid) and not as deliveries of the real key.
CORRUPT_PREFIX: Final = "!corrupt!"
UNKEYED_PREFIX: Final = "!unkeyed!"


def make_key(worker: str, seq: int) -> str:
    return f"{worker}-{seq:09d}"


def make_body(key: str, size: int) -> bytes:
    if size < 1:
        raise ValueError("body size must be at least 1 byte")
    unit = key.encode() + SEPARATOR + str(size).encode() + SEPARATOR
    return (unit * (size // len(unit) + 1))[:size]


class BodyVerdict(enum.Enum):
    INTACT = "intact"
    CORRUPTED = "corrupted"  # wrong bytes, wrong length, or a key property that does not match the body
    UNKEYED = "unkeyed"  # no KEYS property: not a message of this workload


@dataclass(frozen=True)
class Delivery:
    """What a delivery is recorded as: the key for the events table and the verdict."""

    key: str
    verdict: BodyVerdict


def classify(keys_property: str, body: bytes, fallback_id: str) -> Delivery:
    """Judge one delivered message; ``fallback_id`` (e.g. the offsetMsgId) names deliveries without a key."""
    key = keys_property.split(" ", 1)[0] if keys_property else ""
    if not key:
        return Delivery(f"{UNKEYED_PREFIX}{fallback_id}", BodyVerdict.UNKEYED)
    if body and body == make_body(key, len(body)):
        return Delivery(key, BodyVerdict.INTACT)
    return Delivery(f"{CORRUPT_PREFIX}{key}", BodyVerdict.CORRUPTED)
