"""ConfigManager: a JSON config file with a ``.bak`` fallback (RocketMQ common/.../ConfigManager.java, 4.9.8).

This module owns the on-disk discipline shared by topics.json, consumerOffset.json and
subscriptionGroup.json:

- ``persist`` (MixAll.string2File): write ``<file>.tmp`` and fsync it, copy the previous
  content to ``<file>.bak``, then rename tmp → file. We use an atomic ``os.replace`` where
  RocketMQ deletes the file and then renames (a crash between the two loses the main file).
- ``load`` (ConfigManager.load/loadBak): a missing or empty main file, or one that fails
  to decode, falls back to ``<file>.bak``. A missing/empty ``.bak`` is a fresh start
  (True, as RocketMQ). A ``.bak`` that fails to decode → False, ``last_error`` says why.
- ``persist_soon``: changes made while serving requests only ask for a write; a CoalescingPersister thread
  writes the latest state once per burst, off the event loop (see config_persister.py for why this differs
  from RocketMQ's inline persist). ``encode`` therefore runs on that thread while the loop changes the
  table: each subclass copies its table first (one C-level dict copy, atomic under the GIL) and encodes the
  copy, so no lock is held while encoding; a change racing with the copy requests another write anyway.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Final

from reference_broker.broker.config_persister import CoalescingPersister
from reference_broker.store.mapped_file import fsync_dir

log = logging.getLogger(__name__)

# How long a request that changed a config waits for it to reach the disk before it answers anyway (the
# RocketMQ client's heartbeat timeout is 3 s; a failing write is logged and retried, as RocketMQ logs it).
PERSIST_WAIT_S: Final = 2.0


def dump_json(obj: Any, pretty: bool) -> str:
    """A config file's JSON: tab-indented when ``pretty`` (what persist writes), non-ASCII kept as is."""
    return json.dumps(obj, indent="\t" if pretty else None, ensure_ascii=False)


def file_to_string(path: Path) -> str | None:
    """MixAll.file2String: the file's text, or None when it does not exist."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def _write_fsync(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def string_to_file(text: str, path: Path) -> None:
    """MixAll.string2File: tmp (fsynced), previous content → .bak, rename tmp → file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    bak = path.with_name(path.name + ".bak")
    _write_fsync(tmp, text)
    prev = file_to_string(path)
    if prev is not None:
        _write_fsync(bak, prev)
    os.replace(tmp, path)
    fsync_dir(path.parent)


class ConfigManager(ABC):
    """Base of the broker's JSON config files; subclasses supply path, encode and decode."""

    def __init__(self) -> None:
        self.last_error: str | None = None
        self._write_lock = threading.Lock()  # the writer thread and a shutdown persist share file.tmp
        self._persister: CoalescingPersister | None = None

    @abstractmethod
    def config_file_path(self) -> Path: ...

    @abstractmethod
    def encode(self, pretty: bool = False) -> str: ...

    @abstractmethod
    def decode(self, text: str) -> None:
        """Replace the in-memory state from ``text``; raise (and change nothing) when it is bad."""

    def load(self) -> bool:
        path = self.config_file_path()
        self.last_error = None
        try:
            text = file_to_string(path)
            if not text:
                return self._load_bak()
            self.decode(text)
            log.info("load %s OK", path)
            return True
        except Exception as e:  # noqa: BLE001 - a config file's boundary: any decode failure falls back to .bak
            self.last_error = f"{path}: {type(e).__name__}: {e}"
            log.error("load %s failed (%s: %s), and try to load backup file", path, type(e).__name__, e)
            return self._load_bak()

    def _load_bak(self) -> bool:
        path = self.config_file_path()
        bak = path.with_name(path.name + ".bak")
        try:
            text = file_to_string(bak)
            if text:
                self.decode(text)
                log.info("load %s OK", bak)
                return True
        except Exception as e:  # noqa: BLE001 - a config file's boundary: reported, the broker starts empty
            reason = f"{bak}: {type(e).__name__}: {e}"
            self.last_error = f"{self.last_error}; {reason}" if self.last_error else reason
            log.error("load %s failed (%s: %s)", bak, type(e).__name__, e)
            return False
        return True

    def file_text(self) -> str:
        """What the file holds: the wire encoding, pretty (a subclass may add state of its own)."""
        return self.encode(pretty=True)

    def persist(self) -> None:
        """Write the current state now, on the calling thread (MixAll.string2File)."""
        with self._write_lock:
            string_to_file(self.file_text(), self.config_file_path())

    @property
    def persister(self) -> CoalescingPersister:
        if self._persister is None:
            self._persister = CoalescingPersister(self.persist, self.config_file_path().name)
        return self._persister

    def persist_soon(self) -> int:
        """Ask the writer thread to persist the current state; the request's generation, to wait on."""
        return self.persister.request()

    @property
    def persist_generation(self) -> int:
        """The latest write request's generation (0: none yet)."""
        return 0 if self._persister is None else self._persister.requested

    async def persisted(self, timeout_s: float = PERSIST_WAIT_S) -> bool:
        """Await (off the loop's time) the write of every change requested so far; False on timeout."""
        if self._persister is None:
            return True
        p = self._persister
        ok = await p.written_async(p.requested, timeout_s)
        if not ok:
            log.warning("%s not on disk after %.1f s (%s); answering anyway, the write is retried",
                        self.config_file_path(), timeout_s, p.last_error or "slow disk")
        return ok

    def wait_persisted(self, timeout_s: float = PERSIST_WAIT_S) -> bool:
        """Block until every change requested so far is on disk (tests, tools); False on timeout."""
        p = self._persister
        return p is None or p.wait_written(p.requested, timeout_s)

    def shutdown_persist(self) -> None:
        """Stop the writer thread, then write the final state on this thread (broker shutdown)."""
        generation = self.persist_generation
        if self._persister is not None:
            self._persister.close()
        self.persist()
        if self._persister is not None:
            self._persister.mark_written(generation)
