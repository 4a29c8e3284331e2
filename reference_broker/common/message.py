"""Message constants shared by store, broker and clients: property keys, sysflags, properties codec.

This module owns RocketMQ's properties string encoding (MessageDecoder.messageProperties2String /
string2messageProperties, 4.9.8): ``name \\x01 value \\x02 name \\x01 value`` in UTF-8, where 4.9.8
strips the trailing ``\\x02``. Parsing accepts both forms.
"""

from __future__ import annotations

from typing import Final

from reference_broker.common import compiled, topic_names

NAME_VALUE_SEPARATOR: Final = "\u0001"
PROPERTY_SEPARATOR: Final = "\u0002"
_NV_B: Final = b"\x01"
_PS_B: Final = b"\x02"

# MessageConst property keys (common/.../message/MessageConst.java, 4.9.8).
PROPERTY_KEYS: Final = "KEYS"
PROPERTY_TAGS: Final = "TAGS"
PROPERTY_WAIT_STORE_MSG_OK: Final = "WAIT"
PROPERTY_DELAY_TIME_LEVEL: Final = "DELAY"
PROPERTY_RETRY_TOPIC: Final = "RETRY_TOPIC"
PROPERTY_REAL_TOPIC: Final = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID: Final = "REAL_QID"
PROPERTY_TRANSACTION_PREPARED: Final = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP: Final = "PGROUP"
PROPERTY_MIN_OFFSET: Final = "MIN_OFFSET"
PROPERTY_MAX_OFFSET: Final = "MAX_OFFSET"
PROPERTY_ORIGIN_MESSAGE_ID: Final = "ORIGIN_MESSAGE_ID"
PROPERTY_RECONSUME_TIME: Final = "RECONSUME_TIME"
PROPERTY_MAX_RECONSUME_TIMES: Final = "MAX_RECONSUME_TIMES"
PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: Final = "UNIQ_KEY"
PROPERTY_TRANSACTION_CHECK_TIMES: Final = "TRANSACTION_CHECK_TIMES"
PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS: Final = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET: Final = "TRAN_PREPARED_QUEUE_OFFSET"
KEY_SEPARATOR: Final = " "
# 5.x (MessageConst.PROPERTY_CRC32): the whole-record CRC property (common/record.py, "whole-record CRC").
PROPERTY_CRC32: Final = "__CRC32#"

# MessageSysFlag (common/.../sysflag/MessageSysFlag.java, 4.9.8).
COMPRESSED_FLAG: Final = 0x1
MULTI_TAGS_FLAG: Final = 0x2
TRANSACTION_NOT_TYPE: Final = 0
TRANSACTION_PREPARED_TYPE: Final = 0x4
TRANSACTION_COMMIT_TYPE: Final = 0x8
TRANSACTION_ROLLBACK_TYPE: Final = 0xC
BORNHOST_V6_FLAG: Final = 0x10
STOREHOSTADDRESS_V6_FLAG: Final = 0x20
NEED_UNWRAP_FLAG: Final = 0x40
INNER_BATCH_FLAG: Final = 0x80


def transaction_value(sys_flag: int) -> int:
    """MessageSysFlag.getTransactionValue: the transaction type bits."""
    return sys_flag & TRANSACTION_ROLLBACK_TYPE


# The topics a message's properties and the put path name (defined in topic_names.py; kept here under the
# names the record code and the clients read them by).
SCHEDULE_TOPIC: Final = topic_names.RMQ_SYS_SCHEDULE_TOPIC
RMQ_SYS_TRANS_HALF_TOPIC: Final = topic_names.RMQ_SYS_TRANS_HALF_TOPIC
RMQ_SYS_TRANS_OP_HALF_TOPIC: Final = topic_names.RMQ_SYS_TRANS_OP_HALF_TOPIC
RETRY_GROUP_TOPIC_PREFIX: Final = topic_names.RETRY_GROUP_TOPIC_PREFIX
DLQ_GROUP_TOPIC_PREFIX: Final = topic_names.DLQ_GROUP_TOPIC_PREFIX


