"""This module owns the names and the sidecar format of the store's quarantine directory, shared by the store
(which writes it), the broker's runtime stats, the admin tool and the chaos harness (which read it).

Not a RocketMQ format: RocketMQ 4.9.8 has no quarantine (recovery cuts the commit log after the first bad
record and the bytes are gone). Layout, under ``{storePathRootDir}/quarantine/``:

| file                                            | content                                          |
|-------------------------------------------------|--------------------------------------------------|
| ``commitlog-<file>-<offset>-<time>.bin``         | the bytes recovery cut from commit-log file      |
|                                                 | ``<file>`` (20 digits) from absolute ``<offset>``  |
|                                                 | (20 digits) up to its last non-zero byte, at      |
|                                                 | ``<time>`` (UTC ``yyyyMMddTHHmmssSSSZ``)          |
| same name, ``.json``                             | the sidecar below, written after the ``.bin``     |

Sidecar keys: ``source`` (the commit-log file's path relative to the store root), ``offset`` (absolute
commit-log offset of the first byte), ``bytes``, ``intact_records`` / ``intact_bytes`` (records in the cut
bytes that parse with a good CRC at their own offset: messages that were intact when they were cut),
``first_intact_offset`` (-1 when none), ``time_ms``, ``reason``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any, Final

QUARANTINE_DIR: Final = "quarantine"
BIN_SUFFIX: Final = ".bin"
META_SUFFIX: Final = ".json"


def quarantine_stem(file_name: str, offset: int, time_ms: int) -> str:
    """The name of one cut (without suffix): it names the file, the offset and the time."""
    t = time.gmtime(time_ms // 1000)
    stamp = time.strftime("%Y%m%dT%H%M%S", t) + f"{time_ms % 1000:03d}Z"
    return f"commitlog-{file_name}-{offset:020d}-{stamp}"


@dataclass(frozen=True, slots=True)
class QuarantineEntry:
    """One cut, as its sidecar records it."""

    name: str  # the stem: ``<name>.bin`` holds the bytes
    source: str
    offset: int
    bytes: int
    intact_records: int
    intact_bytes: int
    first_intact_offset: int
    time_ms: int
    reason: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def parse_sidecar(name: str, text: str) -> QuarantineEntry | None:
    """The entry of a sidecar's text; None when it is not one (a partial write, a stray file)."""
    try:
        d = json.loads(text)
        return QuarantineEntry(name, str(d["source"]), int(d["offset"]), int(d["bytes"]), int(d["intact_records"]),
                               int(d["intact_bytes"]), int(d["first_intact_offset"]), int(d["time_ms"]),
                               str(d.get("reason", "")))
    except (ValueError, KeyError, TypeError):
        return None


@dataclass(frozen=True, slots=True)
class QuarantineTotals:
    files: int = 0
    bytes: int = 0
    intact_records: int = 0


def totals(entries: list[QuarantineEntry]) -> QuarantineTotals:
    return QuarantineTotals(len(entries), sum(e.bytes for e in entries), sum(e.intact_records for e in entries))
