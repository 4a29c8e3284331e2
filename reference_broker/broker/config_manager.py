"""ConfigManager: a JSON config file with a ``.bak`` fallback (RocketMQ common/.../ConfigManager.java, 4.9.8).

This module owns the on-disk discipline shared by topics.json, consumerOffset.json and
subscriptionGroup.json:

- ``persist`` (MixAll.string2File): write ``<file>.tmp`` and fsync it, copy the previous
  content to ``<file>.bak``, then rename tmp → file. We use an atomic ``os.replace`` where
  RocketMQ deletes the file and then renames (a crash between the two loses the main file).
- ``load`` (ConfigManager.load/loadBak): a missing or empty main file, or one that fails
  to decode, falls back to ``<file>.bak``. A missing/empty ``.bak`` is a fresh start
  (True, as RocketMQ). A ``.bak`` that fails to decode → False, ``last_error`` says why.
"""

from __future__ import annotations

import logging
import os
from abc import ABC, abstractmethod
from pathlib import Path

from reference_broker.store.mapped_file import fsync_dir

log = logging.getLogger(__name__)


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
        except Exception as e:
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
        except Exception as e:
            reason = f"{bak}: {type(e).__name__}: {e}"
            self.last_error = f"{self.last_error}; {reason}" if self.last_error else reason
            log.error("load %s failed (%s: %s)", bak, type(e).__name__, e)
            return False
        return True

    def persist(self) -> None:
        string_to_file(self.encode(pretty=True), self.config_file_path())
