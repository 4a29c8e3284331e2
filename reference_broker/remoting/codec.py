"""This module owns decoding the remoting byte stream (sans-IO, in the manner of h11).

Transports call ``feed(bytes)`` with whatever the socket produced and drain ``next_frame()`` until it
returns None. Every malformed input surfaces as ``ProtocolError`` from ``next_frame`` and nowhere else, so a
connection handler needs exactly one ``except``; after one, the decoder stays broken, because the stream has
lost its framing (RocketMQ's NettyDecoder likewise closes the channel on any decode failure).

Wire formats (frame, JSON header, ROCKETMQ binary header) are tabled at the top of ``command``.
"""

from __future__ import annotations

import struct
from typing import Any, Final

from reference_broker.common import compiled
from reference_broker.remoting.codes import LanguageCode, SerializeType
from reference_broker.remoting.command import (
    BIN_FIXED,
    HEADER_LEN_MASK,
    INT,
    INT32_MAX,
    INT32_MIN,
    SHORT,
    RemotingCommand,
    json_loads,
)

# NettyDecoder.FRAME_MAX_LENGTH (system property com.rocketmq.remoting.frameMaxLength, default 16777216).
# Netty's LengthFieldBasedFrameDecoder compares length + 4 (the prefix it strips) against it.
MAX_FRAME_LENGTH: Final = 16 * 1024 * 1024


class ProtocolError(Exception):
    """The peer sent bytes that are not a valid remoting frame; the connection should be closed."""


class FrameDecoder:
    def __init__(self, max_frame_length: int = MAX_FRAME_LENGTH) -> None:
        self._buf = bytearray()
        self._pos = 0  # start of the first unconsumed byte; frames are parsed in place, not sliced off
        self._max = max_frame_length
        self._error: ProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as a frame."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes) -> None:
        if self._error is not None:
            return  # out of sync: nothing after the bad frame can be parsed
        if self._pos and self._pos >= len(self._buf) >> 1:
            # Compact only once the consumed prefix is at least half the buffer: amortised O(1) per byte,
            # so a stream of tiny frames never copies the backlog once per frame.
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def next_frame(self) -> RemotingCommand | None:
        """The next complete command, or None until more bytes are fed."""
        if self._error is not None:
            raise ProtocolError(*self._error.args) from self._error
        try:
            if _compiled is not None:  # the common case in C; anything else is the pure path's
                cmd = _compiled.next_frame(self, self._max)
                if cmd is not _FALLBACK:
                    return cmd  # type: ignore[no-any-return]
            return self._next_frame()
        except ProtocolError as exc:
            self._error = exc
            raise
        except (ValueError, struct.error, RecursionError) as exc:
            # Safety net for anything the explicit checks below miss (e.g. UnicodeDecodeError, json nesting).
            self._error = ProtocolError(f"malformed frame: {exc!r}")
            raise self._error from exc

    def _next_frame(self) -> RemotingCommand | None:
        buf = self._buf
        pos = self._pos
        avail = len(buf) - pos
        if avail < 4:
            return None
        # Checked before the frame is complete so a hostile length cannot make us buffer gigabytes.
        (length,) = INT.unpack_from(buf, pos)
        if length < 4:
            raise ProtocolError(f"frame length {length} < 4 (no room for the header length)")
        if length + 4 > self._max:
            raise ProtocolError(f"frame length {length} + 4 exceeds the {self._max} byte limit")
        if avail < 4 + length:
            return None
        (word,) = INT.unpack_from(buf, pos + 4)
        serialize_type = (word >> 24) & 0xFF
        header_len = word & HEADER_LEN_MASK
        if header_len > length - 4:
            raise ProtocolError(f"header length {header_len} exceeds the frame's {length - 4} bytes")
        header_start = pos + 8
        body_start = header_start + header_len
        end = pos + 4 + length
        with memoryview(buf) as view:  # released before the buffer can be resized again
            header = view[header_start:body_start].tobytes()
            body = view[body_start:end].tobytes()
        self._pos = end
        if end == len(buf):
            buf.clear()
            self._pos = 0
        if serialize_type == SerializeType.JSON:
            cmd = _decode_json_header(header)
        elif serialize_type == SerializeType.ROCKETMQ:
            cmd = _decode_binary_header(header)
            cmd.serialize_type = SerializeType.ROCKETMQ
        else:
            raise ProtocolError(f"unknown serialize type {serialize_type}")
        cmd.body = body
        return cmd


