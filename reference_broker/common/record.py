"""The commit-log message record: layout, encoder, decoder and the dispatch-side check.

Layout (CommitLog.calMsgLength / MessageExtEncoder / checkMessageAndReturnSize, 4.9.8), big-endian,
offsets for IPv4 hosts (each IPv6 host adds 12 bytes and shifts what follows):

| #  | field                     | bytes   | @   | notes                                         |
|----|---------------------------|---------|-----|-----------------------------------------------|
| 1  | TOTALSIZE                 | 4       | 0   | whole record, this field included             |
| 2  | MAGICCODE                 | 4       | 4   | 0xDAA320A7 message, 0xCBD43194 blank (EOF)    |
| 3  | BODYCRC                   | 4       | 8   | crc32(body) & 0x7FFFFFFF                      |
| 4  | QUEUEID                   | 4       | 12  |                                               |
| 5  | FLAG                      | 4       | 16  | user flag                                     |
| 6  | QUEUEOFFSET               | 8       | 20  | consume-queue offset                          |
| 7  | PHYSICALOFFSET            | 8       | 28  | commit-log offset of this record              |
| 8  | SYSFLAG                   | 4       | 36  | MessageSysFlag                                |
| 9  | BORNTIMESTAMP             | 8       | 40  | ms                                            |
| 10 | BORNHOST                  | 8 / 20  | 48  | 4 or 16 address bytes + int port              |
| 11 | STORETIMESTAMP            | 8       | 56  | ms, monotonic in commit-log order             |
| 12 | STOREHOSTADDRESS          | 8 / 20  | 64  | as BORNHOST                                   |
| 13 | RECONSUMETIMES            | 4       | 72  |                                               |
| 14 | PreparedTransactionOffset | 8       | 76  |                                               |
| 15 | BODY                      | 4 + n   | 84  | int length + bytes                            |
| 16 | TOPIC                     | 1 + n   |     | byte length (short with the V2 magic) + UTF-8 |
| 17 | PROPERTIES                | 2 + n   |     | short length + UTF-8 (common/message.py)      |

The fixed part is 91 bytes with IPv4 hosts. The end-of-file blank is ``int size | int BLANK_MAGIC``
covering the rest of the file.

Whole-record CRC (RocketMQ 5.x ``enabledAppendPropCRC`` / ``forceVerifyPropCRC``; not in 4.9.8): the
PROPERTIES end with a reserved property of ``CRC32_RESERVED_LEN`` = 20 bytes,

| bytes | content                                                                                   |
|-------|-------------------------------------------------------------------------------------------|
| 9     | ``__CRC32#`` (MessageConst.PROPERTY_CRC32) + NAME_VALUE_SEPARATOR ``\x01``                |
| 10    | ``crc32(record[0 : TOTALSIZE - 20]) & 0x7FFFFFFF`` as decimal digits, least significant first, |
|       | padded with ``0`` (MessageDecoder.createCrc32)                                            |
| 1     | PROPERTY_SEPARATOR ``\x02``                                                               |

preceded by a ``\x02`` when the user's properties do not end with one. The CRC covers every field
before it, offsets and store timestamp included, so it is computed in the put lock once they are
known (DefaultAppendMessageCallback.doAppend). BODYCRC covers the body only: a page torn inside the
topic or properties of the last record would pass it, and that record would be served damaged.
"""

from __future__ import annotations

import enum
import ipaddress
import struct
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from reference_broker.common import compiled
from reference_broker.common import message as mc
from reference_broker.common.crc import raw_crc32
from reference_broker.common.dispatch import DispatchRequest
from reference_broker.common.java_hash import tags_hash_code

