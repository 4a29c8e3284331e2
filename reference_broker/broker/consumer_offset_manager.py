"""ConsumerOffsetManager: committed consume offsets (broker/.../offset/ConsumerOffsetManager.java, 4.9.8).

``{storePathRootDir}/config/consumerOffset.json``::

    {"offsetTable": {"topic@group": {"0": 12, "1": 7}}}

fastjson writes the integer queue ids unquoted (``{0:12}``, not valid JSON); decode accepts
both, encode writes valid JSON with quoted ids. The broker persists every
flushConsumerOffsetInterval (5 s); the caller owns that timer.

On a slave the file may also hold ``"slaveCommitTable"`` (this project's own key, same shape as offsetTable):
offsets clients committed to the slave that the master has not acknowledged yet (slave_synchronize.py, #1094).
Kept in the same file so that they survive a restart of the slave together with the offsets they belong to;
4.9.8 reads the file with fastjson, which skips a key it has no field for, and the wire body
(GET_ALL_CONSUMER_OFFSET) never carries it.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from reference_broker.broker.config_manager import ConfigManager, dump_json

log = logging.getLogger(__name__)

TOPIC_GROUP_SEPARATOR = "@"
SLAVE_COMMIT_KEY = "slaveCommitTable"  # the project's own key: see the module docstring
_UNQUOTED_INT_KEY = re.compile(r"([{,]\s*)(-?\d+)(\s*:)")


def _loads_fastjson(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return json.loads(_UNQUOTED_INT_KEY.sub(r'\1"\2"\3', text))


def parse_offset_table(text: str) -> dict[str, dict[int, int]] | None:
    """consumerOffset.json, or a GET_ALL_CONSUMER_OFFSET body (ConsumerOffsetSerializeWrapper): the table, or
    None for a JSON ``null``; ValueError when malformed."""
    obj = _loads_fastjson(text)
    if obj is None:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("offsetTable", {}), dict):
        raise ValueError('consumerOffset.json must hold {"offsetTable": {...}}')
    table: dict[str, dict[int, int]] = {}
    for key, m in obj.get("offsetTable", {}).items():
        if TOPIC_GROUP_SEPARATOR not in key or not isinstance(m, dict):
            raise ValueError(f"bad offsetTable entry {key!r}")
        queues: dict[int, int] = {}
        for q, off in m.items():
            if not isinstance(off, int) or isinstance(off, bool):
                raise ValueError(f"{key}: offset for queue {q} must be an integer, got {off!r}")
            queues[int(q)] = off
        table[key] = queues
    return table


def parse_slave_commits(text: str) -> dict[tuple[str, int], int]:
    """The file's slaveCommitTable as (topic@group, queueId) -> offset; empty when absent; ValueError when
    malformed (the file then falls back to its .bak, as for a bad offsetTable)."""
    obj = _loads_fastjson(text)
    raw = obj.get(SLAVE_COMMIT_KEY) if isinstance(obj, dict) else None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError(f"{SLAVE_COMMIT_KEY} must be an object")
    out: dict[tuple[str, int], int] = {}
    for key, m in raw.items():
        if TOPIC_GROUP_SEPARATOR not in key or not isinstance(m, dict):
            raise ValueError(f"bad {SLAVE_COMMIT_KEY} entry {key!r}")
        for q, off in m.items():
            if not isinstance(off, int) or isinstance(off, bool):
                raise ValueError(f"{SLAVE_COMMIT_KEY} {key}: offset for queue {q} must be an integer, got {off!r}")
            out[(key, int(q))] = off
    return out


class ConsumerOffsetManager(ConfigManager):
    def __init__(self, store_root: Path | str) -> None:
        super().__init__()
        self.store_root = Path(store_root)
        self.offset_table: dict[str, dict[int, int]] = {}
        # On a slave (track_slave_commits): offsets clients committed here that the master has not acknowledged
        # yet, (topic@group, queueId) -> offset; slave_synchronize.py keeps them and sends them on (#1094).
        self.track_slave_commits = False
        self.slave_commits: dict[tuple[str, int], int] = {}

    def config_file_path(self) -> Path:
        return self.store_root / "config" / "consumerOffset.json"

    def _offset_json(self) -> dict[str, Any]:
        # copies: the writer thread encodes while the loop commits offsets (see config_manager.py)
        table = {key: {str(q): off for q, off in sorted(dict(m).items())}
                 for key, m in list(self.offset_table.items())}
        return {"offsetTable": table}

    def encode(self, pretty: bool = False) -> str:
        return dump_json(self._offset_json(), pretty)

    def file_text(self) -> str:
        obj = self._offset_json()
        commits = dict(self.slave_commits)  # a copy, for the same reason
        if commits:
            table: dict[str, dict[str, int]] = {}
            for (key, queue_id), offset in sorted(commits.items()):
                table.setdefault(key, {})[str(queue_id)] = offset
            obj[SLAVE_COMMIT_KEY] = table
        return dump_json(obj, True)

    def decode(self, text: str) -> None:
        table = parse_offset_table(text)
        commits = parse_slave_commits(text)
        if table is not None:
            self.offset_table = table
        self.slave_commits = commits

    # ---------------------------------------------------------------- offsets
    def commit_offset(self, client_host: str, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = topic + TOPIC_GROUP_SEPARATOR + group
        queues = self.offset_table.setdefault(key, {})
        prev = queues.get(queue_id)
        queues[queue_id] = offset
        if self.track_slave_commits:
            self.slave_commits[(key, queue_id)] = offset
        if prev is not None and offset < prev:
            log.warning(
                "[NOTIFYME]update consumer offset less than store. clientHost=%s, key=%s, queueId=%d, "
                "requestOffset=%d, storeOffset=%d",
                client_host,
                key,
                queue_id,
                offset,
                prev,
            )

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group never committed for this queue."""
        queues = self.offset_table.get(topic + TOPIC_GROUP_SEPARATOR + group)
        if queues is None:
            return -1
        return queues.get(queue_id, -1)

    def query_offsets(self, group: str, topic: str) -> dict[int, int]:
        return dict(self.offset_table.get(topic + TOPIC_GROUP_SEPARATOR + group, {}))

    def which_topic_by_consumer(self, group: str) -> set[str]:
        out = set()
        for key in self.offset_table:
            topic, _, g = key.partition(TOPIC_GROUP_SEPARATOR)
            if g == group:
                out.add(topic)
        return out

    def which_group_by_topic(self, topic: str) -> set[str]:
        out = set()
        for key in self.offset_table:
            t, _, group = key.partition(TOPIC_GROUP_SEPARATOR)
            if t == topic:
                out.add(group)
        return out

    def clean_offset_by_topic(self, topic: str) -> None:
        """cleanOffsetByTopic: drop every group's offsets for a deleted topic."""
        for key in [k for k in self.offset_table if k.partition(TOPIC_GROUP_SEPARATOR)[0] == topic]:
            del self.offset_table[key]
            log.warning("clean topic %s offsets %s", topic, key)

    def clean_offsets_of_absent_topics(self, existing_topics: Iterable[str]) -> list[str]:
        """Drop offsets whose topic is no longer in the topic table; returns the removed keys."""
        keep = set(existing_topics)
        gone = [k for k in self.offset_table if k.partition(TOPIC_GROUP_SEPARATOR)[0] not in keep]
        for key in gone:
            del self.offset_table[key]
        return gone