def _int_field(obj: dict[str, Any], key: str, default: int | None) -> int:
    value = obj.get(key)
    if value is None:
        if default is None:
            raise ProtocolError(f"JSON header lacks {key!r}")
        return default  # fastjson leaves a missing primitive at its initial value
    if type(value) is not int or not INT32_MIN <= value <= INT32_MAX:
        raise ProtocolError(f"JSON header {key!r} is not a 32-bit int: {value!r}")
    return value


def _scalar_str(where: str, value: Any) -> str:
    # fastjson turns a scalar into a String field's text; containers it cannot.
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    raise ProtocolError(f"JSON header {where} is not a string: {value!r}")


_STR_ONLY: Final = frozenset({str})


def _int32(obj: dict[str, Any], key: str, default: int | None) -> int:
    value = obj.get(key)
    if type(value) is int and INT32_MIN <= value <= INT32_MAX:
        return value
    return _int_field(obj, key, default)


def _decode_json_header(raw: bytes) -> RemotingCommand:
    obj = json_loads(raw)  # ValueError / RecursionError become ProtocolError in next_frame
    if not isinstance(obj, dict):
        raise ProtocolError(f"JSON header is a {type(obj).__name__}, not an object")
    language = obj.get("language")
    if language is None:
        language = "JAVA"  # RemotingCommand's field initializer
    elif not isinstance(language, str):
        raise ProtocolError(f"JSON header 'language' is not a string: {language!r}")
    remark = obj.get("remark")
    if remark is not None and type(remark) is not str:
        remark = _scalar_str("'remark'", remark)
    raw_ext = obj.get("extFields")
    ext: dict[str, str]
    if raw_ext is None:
        ext = {}
    elif type(raw_ext) is dict and set(map(type, raw_ext.values())) <= _STR_ONLY:
        ext = raw_ext  # the common case, checked at C speed: every value already a string
    else:
        if not isinstance(raw_ext, dict):
            raise ProtocolError(f"JSON header 'extFields' is not an object: {raw_ext!r}")
        ext = {}
        for key, value in raw_ext.items():
            if value is not None:  # a null value is dropped, as makeCustomHeaderToNet never sends one
                ext[key] = _scalar_str(f"extFields[{key!r}]", value)
    return RemotingCommand(
        code=_int32(obj, "code", None),
        language=language,
        version=_int32(obj, "version", 0),
        opaque=_int32(obj, "opaque", 0),
        flag=_int32(obj, "flag", 0),
        remark=remark,
        ext_fields=ext,
    )


def _need(pos: int, size: int, limit: int, what: str) -> int:
    if size < 0 or pos + size > limit:
        raise ProtocolError(f"binary header truncated in {what}: need {size} bytes at {pos}, have {limit - pos}")
    return pos + size


def _decode_binary_header(h: bytes) -> RemotingCommand:
    n = len(h)
    p = _need(0, BIN_FIXED.size, n, "fixed fields")
    code, lang, version, opaque, flag = BIN_FIXED.unpack_from(h, 0)
    try:
        language = LanguageCode(lang).name
    except ValueError:
        raise ProtocolError(f"unknown language code {lang}") from None
    p = _need(p, 4, n, "remark length")
    (remark_len,) = INT.unpack_from(h, p - 4)
    start, p = p, _need(p, remark_len, n, "remark")
    remark = h[start:p].decode("utf-8") if remark_len > 0 else None
    p = _need(p, 4, n, "extFields length")
    (ext_len,) = INT.unpack_from(h, p - 4)
    ext_end = _need(p, ext_len, n, "extFields")
    if ext_end != n:
        raise ProtocolError(f"{n - ext_end} stray bytes after the binary header's extFields")
    ext: dict[str, str] = {}
    while p < ext_end:
        p = _need(p, 2, ext_end, "extFields key length")
        (key_len,) = SHORT.unpack_from(h, p - 2)
        start, p = p, _need(p, key_len, ext_end, "extFields key")
        key = h[start:p].decode("utf-8")
        p = _need(p, 4, ext_end, "extFields value length")
        (val_len,) = INT.unpack_from(h, p - 4)
        start, p = p, _need(p, val_len, ext_end, "extFields value")
        ext[key] = h[start:p].decode("utf-8")
    return RemotingCommand(
        code=code, language=language, version=version, opaque=opaque, flag=flag, remark=remark, ext_fields=ext
    )


# The compiled twin of the common case (common/_frame_c.pyx): a complete frame with a JSON header of the
# expected types. It hands everything else back (FALLBACK) untouched, so every error above stays the pure path's.
_compiled = compiled.load("_frame_c")
_FALLBACK: object = None
if _compiled is not None:
    _compiled.bind(RemotingCommand, json_loads, SerializeType.JSON)
    _FALLBACK = _compiled.FALLBACK
