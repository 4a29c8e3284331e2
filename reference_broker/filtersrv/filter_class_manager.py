"""FilterClassManager (filtersrv/.../FilterClassManager.java, 4.2.0): the filters consumers uploaded, by
(consumer group, topic), each with its own sandboxed worker (filter_worker.py).

REGISTER_MESSAGE_FILTER_CLASS carries className and classCRC = CRC32 of the body (the source). As in 4.2.0 an
upload with the CRC already registered for that group and topic is a no-op (consumers re-upload with every
heartbeat); a new CRC replaces the filter. Here the source is compiled in a new worker *before* it replaces
the old one, so a bad upload leaves the group's working filter in place and answers with the reason.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Final

from reference_broker.common.crc import crc32
from reference_broker.filtersrv.filter_worker import MAX_SOURCE_BYTES, FilterWorker, SandboxLimits, WorkerError

log = logging.getLogger(__name__)

# Ours (4.2.0 had no bound): each filter is a process, so a flood of uploads under new group names must not
# fork without end.
MAX_FILTERS: Final = 256
UPLOAD_LOCK_STRIPES: Final = 64


class FilterClassError(ValueError):
    """An upload refused; the message is the reply's remark."""


@dataclass
class FilterClassInfo:
    class_name: str
    class_crc: int
    worker: FilterWorker
    # The thread this filter's batches run on: a filter that hangs until its deadline holds only its own
    # thread, never a shared pool that other groups' pulls need.
    executor: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(1, "filter-worker"))

    def close(self) -> None:
        self.worker.kill()
        self.executor.shutdown(wait=False, cancel_futures=True)


class FilterClassManager:
    def __init__(self, limits: SandboxLimits) -> None:
        self.limits = limits
        self.table: dict[tuple[str, str], FilterClassInfo] = {}
        self._lock = threading.Lock()
        # One upload at a time per (group, topic): the consumers of a group upload together at each heartbeat,
        # and the second must find the first's filter rather than start a worker of its own. Striped, so that
        # uploads under ever new names cannot grow a table of locks.
        self._upload_locks = [threading.Lock() for _ in range(UPLOAD_LOCK_STRIPES)]

    def register(self, group: str, topic: str, class_name: str, class_crc: int, body: bytes) -> bool:
        """Blocking (starts a worker). True when the filter was (re)placed, False when the same CRC was
        already registered; FilterClassError when refused."""
        if len(body) > MAX_SOURCE_BYTES:
            raise FilterClassError(f"the filter source is {len(body)} bytes, over the limit of {MAX_SOURCE_BYTES}")
        actual = crc32(body)
        if actual != class_crc:
            raise FilterClassError(f"classCRC {class_crc} does not match the body's CRC32 {actual}")
        with self._upload_locks[hash((group, topic)) % UPLOAD_LOCK_STRIPES]:
            return self._register(group, topic, class_name, class_crc, body)

    def _register(self, group: str, topic: str, class_name: str, class_crc: int, body: bytes) -> bool:
        with self._lock:
            old = self.table.get((group, topic))
            full = old is None and len(self.table) >= MAX_FILTERS
        if old is not None and old.class_crc == class_crc and old.class_name == class_name:
            return False
        if full:
            raise FilterClassError(f"this filter server already holds {MAX_FILTERS} filters")
        try:
            source = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FilterClassError(f"the filter source is not UTF-8: {exc}") from None
        worker = FilterWorker(source, self.limits, f"{group}/{topic}")
        try:
            worker.start()
        except WorkerError as exc:
            raise FilterClassError(str(exc)) from None
        with self._lock:
            old = self.table.get((group, topic))
            self.table[(group, topic)] = FilterClassInfo(class_name, class_crc, worker)
        if old is not None:
            old.close()
        log.info("filter class registered: group %s topic %s class %s crc %d (sandbox: %s)", group, topic,
                 class_name, class_crc, ",".join(worker.layers))
        return True

    def find(self, group: str, topic: str) -> FilterClassInfo | None:
        with self._lock:
            return self.table.get((group, topic))

    def shutdown(self) -> None:
        with self._lock:
            infos, self.table = list(self.table.values()), {}
        for info in infos:
            info.close()