MESSAGE_MAGIC_CODE: Final = -626843481  # 0xDAA320A7
MESSAGE_MAGIC_CODE_V2: Final = -626843477  # 0xDAA320AB (5.x: 2-byte topic length)
BLANK_MAGIC_CODE: Final = -875286124  # 0xCBD43194
END_FILE_MIN_BLANK_LENGTH: Final = 4 + 4
FIXED_PART_V4: Final = 91
MAX_TOPIC_LENGTH: Final = 127  # Byte.MAX_VALUE (DefaultMessageStore.checkMessage)
MAX_PROPERTIES_LENGTH: Final = 32767  # Short.MAX_VALUE
SYSFLAG_POS: Final = 36
BORNHOST_POS: Final = 48
BLANK: Final = struct.Struct(">ii")
INT: Final = struct.Struct(">i")
_HOST_V6_FLAGS: Final = mc.BORNHOST_V6_FLAG | mc.STOREHOSTADDRESS_V6_FLAG
CRC32_RESERVED_LEN: Final = len(mc.PROPERTY_CRC32) + 1 + 10 + 1  # CommitLog.CRC32_RESERVED_LEN (5.x)
PROP_CRC_HEAD: Final = mc.PROPERTY_CRC32.encode() + b"\x01"
_PROP_CRC_RESERVE: Final = PROP_CRC_HEAD + b"0" * 10 + b"\x02"


def _header(born_v6: bool, store_v6: bool) -> struct.Struct:
    b = "16s" if born_v6 else "4s"
    s = "16s" if store_v6 else "4s"
    # TOTAL MAGIC CRC QID FLAG QOFF PHYS SYSFLAG BORNTS BORNIP BORNPORT STORETS STOREIP STOREPORT RECONSUME
    # PREPARED BODYLEN
    return struct.Struct(f">iiiiiqqiq{b}iq{s}iiqi")


HEADERS: Final = {(bv6, sv6): _header(bv6, sv6) for bv6 in (False, True) for sv6 in (False, True)}


def crc32(body: bytes | memoryview) -> int:
    """UtilAll.crc32: CRC32 masked to a non-negative int (common/crc.py)."""
    return raw_crc32(body) & 0x7FFFFFFF


_HOST_CACHE: dict[str, bytes] = {}


def host_bytes(host: str) -> bytes:
    """4 (IPv4) or 16 (IPv6) address bytes for a host string (cached: hosts repeat)."""
    b = _HOST_CACHE.get(host)
    if b is None:
        b = ipaddress.ip_address(host).packed
        if len(_HOST_CACHE) < 4096:
            _HOST_CACHE[host] = b
    return b


_HOST_STR_CACHE: dict[bytes, str] = {}


def bytes_to_host(raw: bytes) -> str:
    """The host string of 4 or 16 address bytes (cached: decoding a pull's messages asks for the same few
    hosts twice per message, and ``ipaddress`` takes ~2 µs a time)."""
    host = _HOST_STR_CACHE.get(raw)
    if host is None:
        host = str(ipaddress.ip_address(raw))
        if len(_HOST_STR_CACHE) < 4096:
            _HOST_STR_CACHE[raw] = host
    return host


def record_length(body_len: int, topic_len: int, props_len: int, born_v6: bool = False,
                  store_v6: bool = False) -> int:
    """CommitLog.calMsgLength."""
    return FIXED_PART_V4 + (12 if born_v6 else 0) + (12 if store_v6 else 0) + body_len + topic_len + props_len


@dataclass(slots=True)
class MessageExtBrokerInner:
    """A message on its way into the store (MessageExtBrokerInner)."""

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    properties_bytes: bytes | None = None  # encoded form; rebuilt from ``properties`` when None

    def encoded_properties(self) -> bytes:
        if self.properties_bytes is None:
            self.properties_bytes = mc.properties_to_bytes(self.properties)
        return self.properties_bytes

    def set_property(self, key: str, value: str) -> None:
        self.properties[key] = value
        self.properties_bytes = None

    def clear_property(self, key: str) -> None:
        if self.properties.pop(key, None) is not None:
            self.properties_bytes = None

    @property
    def tags(self) -> str | None:
        return self.properties.get(mc.PROPERTY_TAGS)

    @property
    def delay_time_level(self) -> int:
        v = self.properties.get(mc.PROPERTY_DELAY_TIME_LEVEL)
        try:
            return int(v) if v else 0
        except ValueError:
            return 0


