"""This module owns the remoting command model and its encoding (RemotingCommand.java, 4.9.8).

Frame (all big-endian; Netty ``LengthFieldBasedFrameDecoder(16 MiB, 0, 4, 0, 4)`` strips the length)::

    int   length                      4 + headerLen + bodyLen (excludes itself)
    int   serializeType << 24 | headerLen
    byte  header[headerLen]
    byte  body[...]

JSON header (serializeType 0; fastjson's output, so keys in its default SortField order, nulls omitted)::

    {"code":int, "extFields":{str:str}, "flag":int, "language":"JAVA", "opaque":int,
     "remark":str, "serializeTypeCurrentRPC":"JSON", "version":int}

ROCKETMQ binary header (serializeType 1; RocketMQSerializable)::

    short code | byte language | short version | int opaque | int flag
    int remarkLen | byte remark[remarkLen]            (0 = null remark)
    int extLen    | extLen bytes of entries:          (0 = no extFields)
                    short keyLen | key | int valLen | val

Decoding lives in ``codec`` so that every peer error is raised by one module; the structs are shared.
"""

from __future__ import annotations

import itertools
import json
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from reference_broker.remoting.codes import FLAG_ONEWAY, FLAG_RESPONSE, LanguageCode, SerializeType

FRAME_PREFIX: Final = struct.Struct(">ii")  # length, serializeType << 24 | headerLen
BIN_FIXED: Final = struct.Struct(">hbhii")  # code, language, version, opaque, flag
INT: Final = struct.Struct(">i")
SHORT: Final = struct.Struct(">h")

HEADER_LEN_MASK: Final = 0xFFFFFF  # the low 24 bits of the second int; the top byte is the serialize type
INT32_MIN: Final = -(2**31)
INT32_MAX: Final = 2**31 - 1
INT16_MIN: Final = -(2**15)
INT16_MAX: Final = 2**15 - 1


def _std_loads(data: bytes) -> Any:
    # Decode first: json.loads(bytes) would also sniff UTF-16/32, which the wire never carries.
    return json.loads(data.decode("utf-8"))


def _std_dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


json_loads: Callable[[bytes], Any] = _std_loads
json_dumps: Callable[[Any], bytes] = _std_dumps
try:
    import orjson
except ImportError:  # pragma: no cover - orjson is a declared dependency; json is the fallback
    pass
else:
    json_loads = orjson.loads
    json_dumps = orjson.dumps


_DIGITS: Final = frozenset(b"-0123456789")
_SPACE: Final = frozenset(b" \t\r\n")


def quote_bare_keys(data: bytes) -> bytes:
    """fastjson's output made standard JSON: RocketMQ 4.9.8 writes a map whose keys are not strings (the name
    server's ``brokerAddrs``, a ``HashMap<Long, String>``) with the keys bare, ``{0:"127.0.0.1:10911"}``. Each
    bare numeric key of an object is quoted; strings and arrays are left as they are."""
    out = bytearray()
    stack: list[int] = []  # the open containers: ord("{") or ord("[")
    i, n = 0, len(data)
    while i < n:
        c = data[i]
        if c == 0x22:  # a string, copied whole (escapes included)
            j = i + 1
            while j < n and data[j] != 0x22:
                j += 2 if data[j] == 0x5C else 1
            out += data[i : j + 1]
            i = j + 1
            continue
        out.append(c)
        i += 1
        if c in (0x7B, 0x5B):  # { [
            stack.append(c)
        elif c in (0x7D, 0x5D) and stack:  # } ]
            stack.pop()
        if c in (0x7B, 0x2C) and stack and stack[-1] == 0x7B:  # a key may follow: { or , in an object
            while i < n and data[i] in _SPACE:
                out.append(data[i])
                i += 1
            j = i
            while j < n and data[j] in _DIGITS:
                j += 1
            k = j
            while k < n and data[k] in _SPACE:
                k += 1
            if j > i and k < n and data[k] == 0x3A:  # a bare number, then ':'
                out += b'"' + data[i:j] + b'"'
                i = j
    return bytes(out)


def fastjson_loads(data: bytes) -> Any:
    """``json_loads`` for bodies RocketMQ's fastjson wrote (routes, cluster info): bare numeric keys are quoted
    first when the body is not standard JSON."""
    try:
        return json_loads(data)
    except ValueError:
        fixed = quote_bare_keys(data)
        if fixed == data:
            raise
        return json_loads(fixed)


# Java: static AtomicInteger requestId starting at 0; getAndIncrement wraps at 2^31 to negative.
_opaque_counter = itertools.count()
_opaque_lock = threading.Lock()


def next_opaque() -> int:
    with _opaque_lock:  # count.__next__ is atomic under the GIL only; the lock keeps it so without one
        n = next(_opaque_counter)
    n &= 0xFFFFFFFF
    return n - 0x100000000 if n > INT32_MAX else n


