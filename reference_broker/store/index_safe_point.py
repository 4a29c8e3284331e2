"""IndexSafePoints: the index service's part in crash recovery — taking a safe point, loading against
one after an abnormal exit, and dropping entries past the recovered log end (why: index_recovery.py).

A mixin of IndexService (index_service.py), kept apart so the service's module stays about the index itself.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from reference_broker.store.checkpoint import NO_INDEX_FILE, IndexSafePoint

if TYPE_CHECKING:
    from reference_broker.store.index_file import IndexFile

log = logging.getLogger("reference_broker.store.index_service")


class IndexSafePoints:
    store_path: Path
    _files: list[IndexFile]
    _lock: threading.Lock
    _durable: set[str]  # full files whose final flush completed
    _dir_synced: set[str]  # files whose directory entry a safe point made durable

    def files(self) -> list[IndexFile]:
        raise NotImplementedError

    def _load_against(self, f: IndexFile, sp: IndexSafePoint) -> None:
        """Abnormal load with a safe point: older files are whole, the safe one is cut back, newer ones go."""
        name = int(f.file_name)
        if name > sp.file_name or sp.file_name == NO_INDEX_FILE:
            f.destroy(0)
            log.info("destroyed index file %s: created after the index safe point", f.file_name)
            return
        if name == sp.file_name:
            report = f.restore(sp)
            log.info("index file %s cut back to the safe point (%d entries, end %d): %d slots mended "
                     "(%d by chain, %d by scan)", f.file_name, sp.index_count - 1, sp.end_phy_offset,
                     report.slots_checked, report.by_chain, report.by_scan)
        else:
            self._durable.add(f.file_name)
        self._dir_synced.add(f.file_name)  # it survived a crash: its entry is on disk
        log.info("load index file OK, %s", f.file_name)
        self._files.append(f)

    def take_safe_point(self, covered_offset: int) -> IndexSafePoint:
        """Force the index to disk and describe it; every keyed record below ``covered_offset`` is in it.

        The caller reads ``covered_offset`` (the reput position) before calling: entries are put before
        the position moves, so the header read here covers them. The caller stores the result in the
        checkpoint and flushes it.
        """
        files = self.files()
        if not files:
            return IndexSafePoint(NO_INDEX_FILE, covered_offset)
        last = files[-1]
        sp = last.safe_point(covered_offset)
        for f in files[:-1]:
            if f.file_name not in self._durable:
                f.flush()  # a full file whose background flush has not finished yet
                self._durable.add(f.file_name)
        last.flush()
        if any(f.file_name not in self._dir_synced for f in files):
            # A file's own flush does not make its name durable: a power loss could drop the safe file.
            fd = os.open(self.store_path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            self._dir_synced.update(f.file_name for f in files)
        return sp

    def truncate_from(self, phy_offset: int) -> bool:
        """Drop entries of records at or past ``phy_offset``: recovery cut the log there (a power loss
        can keep index pages whose records did not reach the disk). True if any were dropped."""
        files = self.files()
        dropped = False
        for i in range(len(files) - 1, -1, -1):
            f = files[i]
            if not f.truncate_from(phy_offset):
                return dropped
            dropped = True
            self._durable.discard(f.file_name)  # written again from here: no longer known whole on disk
            log.info("index file %s: entries from commit-log offset %d on dropped", f.file_name, phy_offset)
            if f.index_count > 1 or i == 0:
                return dropped
            with self._lock:
                self._files.remove(f)
            f.destroy(0)
        return dropped