@dataclass(slots=True)
class MessageExt:
    """A message read back from the commit log (MessageExt, decoded by MessageDecoder.decode)."""

    topic: str
    body: bytes
    queue_id: int
    flag: int
    queue_offset: int
    commit_log_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: tuple[str, int]
    store_timestamp: int
    store_host: tuple[str, int]
    reconsume_times: int
    prepared_transaction_offset: int
    properties: dict[str, str]
    store_size: int
    body_crc: int

    @property
    def tags(self) -> str | None:
        return self.properties.get(mc.PROPERTY_TAGS)

    @property
    def keys(self) -> str:
        return self.properties.get(mc.PROPERTY_KEYS, "")

    @property
    def msg_id(self) -> str:
        """The client id (UNIQ_KEY) when present, else the offsetMsgId (MessageClientExt.getMsgId)."""
        return self.properties.get(mc.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or self.offset_msg_id

    @property
    def offset_msg_id(self) -> str:
        return create_message_id(host_bytes(self.store_host[0]), self.store_host[1], self.commit_log_offset)


# ---- offsetMsgId (MessageDecoder.createMessageId / decodeMessageId) ------------------------------


def create_message_id(store_ip: bytes, store_port: int, commit_log_offset: int) -> str:
    """ip (4|16) + port int + offset long, as uppercase hex (32 or 56 characters)."""
    return (store_ip + store_port.to_bytes(4, "big") + commit_log_offset.to_bytes(8, "big", signed=True)).hex().upper()


class MessageIdError(ValueError):
    pass


def decode_message_id(msg_id: str) -> tuple[str, int, int]:
    """(store host, port, commit-log offset) from an offsetMsgId; MessageIdError when malformed."""
    if len(msg_id) not in (32, 56):
        raise MessageIdError(f"offsetMsgId must be 32 or 56 hex characters, got {len(msg_id)}")
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise MessageIdError("offsetMsgId is not hexadecimal") from None
    ip_len = 4 if len(raw) == 16 else 16
    port = int.from_bytes(raw[ip_len : ip_len + 4], "big")
    offset = int.from_bytes(raw[ip_len + 4 :], "big", signed=True)
    return bytes_to_host(raw[:ip_len]), port, offset


# ---- encoding --------------------------------------------------------------------------------


class RecordLayout(NamedTuple):
    """What the field lengths alone decide about a record: one Struct for all of it (one ``pack_into`` per
    record is several times cheaper than packing the header and assigning slices of the mapping one by one),
    TOTALSIZE, its bytes, and their crc32 (where the whole-record CRC starts)."""

    st: struct.Struct
    size: int
    size_b: bytes
    size_crc: int


_LayoutKey = tuple[int, int, int, bool, bool]  # body, topic and properties lengths; born, store host is v6
_LAYOUTS: dict[_LayoutKey, RecordLayout] = {}
_LAYOUTS_MAX: Final = 4096


def record_layout(key: _LayoutKey) -> RecordLayout:
    """The layout of a record of these field lengths, cached (prepare_record looks in the cache itself)."""
    layout = _LAYOUTS.get(key)
    if layout is None:
        body_len, topic_len, props_len, born_v6, store_v6 = key
        b = "16s" if born_v6 else "4s"
        h = "16s" if store_v6 else "4s"
        st = struct.Struct(f">iiiiiqqiq{b}iq{h}iiqi{body_len}sB{topic_len}sH{props_len}s")
        size_b = INT.pack(st.size)
        layout = RecordLayout(st, st.size, size_b, raw_crc32(size_b))
        if len(_LAYOUTS) >= _LAYOUTS_MAX:
            _LAYOUTS.clear()
        _LAYOUTS[key] = layout
    return layout


_HOST_BITS: Final = {(False, False): 0, (True, False): mc.BORNHOST_V6_FLAG,
                     (False, True): mc.STOREHOSTADDRESS_V6_FLAG, (True, True): _HOST_V6_FLAGS}


def host_flags(sys_flag: int, born_v6: bool, store_v6: bool) -> int:
    """SYSFLAG with the host-width bits of this record's own hosts, never those of a record it was rebuilt
    from (a retry or delay re-put keeps the old record's flags otherwise)."""
    return (sys_flag & ~_HOST_V6_FLAGS) | _HOST_BITS[born_v6, store_v6]


class PreparedRecord(NamedTuple):
    """One record with everything the put lock does not decide (MessageExtEncoder's part, 4.9.8): its
    layout, BODYCRC, SYSFLAG with this record's host bits, and the bytes of its variable fields. A tuple:
    one is made per put, and the lock unpacks it at once."""

    layout: RecordLayout
    body_crc: int
    queue_id: int
    flag: int
    sys_flag: int
    born_ts: int
    born_ip: bytes
    born_port: int
    store_ip: bytes
    store_port: int
    reconsume: int
    prepared_offset: int
    body: bytes
    topic_b: bytes
    props_b: bytes

    @property
    def size(self) -> int:
        """TOTALSIZE."""
        return self.layout.size


_new_tuple = tuple.__new__  # a NamedTuple's own __new__ is Python code: this is the C one, run per put


def prepare_record(topic_b: bytes, body: bytes, props_b: bytes, queue_id: int, flag: int, sys_flag: int,
                   born_ts: int, born_ip: bytes, born_port: int, store_ip: bytes, store_port: int, reconsume: int = 0,
                   prepared_offset: int = 0, body_crc: int = -1) -> PreparedRecord:
    """A record ready for ``write_record``, done before the put lock (sizes are the caller's to check;
    ``body_crc`` < 0 computes BODYCRC here)."""
    born_v6 = len(born_ip) == 16
    store_v6 = len(store_ip) == 16
    key = (len(body), len(topic_b), len(props_b), born_v6, store_v6)
    layout = _LAYOUTS.get(key) or record_layout(key)
    return _new_tuple(PreparedRecord, (
        layout, raw_crc32(body) & 0x7FFFFFFF if body_crc < 0 else body_crc, queue_id, flag,
        (sys_flag & ~_HOST_V6_FLAGS) | _HOST_BITS[born_v6, store_v6], born_ts, born_ip, born_port, store_ip,
        store_port, reconsume, prepared_offset, body, topic_b, props_b))


def write_record(out: bytearray | memoryview, at: int, r: PreparedRecord, queue_offset: int, phys_offset: int,
                 store_ts: int, prop_crc: bool) -> int:
    """The store's one encoder (single puts, batches, re-puts, the bare baseline, tests): write ``r`` at
    ``out[at:]`` with what the put lock decided — queue offset, physical offset, store timestamp — and, with
    ``prop_crc``, the whole-record CRC over all of it (DefaultAppendMessageCallback.doAppend). Returns TOTALSIZE.

    TOTALSIZE is written last. Until then the record reads as size 0, which recovery treats as the end of the
    valid log: a process killed in the put lock (after a thread switch, say) leaves a torn tail that is cut,
    never a complete record without its CRC, which recovery would cut as damage and quarantine as intact.
    """
    ((st, total, size_b, size_crc), body_crc, queue_id, flag, sys_flag, born_ts, born_ip, born_port, store_ip,
     store_port, reconsume, prepared_offset, body, topic_b, props_b) = r
    st.pack_into(out, at, 0, MESSAGE_MAGIC_CODE, body_crc, queue_id, flag, queue_offset, phys_offset, sys_flag,
                 born_ts, born_ip, born_port, store_ts, store_ip, store_port, reconsume, prepared_offset,
                 len(body), body, len(topic_b), topic_b, len(props_b), props_b)
    if prop_crc:
        t = at + total - CRC32_RESERVED_LEN
        # The CRC covers TOTALSIZE as it will read: its bytes first (size_crc), then the rest (crc32's
        # running value).
        out[t + 9 : t + 19] = crc_digits(raw_crc32(out[at + 4 : t], size_crc))
    out[at : at + 4] = size_b
    return total


def strip_prop_crc(props_b: bytes) -> bytes:
    """Properties without a ``__CRC32#`` pair: a message re-put from a stored record (retry, delay
    delivery) carries its old one, and a client may send one; the store writes its own."""
    return b"\x02".join(p for p in props_b.split(b"\x02") if p and not p.startswith(PROP_CRC_HEAD))


def reserve_prop_crc(props_b: bytes) -> bytes:
    """Properties with the whole-record CRC's reserved tail (digits filled by ``write_record``)."""
    if props_b and props_b[-1] != 2:
        return props_b + b"\x02" + _PROP_CRC_RESERVE
    return props_b + _PROP_CRC_RESERVE


def stored_props_length(props_b: bytes, prop_crc: bool = True) -> int:
    """Length of PROPERTIES as the store writes them: with the whole-record CRC's tail when on."""
    return len(reserve_prop_crc(props_b)) if prop_crc else len(props_b)


def crc_digits(crc: int) -> bytes:
    """The whole-record CRC as the property stores it (MessageDecoder.createCrc32): ten digits, zero-padded,
    least significant first."""
    return (b"%010d" % (crc & 0x7FFFFFFF))[::-1]


def prop_crc_ok(buf: memoryview | bytes, pos: int, total: int) -> bool:
    """The record at ``pos`` ends with a whole-record CRC that matches it.

    Stricter than RocketMQ 5.x, which accepts a record whose CRC property is missing (with a warning):
    a tear that zeroes the end of a record removes that property, so here a missing one is damage. The
    commit log asks this only of records written with the CRC on (``commit_log.PROP_CRC_SINCE_FILE``).
    """
    t = pos + total - CRC32_RESERVED_LEN
    if t < pos:
        return False
    # The tail must read exactly as write_record writes this CRC: one comparison, no digit parsing
    # (ten digits, zero-padded, name the value uniquely, so this is checkMessageAndReturnSize's test).
    # Measured against a 100,000-entry digit table: the table's cache misses cost more than formatting.
    return buf[t : pos + total] == PROP_CRC_HEAD + crc_digits(raw_crc32(buf[pos:t])) + b"\x02"


def write_blank(buf: bytearray | memoryview, pos: int, size: int) -> None:
    """End-of-file filler: ``int size | int BLANK_MAGIC`` (rest of the file untouched)."""
    BLANK.pack_into(buf, pos, size, BLANK_MAGIC_CODE)


# ---- decoding --------------------------------------------------------------------------------


class RecordError(ValueError):
    """A record that does not parse: bad magic, bad length, bad CRC."""


def _parse(buf: memoryview | bytes, pos: int, limit: int, check_crc: bool, verify_prop_crc: bool = False
           ) -> tuple[tuple[Any, ...], int, int, int, int, int, int]:
    """Header fields plus (body_start, body_len, topic_start, topic_len, props_start, props_len).

    With ``check_crc``, ``verify_prop_crc`` checks the whole-record CRC instead of BODYCRC, as
    forceVerifyPropCRC does in checkMessageAndReturnSize (5.x).
    """
    if limit - pos < 8:
        raise RecordError("truncated header")
    total, magic = BLANK.unpack_from(buf, pos)
    if magic == BLANK_MAGIC_CODE:
        raise EOFError
    if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
        raise RecordError(f"bad magic code {magic & 0xFFFFFFFF:#x}")
    if total < FIXED_PART_V4 or total > limit - pos:
        raise RecordError(f"bad total size {total}")
    (sys_flag,) = INT.unpack_from(buf, pos + SYSFLAG_POS)
    hdr = HEADERS[(bool(sys_flag & mc.BORNHOST_V6_FLAG), bool(sys_flag & mc.STOREHOSTADDRESS_V6_FLAG))]
    if total < hdr.size + 3:
        raise RecordError(f"bad total size {total}")
    fields_ = hdr.unpack_from(buf, pos)
    body_len = fields_[-1]
    body_start = pos + hdr.size
    p = body_start + body_len
    end = pos + total
    if body_len < 0 or p + 3 > end:
        raise RecordError(f"bad body length {body_len}")
    if magic == MESSAGE_MAGIC_CODE:
        topic_len = buf[p]
        topic_start = p + 1
    else:
        topic_len = int.from_bytes(buf[p : p + 2], "big")
        topic_start = p + 2
    p = topic_start + topic_len
    if p + 2 > end:
        raise RecordError("bad topic length")
    props_len = int.from_bytes(buf[p : p + 2], "big")
    props_start = p + 2
    if props_start + props_len != end:
        raise RecordError(f"record length mismatch: total {total}, fields end at {props_start + props_len - pos}")
    if check_crc:
        if verify_prop_crc:
            if not prop_crc_ok(buf, pos, total):
                raise RecordError("whole-record CRC missing or mismatched")
        elif crc32(buf[body_start:body_start + body_len]) != fields_[2]:
            raise RecordError("body CRC mismatch")
    return fields_, body_start, body_len, topic_start, topic_len, props_start, props_len


_BLANK_REQ: Final = DispatchRequest("", 0, 0, 0, 0, 0, 0, "", None, 0, 0, True)  # size 0: roll to the next file


def check_message_and_return_size(
    buf: memoryview | bytes,
    pos: int,
    limit: int,
    check_crc: bool,
    delay_table_ms: dict[int, int] | None = None,
    verify_prop_crc: bool = False,
) -> DispatchRequest:
    """CommitLog.checkMessageAndReturnSize: a DispatchRequest, size 0 for a blank, -1 on damage."""
    try:
        f, _bs, _bl, ts, tl, ps, pl = _parse(buf, pos, limit, check_crc, verify_prop_crc)
    except EOFError:
        return _BLANK_REQ
    except (RecordError, UnicodeDecodeError, IndexError, struct.error):
        return DispatchRequest.failure(-1)
    try:
        topic = bytes(buf[ts : ts + tl]).decode("utf-8")
    except UnicodeDecodeError:
        return DispatchRequest.failure(-1)
    tags_code, keys, uniq = _dispatch_props(bytes(buf[ps : ps + pl]), topic, f[11], delay_table_ms)
    # f: TOTAL MAGIC CRC QID FLAG QOFF PHYS SYSFLAG BORNTS BORNIP BORNPORT STORETS STOREIP STOREPORT RECONSUME
    #    PREPARED BODYLEN
    return DispatchRequest(topic, f[3], f[6], f[0], tags_code, f[11], f[5], keys, uniq, f[7], f[15], True, f[8])



class ScanEnd(enum.Enum):
    """Why ``scan_records`` stopped."""

    LIMIT = "limit"  # reached ``limit`` or ``max_records``: more may follow
    BLANK = "blank"  # an end-of-file blank record: the rest of this file is padding
    BAD = "bad"  # a record that does not parse (damage, or unwritten space) at the returned position


_FAST_HEADER: Final = HEADERS[(False, False)]
_FAST_HEADER_SIZE: Final = _FAST_HEADER.size
_TOPIC_CACHE: dict[bytes, str] = {}
_TOPIC_CACHE_MAX: Final = 4096


_TAGS_K, _TAGS_PK = mc.property_keys(mc.PROPERTY_TAGS.encode())
_KEYS_K, _KEYS_PK = mc.property_keys(mc.PROPERTY_KEYS.encode())
_UNIQ_K, _UNIQ_PK = mc.property_keys(mc.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX.encode())


def _dispatch_props(raw: bytes, topic: str, store_ts: int, delay_table_ms: dict[int, int] | None
                    ) -> tuple[int, str, str | None]:
    """(tags code, keys, UNIQ_KEY) of a record's properties: what dispatch reads (checkMessageAndReturnSize).
    The schedule topic's tag code is the delivery time."""
    if not raw:
        return 0, "", None
    find = mc.find_property
    tags_code = 0
    v = find(raw, _TAGS_K, _TAGS_PK)
    if v:
        tags_code = tags_hash_code(v.decode("utf-8", "replace"))
    v = find(raw, _KEYS_K, _KEYS_PK)
    keys = v.decode("utf-8", "replace") if v else ""
    v = find(raw, _UNIQ_K, _UNIQ_PK)
    uniq = v.decode("utf-8", "replace") if v else None
    if topic == mc.SCHEDULE_TOPIC and delay_table_ms is not None:
        v = mc.property_from_bytes(raw, b"DELAY")
        if v and v.isdigit() and int(v) > 0:
            level = min(int(v), len(delay_table_ms))
            tags_code = store_ts + delay_table_ms.get(level, 1000)
    return tags_code, keys, uniq


def scan_records(buf: memoryview | bytes, pos: int, limit: int, check_crc: bool,
                 delay_table_ms: dict[int, int] | None = None, max_records: int = 1 << 30,
                 verify_prop_crc: bool = False) -> tuple[list[DispatchRequest], int, ScanEnd]:
    """``check_message_and_return_size`` over a run of records: (requests, end position, why it stopped).

    The dispatch and recovery hot path (one call per run, not per record): the common record shape
    (IPv4 hosts, the 4.x magic code) is checked and parsed inline with one header unpack; anything
    else takes ``check_message_and_return_size``, so both give the same requests for the same bytes.
    """
    short = limit > len(buf)  # the bytes up to ``limit`` are not all there: damage, as for the per-record check
    if short:
        limit = len(buf)
    out: list[DispatchRequest] = []
    append = out.append
    unpack = _FAST_HEADER.unpack_from
    hsize = _FAST_HEADER_SIZE
    zcrc = raw_crc32
    topics = _TOPIC_CACHE
    n = 0
    while pos < limit:
        if n >= max_records:
            return out, pos, ScanEnd.LIMIT
        req: DispatchRequest | None = None
        if limit - pos >= hsize:
            f = unpack(buf, pos)
            total = f[0]
            body_len = f[16]
            end = pos + total
            p = pos + hsize + body_len
            if (f[1] == MESSAGE_MAGIC_CODE and not f[7] & _HOST_V6_FLAGS and FIXED_PART_V4 <= total <= limit - pos
                    and body_len >= 0 and p + 3 <= end):
                tl = buf[p]
                pp = p + 1 + tl
                if pp + 2 <= end and pp + 2 + ((buf[pp] << 8) | buf[pp + 1]) == end and (
                        not check_crc or (prop_crc_ok(buf, pos, total) if verify_prop_crc
                                          else zcrc(buf[pos + hsize:p]) & 0x7FFFFFFF == f[2])):
                    topic_b = bytes(buf[p + 1:pp])
                    topic = topics.get(topic_b)
                    if topic is None:
                        try:
                            topic = topic_b.decode("utf-8")
                        except UnicodeDecodeError:
                            return out, pos, ScanEnd.BAD
                        if len(topics) >= _TOPIC_CACHE_MAX:
                            topics.clear()
                        topics[topic_b] = topic
                    tags_code, keys, uniq = _dispatch_props(bytes(buf[pp + 2:end]), topic, f[11], delay_table_ms)
                    req = DispatchRequest(topic, f[3], f[6], total, tags_code, f[11], f[5], keys, uniq, f[7], f[15],
                                          True, f[8])
        if req is None:
            req = check_message_and_return_size(buf, pos, limit, check_crc, delay_table_ms, verify_prop_crc)
            if not req.success or req.msg_size < 0:
                return out, pos, ScanEnd.BAD
            if req.msg_size == 0:
                return out, pos, ScanEnd.BLANK
        append(req)
        pos += req.msg_size
        n += 1
    return out, pos, ScanEnd.BAD if short else ScanEnd.LIMIT




def decode_message(buf: memoryview | bytes, pos: int = 0, limit: int | None = None, *,
                   check_crc: bool = False, verify_prop_crc: bool = False) -> MessageExt:
    """MessageDecoder.decode: a full MessageExt; RecordError when the bytes are not a record."""
    end = len(buf) if limit is None else limit
    try:
        f, bs, bl, ts, tl, ps, pl = _parse(buf, pos, end, check_crc, verify_prop_crc)
    except EOFError:
        raise RecordError("blank (end of file) record") from None
    except (IndexError, struct.error) as e:
        raise RecordError(str(e)) from None
    # Positional, in MessageExt's field order: the consumer's hot path (a keyword call costs more).
    return MessageExt(str(buf[ts : ts + tl], "utf-8", "replace"), bytes(buf[bs : bs + bl]), f[3], f[4], f[5], f[6],
                      f[7], f[8], (bytes_to_host(f[9]), f[10]), f[11], (bytes_to_host(f[12]), f[13]), f[14], f[15],
                      mc.bytes_to_properties(buf[ps : ps + pl]), f[0], f[2])


def record_properties(raw: bytes | memoryview) -> dict[str, str]:
    """MessageDecoder.decodeProperties: one record's properties, nothing else decoded — the SQL92 filter reads
    them for each message it looks at, so only the lengths on the way are read; RecordError when the bytes
    are not a record."""
    try:
        total, magic = BLANK.unpack_from(raw, 0)
        (sys_flag,) = INT.unpack_from(raw, SYSFLAG_POS)
        hdr = HEADERS[(bool(sys_flag & mc.BORNHOST_V6_FLAG), bool(sys_flag & mc.STOREHOSTADDRESS_V6_FLAG))]
        (body_len,) = INT.unpack_from(raw, hdr.size - 4)  # BODY's length closes the fixed part
        p = hdr.size + body_len
        if magic == MESSAGE_MAGIC_CODE:
            p += 1 + raw[p]
        elif magic == MESSAGE_MAGIC_CODE_V2:
            p += 2 + int.from_bytes(raw[p : p + 2], "big")
        else:
            raise RecordError(f"bad magic code {magic & 0xFFFFFFFF:#x}")
        props_len = int.from_bytes(raw[p : p + 2], "big")
        p += 2
    except (IndexError, struct.error) as e:
        raise RecordError(str(e)) from None
    if body_len < 0 or p + props_len != total or total > len(raw):
        raise RecordError("record length mismatch")
    return mc.bytes_to_properties(raw[p : p + props_len])


def decode_messages(buf: bytes | memoryview) -> list[MessageExt]:
    """Decode a run of records (a pull response body)."""
    out: list[MessageExt] = []
    pos = 0
    n = len(buf)
    while pos < n:
        m = decode_message(buf, pos, n)
        out.append(m)
        pos += m.store_size
    return out


def store_timestamp_at(buf: memoryview | bytes, pos: int) -> int:
    """STORETIMESTAMP of the record at ``pos`` (its offset depends on the born host's family)."""
    (sys_flag,) = INT.unpack_from(buf, pos + SYSFLAG_POS)
    off = BORNHOST_POS + (20 if sys_flag & mc.BORNHOST_V6_FLAG else 8)
    return int(struct.unpack_from(">q", buf, pos + off)[0])


# ---- the compiled twins (common/compiled.py) ------------------------------------------------------------

# prepare_record has no twin: compiled as it stands it saved ~0.1 µs a put (BENCHMARKS.md, "Compiled paths").
pure_write_record: Final = write_record  # the reference: what the compiled functions must equal
pure_scan_records: Final = scan_records
_compiled = compiled.load("_record_c")
if _compiled is not None:
    _compiled.bind(pure_write_record, raw_crc32, _HOST_V6_FLAGS, MESSAGE_MAGIC_CODE)
    _compiled.bind_scan(pure_scan_records, check_message_and_return_size, DispatchRequest, ScanEnd, _TOPIC_CACHE,
                        _TOPIC_CACHE_MAX, tags_hash_code, _dispatch_props, mc.SCHEDULE_TOPIC)
    write_record = _compiled.write_record
    scan_records = _compiled.scan_records