def properties_to_bytes(props: dict[str, str] | None) -> bytes:
    """Encode properties the 4.9.8 way (no trailing separator)."""
    if not props:
        return b""
    # "replace": a lone surrogate (possible in a JSON header) becomes "?", as Java's getBytes(UTF_8) writes it
    return "\x02".join(f"{k}\x01{v}" for k, v in props.items()).encode("utf-8", "replace")


def string_to_properties(text: str) -> dict[str, str]:
    """MessageDecoder.string2messageProperties (4.9.8): each piece between separators splits at its first
    ``\\x01``; a piece without one, with an empty name or with an empty value is dropped; a later name wins."""
    out: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        k, _, v = item.partition(NAME_VALUE_SEPARATOR)
        if k and v:
            out[k] = v
    return out


_split_properties: Final = string_to_properties  # the pure one, whichever ``string_to_properties`` is bound to


def bytes_to_properties(raw: bytes | memoryview) -> dict[str, str]:
    """Decode a properties blob as ``string_to_properties`` (tolerant of a trailing separator).

    One decode, then split: the separators are ASCII, so they end any broken UTF-8 sequence either way and
    the pairs come out as if each were decoded alone (a third cheaper for a pulled message's properties).
    Invalid UTF-8 becomes U+FFFD, as Java's new String(bytes, UTF_8) does."""
    return _split_properties(str(raw, "utf-8", "replace")) if raw else {}


def is_canonical(text: str, props: dict[str, str]) -> bool:
    """Whether ``text`` is exactly what messageProperties2String writes for ``props`` (parsed from it), up to
    the order of the pairs: n pairs, n - 1 separators, every piece a pair, no name twice. Then a broker may
    store the text as it came instead of re-encoding the map (4.9.8 always re-encodes a single message's)."""
    n = len(props)
    return text.count(NAME_VALUE_SEPARATOR) == n and text.count(PROPERTY_SEPARATOR) == n - 1


def without_pair(text: str, name: str, value: str) -> str:
    """A canonical properties text (``is_canonical``) without its ``name``/``value`` pair, the separators kept
    right: how the send path drops WAIT from what it stores without re-encoding the map."""
    pair = f"{name}{NAME_VALUE_SEPARATOR}{value}"
    if text == pair:
        return ""
    if text.startswith(pair + PROPERTY_SEPARATOR):
        return text[len(pair) + 1:]
    inner = PROPERTY_SEPARATOR + pair
    if text.endswith(inner):
        return text[:-len(inner)]
    return text.replace(inner + PROPERTY_SEPARATOR, PROPERTY_SEPARATOR, 1)


def property_keys(name: bytes) -> tuple[bytes, bytes]:
    """``NAME\x01`` and ``\x02NAME\x01``: what ``find_property`` looks for (a hot caller keeps them)."""
    return name + _NV_B, _PS_B + name + _NV_B


def property_from_bytes(raw: bytes, name: bytes) -> bytes | None:
    """Find one property value without decoding the whole map: the first ``NAME\x01`` at the start or after a
    ``\x02``, up to the next ``\x02``. Values need no decoding to be found, as the separators are ASCII."""
    key, ps_key = property_keys(name)
    return find_property(raw, key, ps_key)


def find_property(raw: bytes, key: bytes, ps_key: bytes) -> bytes | None:
    """``property_from_bytes`` with the name's two forms from ``property_keys`` (the dispatch hot path: three
    names per record)."""
    if raw.startswith(key):
        start = len(key)
    else:
        start = raw.find(ps_key)
        if start < 0:
            return None
        start += len(ps_key)
    end = raw.find(_PS_B, start)
    return raw[start:] if end < 0 else raw[start:end]


# ---- the compiled twins (common/compiled.py) ------------------------------------------------------------

pure_string_to_properties: Final = string_to_properties  # the reference: what the compiled functions must equal
pure_bytes_to_properties: Final = bytes_to_properties
_compiled = compiled.load("_message_c")
if _compiled is not None:
    _compiled.bind(pure_string_to_properties, pure_bytes_to_properties)
    string_to_properties = _compiled.string_to_properties
    bytes_to_properties = _compiled.bytes_to_properties
