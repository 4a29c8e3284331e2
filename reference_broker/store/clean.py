"""Cleaning and self-protection: expired-file deletion, disk watermarks, the running flags.

RocketMQ 4.9.8 (DefaultMessageStore.CleanCommitLogService / CleanConsumeQueueService, RunningFlags):

| disk use of the commit-log partition | effect                                                   |
|--------------------------------------|----------------------------------------------------------|
| > diskSpaceWarningLevelRatio (0.90)  | disk full: puts get SERVICE_NOT_AVAILABLE; clean at once |
| > diskSpaceCleanForciblyRatio (0.85) | clean at once (files deleted whatever their age)         |
| > diskMaxUsedSpaceRatio (75 %)       | delete expired files now, not only at deleteWhen         |
| otherwise                            | disk OK again: writes accepted                           |

Expired files (older than fileReservedTime, 72 h) are deleted at the deleteWhen hour ("04"), when
space runs short, or on a manual request (which counts for 20 runs). Consume-queue and index files
below the commit log's new minimum offset follow.
"""

from __future__ import annotations

import enum
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from reference_broker.store.commit_log import CommitLog
from reference_broker.store.commit_log_follower import CommitLogFollower
from reference_broker.store.config import MessageStoreConfig
from reference_broker.store.consume_queue import ConsumeQueue

log = logging.getLogger(__name__)

MAX_MANUAL_DELETE_FILE_TIMES = 20


class RunningFlags:
    """Bit flags for the store's state (RunningFlags.java); writes need none of the NOT_WRITEABLE bits."""

    NOT_READABLE = 1
    NOT_WRITEABLE = 1 << 1
    WRITE_LOGICS_QUEUE_ERROR = 1 << 2
    WRITE_INDEX_FILE_ERROR = 1 << 3
    DISK_FULL = 1 << 4

    def __init__(self) -> None:
        self.flag = 0
        self._lock = threading.Lock()

    def _set(self, bit: int, on: bool) -> bool:
        with self._lock:
            was = bool(self.flag & bit)
            self.flag = (self.flag | bit) if on else (self.flag & ~bit)
            return was

    def is_writeable(self) -> bool:
        return not self.flag & (self.NOT_WRITEABLE | self.WRITE_LOGICS_QUEUE_ERROR | self.DISK_FULL
                                | self.WRITE_INDEX_FILE_ERROR)

    def is_cq_writeable(self) -> bool:
        return not self.flag & (self.NOT_WRITEABLE | self.WRITE_LOGICS_QUEUE_ERROR | self.WRITE_INDEX_FILE_ERROR)

    def is_readable(self) -> bool:
        return not self.flag & self.NOT_READABLE

    def is_disk_full(self) -> bool:
        return bool(self.flag & self.DISK_FULL)

    def get_and_make_disk_full(self) -> bool:
        return self._set(self.DISK_FULL, True)

    def get_and_make_disk_ok(self) -> bool:
        return self._set(self.DISK_FULL, False)

    def make_logics_queue_error(self) -> None:
        self._set(self.WRITE_LOGICS_QUEUE_ERROR, True)

    def make_index_file_error(self) -> None:
        self._set(self.WRITE_INDEX_FILE_ERROR, True)

    def make_not_writeable(self) -> None:
        self._set(self.NOT_WRITEABLE, True)

    def is_logics_queue_error(self) -> bool:
        return bool(self.flag & self.WRITE_LOGICS_QUEUE_ERROR)


class DiskCheck(enum.Enum):
    OK = "ok"
    OVER_MAX_RATIO = "over diskMaxUsedSpaceRatio"
    CLEAN_FORCIBLY = "over diskSpaceCleanForciblyRatio"
    FULL = "over diskSpaceWarningLevelRatio"


def disk_partition_space_used_percent(path: Path) -> float:
    """UtilAll.getDiskPartitionSpaceUsedPercent: (total - free) / total of the partition, -1 when unknown.

    Java's File.getFreeSpace counts all unallocated blocks (root's reserve included), so this uses
    ``f_bfree``, not the smaller ``f_bavail`` that ``shutil.disk_usage`` reports. A path that does not
    exist yet is measured at its nearest existing ancestor (the same partition in every layout we use).
    """
    p = path
    while not p.exists():
        if p.parent == p:
            return -1.0
        p = p.parent
    try:
        st = os.statvfs(p)
    except OSError:
        return -1.0
    total = st.f_blocks * st.f_frsize
    if total == 0:
        return -1.0
    return (total - st.f_bfree * st.f_frsize) / total


def is_it_time_to_do(when: str, hour: int) -> bool:
    """UtilAll.isItTimeToDo: deleteWhen is a ';'-separated list of hours."""
    for item in when.split(";"):
        item = item.strip()
        if item.isdigit() and int(item) == hour:
            return True
    return False