@dataclass(slots=True)
class RemotingCommand:
    code: int
    # The JSON header carries LanguageCode's name; kept as a name so unknown peers' names survive a relay.
    language: str = "JAVA"
    # Java sets this from the rocketmq.remoting.version system property; 0 when unset.
    version: int = 0
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    # Not on the wire: when the server decoded the frame (event-loop time), so a handler can tell how long
    # the request queued behind others (BrokerFastFailure's "period in queue").
    received_at: float = field(default=0.0, repr=False, compare=False)
    # Not on the wire either: the header encoding the frame arrived in; a response goes back in the same one
    # (RemotingCommand.createResponseCommand keeps the request's serializeTypeCurrentRPC).
    serialize_type: SerializeType = field(default=SerializeType.JSON, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.language, LanguageCode):  # accept the enum, but the wire (JSON) wants its name
            self.language = self.language.name

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)


def create_request(
    code: int,
    ext_fields: dict[str, str] | None = None,
    body: bytes = b"",
    *,
    oneway: bool = False,
    language: str = "JAVA",
    version: int = 0,
) -> RemotingCommand:
    return RemotingCommand(
        code=int(code),
        language=language,
        version=version,
        opaque=next_opaque(),
        flag=FLAG_ONEWAY if oneway else 0,
        ext_fields=dict(ext_fields) if ext_fields else {},
        body=body,
    )


def create_response(
    request: RemotingCommand,
    code: int,
    remark: str | None = None,
    ext_fields: dict[str, str] | None = None,
    body: bytes = b"",
) -> RemotingCommand:
    # The opaque is the only thing tying a response to its request (NettyRemotingAbstract.responseTable).
    return RemotingCommand(
        code=int(code),
        # language and version stay the responder's own defaults, as createResponseCommand does.
        opaque=request.opaque,
        flag=FLAG_RESPONSE,
        remark=remark,
        ext_fields=dict(ext_fields) if ext_fields else {},
        body=body,
    )


def _check_range(name: str, value: int, lo: int, hi: int) -> None:
    if not lo <= value <= hi:
        raise ValueError(f"{name}={value} does not fit the wire field [{lo}, {hi}]")


def _json_header(cmd: RemotingCommand) -> bytes:
    for name in ("code", "version", "opaque", "flag"):
        _check_range(name, getattr(cmd, name), INT32_MIN, INT32_MAX)
    header: dict[str, Any] = {"code": cmd.code}
    if cmd.ext_fields:
        header["extFields"] = cmd.ext_fields
    header["flag"] = cmd.flag
    header["language"] = cmd.language
    header["opaque"] = cmd.opaque
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    header["serializeTypeCurrentRPC"] = "JSON"
    header["version"] = cmd.version
    return json_dumps(header)


def _binary_header(cmd: RemotingCommand) -> bytes:
    # Java casts code/version to short silently; refusing here keeps a round trip lossless.
    _check_range("code", cmd.code, INT16_MIN, INT16_MAX)
    _check_range("version", cmd.version, INT16_MIN, INT16_MAX)
    _check_range("opaque", cmd.opaque, INT32_MIN, INT32_MAX)
    _check_range("flag", cmd.flag, INT32_MIN, INT32_MAX)
    try:
        language = LanguageCode[cmd.language]
    except KeyError:
        raise ValueError(f"language {cmd.language!r} has no ROCKETMQ binary code") from None
    parts = [BIN_FIXED.pack(cmd.code, language, cmd.version, cmd.opaque, cmd.flag)]
    remark = cmd.remark.encode("utf-8") if cmd.remark else b""
    parts += (INT.pack(len(remark)), remark)
    ext: list[bytes] = []
    for key, value in cmd.ext_fields.items():
        kb = key.encode("utf-8")
        vb = value.encode("utf-8")
        _check_range("extFields key length", len(kb), 0, INT16_MAX)
        ext += (SHORT.pack(len(kb)), kb, INT.pack(len(vb)), vb)
    ext_bytes = b"".join(ext)
    parts += (INT.pack(len(ext_bytes)), ext_bytes)
    return b"".join(parts)


def encode(cmd: RemotingCommand, serialize_type: SerializeType = SerializeType.JSON) -> bytes:
    """The whole frame, length prefix included. Bad values are the caller's bug: ValueError, not ProtocolError."""
    header = _json_header(cmd) if serialize_type == SerializeType.JSON else _binary_header(cmd)
    if len(header) > HEADER_LEN_MASK:
        raise ValueError(f"header of {len(header)} bytes does not fit 24 bits")
    length = 4 + len(header) + len(cmd.body)
    _check_range("frame length", length, 4, INT32_MAX)
    return b"".join((FRAME_PREFIX.pack(length, (int(serialize_type) << 24) | len(header)), header, cmd.body))
