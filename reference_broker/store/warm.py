"""WarmAheadService: keeps the commit log's page cache filled ahead of the writer.

RocketMQ 4.9.8 can warm a new commit-log file (warmMapedFileEnable, default false: a zero written to every
page, then mlock) so the writer never takes a page fault; its AllocateMappedFileService prepares the next
file in the background. Here a thread keeps the next ``ahead_bytes`` after the write position read into the
page cache with ``MappedFile.warm_ahead`` (posix_fadvise WILLNEED, outside the interpreter lock, nothing
dirtied). Without it, on a disk with a large read_ahead_kb, the writer's fault on each new stretch of the
file read around itself for ~20 ms while holding the lock, stalling every request (see mapped_file.py).

A deliberate difference, on by default: a page-cache hint has no effect on what is stored.
"""

from __future__ import annotations

import logging
from typing import Final

from reference_broker.store.mapped_file_queue import MappedFileQueue
from reference_broker.store.service_thread import ServiceThread

log = logging.getLogger(__name__)

WARM_INTERVAL_S: Final = 0.005  # at ~200 MB/s the writer moves ~1 MiB between two looks


class WarmAheadService(ServiceThread):
    """``ahead_bytes`` (MessageStoreConfig.commit_log_warm_ahead_bytes, 16 MiB: twice this machine's
    read_ahead_kb) is how far ahead of the writer the page cache is kept filled."""

    def __init__(self, mapped_file_queue: MappedFileQueue, ahead_bytes: int,
                 interval_s: float = WARM_INTERVAL_S) -> None:
        super().__init__("WarmAheadService")
        self.mapped_file_queue = mapped_file_queue
        self.ahead_bytes = ahead_bytes
        self.interval_s = interval_s

    def warm_once(self) -> None:
        mf = self.mapped_file_queue.get_last_mapped_file()
        if mf is None or mf.stage is not None:
            return  # with the transient store pool the writer fills an anonymous buffer, not the mapping
        mf.warm_ahead(mf.write_position + self.ahead_bytes)

    def run(self) -> None:
        while not self.is_stopped:
            self.wait_for_running(self.interval_s)
            try:
                self.warm_once()
            except Exception:  # a hint only: the writer takes its own page faults, as without this service
                log.exception("warming the commit log failed")
