"""The read-side record check: a record is served (pulled, looked up by offset, id or key, sent back) only
when its checksums hold.

Not in RocketMQ 4.9.8, whose reads (DefaultMessageStore.getMessage, lookMessageByOffset) hand out whatever
bytes the consume-queue unit points to: a record damaged after it was dispatched (a bad sector, a stray
write, damage recovery never scanned because it lay before the checkpoint) reaches consumers with a bad
BODYCRC. Here such a record is skipped like a missing message (the caller counts and logs it), so a consumer
moves past it and never sees bytes that fail their CRC.

Cost on the pull path: one struct unpack and one CRC over the record (the whole-record CRC covers the body,
so a record that carries it needs no second pass for BODYCRC).
"""

from __future__ import annotations

import struct
from typing import Final

from reference_broker.common import message as mc
from reference_broker.common import record as rec
from reference_broker.common.crc import raw_crc32

_CRC_TAIL: Final = rec.CRC32_RESERVED_LEN
_CRC_HEAD_LEN: Final = len(rec.PROP_CRC_HEAD)
_HEAD: Final = struct.Struct(">iiii")  # TOTALSIZE MAGICCODE BODYCRC QUEUEID
_MAGICS: Final = (rec.MESSAGE_MAGIC_CODE, rec.MESSAGE_MAGIC_CODE_V2)


def record_intact(raw: bytes, require_prop_crc: bool) -> bool:
    """``raw`` is exactly one message record whose checksums hold.

    The whole-record CRC (``__CRC32#`` at the end of PROPERTIES) is checked where present; with
    ``require_prop_crc`` (the record lies where every record was written with it) a missing one is damage,
    as in recovery (commit_log.PROP_CRC_SINCE_FILE). Otherwise BODYCRC is checked.
    """
    n = len(raw)
    t = n - _CRC_TAIL
    if n >= rec.FIXED_PART_V4 and raw[t : t + _CRC_HEAD_LEN] == rec.PROP_CRC_HEAD:
        # The CRC covers every byte before it, TOTALSIZE and MAGICCODE included, so a match needs no other
        # check: a slice of the wrong length puts the tail elsewhere and fails it.
        return rec.prop_crc_ok(raw, 0, n)
    if require_prop_crc or n < rec.FIXED_PART_V4:
        return False
    total, magic, body_crc, _qid = _HEAD.unpack_from(raw, 0)
    if total != n or magic not in _MAGICS:
        return False
    (sys_flag,) = rec.INT.unpack_from(raw, rec.SYSFLAG_POS)
    hdr = rec.HEADERS[(bool(sys_flag & mc.BORNHOST_V6_FLAG), bool(sys_flag & mc.STOREHOSTADDRESS_V6_FLAG))]
    hsize = hdr.size
    if n < hsize + 3:
        return False
    (body_len,) = rec.INT.unpack_from(raw, hsize - 4)
    if body_len < 0 or hsize + body_len + 3 > n:
        return False
    return bool(raw_crc32(raw[hsize : hsize + body_len]) & 0x7FFFFFFF == body_crc)
