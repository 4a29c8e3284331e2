"""This module owns the batch-send body (MessageDecoder.encodeMessage / decodeMessages, 4.9.8).

A SEND_BATCH_MESSAGE body is the concatenation of one entry per message, big-endian:

| field      | bytes  | notes                                               |
|------------|--------|-----------------------------------------------------|
| TOTALSIZE  | 4      | the whole entry, this field included                |
| MAGICCODE  | 4      | written as 0 by encodeMessage                       |
| BODYCRC    | 4      | crc32(body) & 0x7FFFFFFF (0 is accepted on decode)   |
| FLAG       | 4      | user flag                                           |
| BODY       | 4 + n  | int length + bytes                                  |
| PROPERTIES | 2 + n  | short length + properties string (common/message.py)|

Topic, queue and sysflag come from the request header, not the entries.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Final, NamedTuple

from reference_broker.common import compiled
from reference_broker.common import message as mc
from reference_broker.common.crc import crc32

_HEAD: Final = struct.Struct(">iiiii")  # total, magic, crc, flag, bodyLen
_SHORT: Final = struct.Struct(">h")
MIN_ENTRY: Final = _HEAD.size + _SHORT.size


class BatchEntry(NamedTuple):
    flag: int
    body: bytes
    properties: dict[str, str]


class BatchDecodeError(ValueError):
    """A batch body that does not parse; the broker answers MESSAGE_ILLEGAL."""


def encode_entry(body: bytes, flag: int, properties: dict[str, str]) -> bytes:
    props = mc.properties_to_bytes(properties)
    total = MIN_ENTRY + len(body) + len(props)
    crc = crc32(body)
    return b"".join((_HEAD.pack(total, 0, crc, flag, len(body)), body, _SHORT.pack(len(props)), props))


def encode_batch(entries: Iterable[BatchEntry]) -> bytes:
    return b"".join(encode_entry(e.body, e.flag, e.properties) for e in entries)


def decode_batch(data: bytes | memoryview) -> list[BatchEntry]:
    """Every entry of a batch body, properties decoded; BatchDecodeError on anything that does not add up."""
    return [BatchEntry(flag, body, mc.bytes_to_properties(props)) for flag, body, props, _crc in
            decode_batch_entries(data)]


def decode_batch_entries(data: bytes | memoryview) -> list[tuple[int, bytes, bytes, int]]:
    """(flag, body, properties still encoded, body CRC or -1 when the entry carries none) per entry: what the
    store writes a batch's records from. BatchDecodeError on anything that does not add up exactly."""
    buf = memoryview(data)
    out: list[tuple[int, bytes, bytes, int]] = []
    pos, end = 0, len(buf)
    while pos < end:
        if end - pos < MIN_ENTRY:
            raise BatchDecodeError(f"truncated batch entry at byte {pos}")
        total, _magic, crc, flag, body_len = _HEAD.unpack_from(buf, pos)
        if total < MIN_ENTRY or pos + total > end or body_len < 0 or body_len > total - MIN_ENTRY:
            raise BatchDecodeError(f"bad batch entry size at byte {pos}: total {total}, body {body_len}")
        body_at = pos + _HEAD.size
        body = bytes(buf[body_at:body_at + body_len])
        (props_len,) = _SHORT.unpack_from(buf, body_at + body_len)
        props_at = body_at + body_len + _SHORT.size
        if props_len < 0 or props_at + props_len != pos + total:
            raise BatchDecodeError(f"bad batch entry properties length at byte {pos}")
        if crc:
            if crc != crc32(body):
                raise BatchDecodeError(f"batch entry body CRC mismatch at byte {pos}")
        else:
            crc = -1
        out.append((flag, body, bytes(buf[props_at:props_at + props_len]), crc))
        pos += total
    if not out:
        raise BatchDecodeError("empty batch")
    return out


# ---- the compiled twin (common/compiled.py) -------------------------------------------------------------

pure_decode_batch_entries: Final = decode_batch_entries  # the reference: what the compiled function must equal
_compiled = compiled.load("_message_batch_c")
if _compiled is not None:
    _compiled.bind(pure_decode_batch_entries, BatchDecodeError, crc32)
    decode_batch_entries = _compiled.decode_batch_entries
