"""This module owns the name server's KV config (namesrv/.../kvconfig/KVConfigManager.java, 4.9.8): string values
by namespace and key, kept in one JSON file, ``kvConfigPath`` (default ``~/namesrv/kvConfig.json``).

The file is KVConfigSerializeWrapper: ``{"configTable": {namespace: {key: value}}}``. It is read once at start and
written whole after every put and every delete (4.9.8 writes even when the key was absent), as MixAll.string2File
writes (a fsynced
``.tmp``, the previous content to ``.bak``, then a rename). Where 4.9.8 logs a file it cannot parse and starts
empty (so the next put overwrites it), this keeps a copy of it first, ``kvConfig.json.corrupt``: a deliberate
difference, because that file held what operators put there.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Final

from reference_broker.broker.config_manager import file_to_string, string_to_file

log = logging.getLogger(__name__)

DEFAULT_PATH: Final = "~/namesrv/kvConfig.json"  # NamesrvConfig.kvConfigPath: user.home/namesrv/kvConfig.json


class KVConfigManager:
    """The table, and the file it persists to (None: in memory only, for tests)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path.expanduser() if path is not None else None
        self.table: dict[str, dict[str, str]] = {}

    def load(self) -> None:
        """Read the file; a missing one is an empty table, an unreadable one is logged, kept aside and skipped."""
        if self.path is None:
            return
        try:
            text = file_to_string(self.path)
        except OSError as exc:
            log.error("load KV config table from %s failed: %s", self.path, exc)
            return
        if not text:
            return
        try:
            table = _decode(text)
        except ValueError as exc:
            aside = self.path.with_name(self.path.name + ".corrupt")
            log.error("KV config %s cannot be read (%s); starting empty, a copy is kept at %s", self.path, exc, aside)
            try:
                shutil.copyfile(self.path, aside)
            except OSError as copy_exc:
                log.error("cannot keep a copy of %s: %s", self.path, copy_exc)
            return
        self.table = table
        log.info("loaded %d KV config namespaces from %s", len(table), self.path)

    def put(self, namespace: str, key: str, value: str) -> None:
        """putKVConfig: set, then persist."""
        kv = self.table.setdefault(namespace, {})
        previous = kv.get(key)
        kv[key] = value
        log.info("%s KV config: namespace %s key %s value %s", "update" if previous is not None else "create",
                 namespace, key, value)
        self.persist()

    def get(self, namespace: str, key: str) -> str | None:
        kv = self.table.get(namespace)
        return None if kv is None else kv.get(key)

    def delete(self, namespace: str, key: str) -> None:
        """deleteKVConfig: remove if present (an absent key is no error), then persist."""
        kv = self.table.get(namespace)
        if kv is not None and kv.pop(key, None) is not None:
            log.info("delete KV config: namespace %s key %s", namespace, key)
        self.persist()

    def namespace(self, namespace: str) -> dict[str, str] | None:
        """getKVListByNamespace: the namespace's pairs (empty once its keys were deleted), or None when it was
        never put to."""
        kv = self.table.get(namespace)
        return None if kv is None else dict(kv)

    def persist(self) -> None:
        """KVConfigManager.persist: the whole table, written as string2File writes; a failure is logged (the
        change stays in memory, as in 4.9.8)."""
        if self.path is None:
            return
        try:
            string_to_file(json.dumps({"configTable": self.table}, indent=4, ensure_ascii=False), self.path)
        except OSError as exc:
            log.error("persist KV config to %s failed: %s", self.path, exc)


def _decode(text: str) -> dict[str, dict[str, str]]:
    obj = json.loads(text)
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    raw = obj.get("configTable") or {}
    if not isinstance(raw, dict):
        raise ValueError("configTable is not an object")
    table: dict[str, dict[str, str]] = {}
    for ns, kv in raw.items():
        if not isinstance(kv, dict) or not all(isinstance(v, str) for v in kv.values()):
            raise ValueError(f"namespace {ns!r} is not an object of strings")
        table[str(ns)] = {str(k): v for k, v in kv.items()}
    return table