class CleanCommitLogService:
    def __init__(self, config: MessageStoreConfig, commit_log: CommitLog, flags: RunningFlags,
                 *, used_ratio: Callable[[Path], float] = disk_partition_space_used_percent,
                 now_ms: Callable[[], int] | None = None) -> None:
        self.config = config
        self.commit_log = commit_log
        self.flags = flags
        self.used_ratio = used_ratio
        self.now_ms = now_ms or (lambda: int(time.time() * 1000))
        self.clean_immediately = False
        self.manual_delete_file_several_times = 0
        self.last_ratio = 0.0
        self.last_redelete_ms = 0

    def execute_delete_files_manually(self) -> None:
        self.manual_delete_file_several_times = MAX_MANUAL_DELETE_FILE_TIMES
        log.info("executeDeleteFilesManually was invoked")

    def is_space_full(self) -> bool:
        """Above the warning level; flips the disk-full flag both ways (CleanCommitLogService.isSpaceFull)."""
        return self.check_disk() is DiskCheck.FULL

    def check_disk(self) -> DiskCheck:
        """isSpaceToDelete's watermark logic; flips the disk-full flag both ways."""
        cfg = self.config
        # isSpaceToDelete resets cleanImmediately on every check: a reading above 85 % must not make a later
        # deletion (the 04:00 one, or one at 75-85 %) remove files that have not expired.
        self.clean_immediately = False
        ratio = self.used_ratio(cfg.store_path_commit_log)
        self.last_ratio = ratio
        if ratio > cfg.disk_space_warning_level_ratio:
            if not self.flags.get_and_make_disk_full():
                log.error("physic disk maybe full soon %.3f, so mark disk full", ratio)
            self.clean_immediately = True
            return DiskCheck.FULL
        if ratio > cfg.disk_space_clean_forcibly_ratio:
            self.clean_immediately = True
            self._disk_ok()
            return DiskCheck.CLEAN_FORCIBLY
        self._disk_ok()
        if ratio < 0 or ratio > cfg.get_disk_max_used_space_ratio() / 100.0:
            return DiskCheck.OVER_MAX_RATIO
        return DiskCheck.OK

    def _disk_ok(self) -> None:
        if self.flags.get_and_make_disk_ok():
            log.info("physic disk space OK %.3f, so mark disk ok", self.last_ratio)

    def run(self) -> int:
        """One pass: delete expired files when it is time; return how many were deleted."""
        cfg = self.config
        time_up = is_it_time_to_do(cfg.delete_when, time.localtime(self.now_ms() / 1000).tm_hour)
        space = self.check_disk()
        space_full = space is not DiskCheck.OK
        manual = self.manual_delete_file_several_times > 0
        deleted = 0
        if time_up or space_full or manual:
            if manual:
                self.manual_delete_file_several_times -= 1
            clean_at_once = cfg.clean_file_forcibly_enable and self.clean_immediately
            log.info("begin to delete files: time up %s, space full %s (%s), manual %s, clean at once %s",
                     time_up, space_full, space.value, manual, clean_at_once)
            deleted = self.commit_log.mapped_file_queue.delete_expired_file_by_time(
                cfg.file_reserved_time_hours * 3_600_000, cfg.delete_commit_log_files_interval_ms,
                cfg.destroy_mapped_file_interval_forcibly_ms, clean_at_once, now_ms=self.now_ms)
            if deleted == 0 and space_full:
                log.warning("disk space will be full soon, but deleting files failed")
            self.clean_immediately = False
        self._redelete_hanged_file()
        return deleted

    def _redelete_hanged_file(self) -> None:
        now = self.now_ms()
        if now - self.last_redelete_ms > self.config.redelete_hanged_file_interval_ms:
            self.last_redelete_ms = now
            if self.commit_log.mapped_file_queue.retry_delete_first_file(
                    self.config.destroy_mapped_file_interval_forcibly_ms):
                log.info("redelete a hanged file")


class CleanConsumeQueueService:
    """Delete consume-queue and index files below the commit log's minimum offset."""

    def __init__(self, commit_log: CommitLog | CommitLogFollower, queues: Callable[[], Iterable[ConsumeQueue]],
                 delete_index: Callable[[int], None]) -> None:
        self.commit_log = commit_log
        self.queues = queues
        self.delete_index = delete_index
        self.last_physical_min_offset = 0

    def run(self) -> int:
        min_offset = self.commit_log.get_min_offset()
        if min_offset <= self.last_physical_min_offset:
            return 0
        self.last_physical_min_offset = min_offset
        deleted = 0
        for cq in list(self.queues()):
            deleted += cq.delete_expired_file(min_offset)
        self.delete_index(min_offset)
        return deleted


def fs_free_bytes(path: Path) -> int:
    try:
        st = os.statvfs(path)
    except OSError:
        return -1
    return st.f_bavail * st.f_frsize
