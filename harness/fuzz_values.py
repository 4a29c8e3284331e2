"""This module owns the fuzzer's hostile values (sans-IO): names, numbers, property strings and bodies that
sit at or past every limit the broker's request headers and bodies have.

Everything is drawn from a ``random.Random`` the caller seeds, so a case is reproducible from its seed alone.
Strings are Python ``str``; a lone surrogate (``\\udcff``) stands for "not UTF-8": the frame encoder either
escapes it (JSON ``\\udcff``, which decodes back to the same odd string) or writes raw invalid bytes (a
malformed frame the codec must refuse).
"""

from __future__ import annotations

import json
import random
from typing import Any, Final

from reference_broker.common import message as mc
from reference_broker.common.message_batch import encode_entry

# Names: topics, groups, keys, tags, client ids. NUL, separators, path pieces, system prefixes, 10 KB.
NAMES: Final[tuple[str, ...]] = (
    "", " ", "\x00", "a\x00b", "/", "a/b", "..", "../../etc", "%", "%RETRY%x", "%DLQ%x", "@", "a@b",
    "x" * 10240, "k" * 256, "k" * 127, "\udcff\udcfe", "TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRACE_TOPIC",
    "DefaultCluster", "broker-a", "тема", "\n", "a|b", "a b", "*", "||", "a\x01b", "\x02", "\x01\x02",
    "${sys:user.home}", "con", "a" * 255, "-", "_", "%RETRY%", "%DLQ%", "\t", "\ufeff", "😀",
)

# Numbers as header text: at and past int32/int64, negative, not numbers at all.
NUMBERS: Final[tuple[str, ...]] = (
    "0", "-1", "1", "7", "8", "1024", "65535", "65536", "2147483647", "2147483648", "-2147483648",
    "-2147483649", "4294967296", "9223372036854775807", "9223372036854775808", "-9223372036854775808",
    "-9223372036854775809", "18446744073709551616", "1e3", "0x10", " 1", "1 ", "", "abc", "NaN", "1.5",
    "+5", "\u0663", "1_000", "9" * 5000, "-0", "00000000000000000000001", "true",
)

# Property names the broker reads (MessageConst), so mutated values reach real code paths.
PROPERTY_NAMES: Final[tuple[str, ...]] = (
    mc.PROPERTY_KEYS, mc.PROPERTY_TAGS, mc.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, mc.PROPERTY_DELAY_TIME_LEVEL,
    mc.PROPERTY_TRANSACTION_PREPARED, "WAIT", mc.PROPERTY_REAL_TOPIC, mc.PROPERTY_REAL_QUEUE_ID,
    mc.PROPERTY_RETRY_TOPIC, "MAX_OFFSET", "MIN_OFFSET", "INSTANCE_ID", "CLUSTER", "ORIGIN_MESSAGE_ID",
    "TRACE_ON", "", "\x00",
)


def name(rng: random.Random, safe: str = "FuzzTopic") -> str:
    """A hostile name most of the time, a plain one sometimes (so deeper code is reached too)."""
    roll = rng.random()
    if roll < 0.25:
        return safe
    if roll < 0.3:
        return f"{safe}{rng.randrange(1000)}"
    if roll < 0.4:  # a hostile piece inside an otherwise normal name
        return safe + rng.choice(NAMES)[:64] + safe
    return rng.choice(NAMES)


def number(rng: random.Random, usual: str = "0") -> str:
    roll = rng.random()
    if roll < 0.2:
        return usual
    if roll < 0.3:
        return str(rng.randint(-(2**70), 2**70))
    return rng.choice(NUMBERS)


def properties_text(rng: random.Random, key: str | None = None) -> str:
    """A properties string (name\\x01value\\x02 ...), well-formed or not."""
    roll = rng.random()
    if roll < 0.15:
        return rng.choice(("\x01", "\x02", "\x01\x02\x01", "a\x01", "\x02\x02", "noseparator", name(rng)))
    props: dict[str, str] = {}
    if key is not None:
        props[mc.PROPERTY_KEYS] = key
    for _ in range(rng.randrange(4)):
        value = name(rng, "v") if rng.random() < 0.6 else number(rng)
        props[rng.choice(PROPERTY_NAMES)] = value
    # MessageDecoder.messageProperties2String's layout, written by hand so odd strings pass through as they are.
    return "".join(f"{k}\x01{v}\x02" for k, v in props.items())


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def message_body(rng: random.Random) -> bytes:
    roll = rng.random()
    if roll < 0.5:
        return b"fuzz-body-%d" % rng.randrange(10**6)
    if roll < 0.6:
        return b""
    if roll < 0.7:
        return rng.randbytes(rng.randrange(1, 4096))
    if roll < 0.75:  # around the 4 MiB maxMessageSize (MessageStoreConfig.maxMessageSize)
        return b"B" * rng.choice((4 * 1024 * 1024 - 200, 4 * 1024 * 1024, 4 * 1024 * 1024 + 1))
    return b"\x00\xff" * rng.randrange(1, 5000)


def batch_body(rng: random.Random) -> bytes:
    """A MessageBatch body (MessageDecoder.encodeMessages): valid, truncated, lying about sizes, or huge."""
    entries = [encode_entry(message_body(rng)[:1000], rng.choice((0, -1, 2**31 - 1)),
                            _props_dict(rng)) for _ in range(rng.randrange(1, 6))]
    raw = b"".join(entries)
    roll = rng.random()
    if roll < 0.3:
        return raw
    if roll < 0.45:
        return raw[: rng.randrange(len(raw) + 1)]
    if roll < 0.55:  # many small entries: a batch of thousands
        return encode_entry(b"m", 0, {}) * rng.choice((1000, 5000, 20000))
    if roll < 0.7:  # the first entry's total size lies
        bad = bytearray(raw)
        bad[0:4] = rng.choice((b"\x00\x00\x00\x00", b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff", b"\x00\x00\x00\x10"))
        return bytes(bad)
    if roll < 0.85:  # a flipped byte somewhere (crc / lengths / flag)
        bad = bytearray(raw)
        pos = rng.randrange(len(bad))
        bad[pos] ^= 1 << rng.randrange(8)
        return bytes(bad)
    return rng.randbytes(rng.randrange(0, 2000))


def _props_dict(rng: random.Random) -> dict[str, str]:
    out = {}
    for _ in range(rng.randrange(3)):
        value = rng.choice(NAMES[:12]) if rng.random() < 0.5 else f"v{rng.randrange(100)}"
        if _encodable(value):
            out[rng.choice(PROPERTY_NAMES[:6])] = value
    return out


def wrong_json(rng: random.Random) -> Any:
    """A JSON value of a type no body expects."""
    return rng.choice((None, 0, -1, 2**63, 1.5, "s", [], [1, 2], {}, {"a": None}, True, [[[[]]]], "\x00"))


def json_bytes(obj: Any, rng: random.Random) -> bytes:
    """JSON text; lone surrogates stay as \\u escapes (valid JSON, odd strings), or sometimes the text is cut."""
    text = json.dumps(obj, ensure_ascii=True).encode()
    roll = rng.random()
    if roll < 0.05:
        return text[: rng.randrange(len(text) + 1)]
    if roll < 0.08:
        return text + b"garbage"
    return text
