"""IndexService: the ordered index files of one store — rolling, loading, building from dispatched records,
querying by key, deleting expired files, flushing (store/.../index/IndexService.java, 4.9.8).

One ``IndexFile`` (index_file.py) per file; the format is in ``index_format.py``; taking and loading against
the index safe point is the ``IndexSafePoints`` part (index_safe_point.py).

Deliberate differences from RocketMQ:
- An existing file whose length differs from the configured size fails ``load`` (RocketMQ maps it at the
  configured size regardless, which silently mixes two layouts).
- A put that keeps failing on fresh files gives up after ``MAX_TRY_IDX_CREATE`` files instead of looping.
- Background flushes of full files run in roll order (each waits for the one before), so
  checkpoint.indexMsgTimestamp never moves back and never covers a file that is not yet flushed.
- After an abnormal exit with an index safe point in the checkpoint (recoverFromCheckpointOffset), the file
  being written is cut back to the safe point instead of destroyed, and the replay adds what follows it
  (index_recovery.py, index_safe_point.py). Without one, 4.9.8's rule applies.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from reference_broker.common.dispatch import DispatchRequest
from reference_broker.common.java_hash import concat_hash_code, hash_codes
from reference_broker.common.message import KEY_SEPARATOR, TRANSACTION_ROLLBACK_TYPE, transaction_value
from reference_broker.store.checkpoint import StoreCheckpoint
from reference_broker.store.index_file import IndexFile
from reference_broker.store.index_format import human_time_name, index_file_size
from reference_broker.store.index_safe_point import IndexSafePoints

log = logging.getLogger(__name__)

MAX_TRY_IDX_CREATE: Final = 3  # IndexService.MAX_TRY_IDX_CREATE
MAX_MSGS_NUM_BATCH: Final = 64  # MessageStoreConfig.maxMsgsNumBatch
_DESTROY_EXPIRED_INTERVAL_MS: Final = 3000  # IndexService.deleteExpiredFile: file.destroy(3000)


@dataclass
class QueryOffsetResult:
    phy_offsets: list[int] = field(default_factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phyoffset: int = 0


class IndexService(IndexSafePoints):
    """The ordered index files of one store, built by the dispatch thread and queried by any thread."""

    def __init__(
        self,
        store_root_index_dir: Path,
        hash_slot_num: int,
        index_num: int,
        checkpoint: StoreCheckpoint,
        *,
        message_index_safe: bool = False,
        max_msgs_num_batch: int = MAX_MSGS_NUM_BATCH,
        safe_point_recovery: bool = False,
    ) -> None:
        self.store_path = store_root_index_dir  # {root}/index
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.checkpoint = checkpoint
        # Read by recovery (checkpoint.get_min_timestamp_index), not here: kept with the service it qualifies.
        self.message_index_safe = message_index_safe
        self.max_msgs_num_batch = max_msgs_num_batch
        # Abnormal loads cut back to checkpoint.index_safe_point (index_recovery.py) rather than destroy
        # the file being written; set with recoverFromCheckpointOffset, whose replay needs it.
        self.safe_point_recovery = safe_point_recovery
        self._durable: set[str] = set()  # full files whose final flush completed
        self._dir_synced: set[str] = set()  # files whose directory entry a safe point made durable
        self.index_file_error = False  # RunningFlags.makeIndexFileError
        self.retry_interval_s = 1.0  # retryGetAndCreateIndexFile sleeps 1 s between attempts
        self._files: list[IndexFile] = []
        self._lock = threading.Lock()  # guards the list; readers work on a snapshot
        self._flush_threads: list[threading.Thread] = []

    # ---- loading -------------------------------------------------------------------------------
    def load(self, last_exit_ok: bool) -> bool:
        """Map existing files in name order; after an abnormal exit cut back to the index safe point when
        there is one (``_load_against``), else drop those newer than the checkpoint.

        A file whose end timestamp is past checkpoint.indexMsgTimestamp may not have been flushed
        whole; recovery re-dispatches its messages into a fresh file (IndexService.load).
        """
        if not self.store_path.is_dir():
            return True
        sp = self.checkpoint.index_safe_point if self.safe_point_recovery and not last_exit_ok else None
        expected = index_file_size(self.hash_slot_num, self.index_num)
        for p in sorted(self.store_path.iterdir(), key=lambda q: q.name):
            if not p.is_file() or not p.name.isdigit():
                log.error("load file %s error: not an index file name", p)  # NumberFormatException
                continue
            size = p.stat().st_size
            if size == 0:
                # A crash between creating a file and sizing it: no entries, nothing to lose. Failing
                # here would also leave every newer file unloaded.
                log.warning("load file %s: empty (crash while creating it): deleted", p)
                p.unlink()
                continue
            if size != expected:
                log.error("load file %s error: length %d does not match %d", p, size, expected)
                return False
            try:
                f = IndexFile(p, self.hash_slot_num, self.index_num, create=False)
            except (OSError, ValueError):
                log.exception("load file %s error", p)
                return False
            f.load()
            if sp is not None:
                self._load_against(f, sp)
                continue
            if not last_exit_ok and f.end_timestamp > self.checkpoint.index_msg_timestamp:
                f.destroy(0)
                log.info("destroyed index file %s: end %d is past the checkpoint %d",
                         p.name, f.end_timestamp, self.checkpoint.index_msg_timestamp)
                continue
            log.info("load index file OK, %s", p.name)
            self._files.append(f)
        return True

    # ---- files ---------------------------------------------------------------------------------
    def get_last_file(self) -> IndexFile | None:
        files = self._files
        return files[-1] if files else None

    def files(self) -> list[IndexFile]:
        with self._lock:
            return list(self._files)

    def get_total_size(self) -> int:
        files = self._files
        return files[0].file_size * len(files) if files else 0

    def _new_file_path(self, last: IndexFile | None) -> Path:
        name = human_time_name(int(time.time() * 1000))
        # Names order the files on load: never reuse or go below the newest (same ms, clock stepping back).
        floor = int(last.file_name) if last is not None and last.file_name.isdigit() else -1
        n = max(int(name), floor + 1)
        while (self.store_path / f"{n:017d}").exists():
            n += 1
        return self.store_path / f"{n:017d}"

    def get_and_create_last_index_file(self) -> IndexFile | None:
        """The last file while it has room, else a new one that continues the full one's ends.

        The full file is flushed on its own thread, which then advances the checkpoint
        (IndexService.getAndCreateLastIndexFile). None when the file cannot be created.
        """
        prev: IndexFile | None = None
        with self._lock:
            if self._files:
                tmp = self._files[-1]
                if not tmp.is_write_full():
                    return tmp
                prev = tmp
        end_phy = prev.end_phy_offset if prev is not None else 0
        end_ts = prev.end_timestamp if prev is not None else 0
        path: Path | None = None
        try:
            self.store_path.mkdir(parents=True, exist_ok=True)
            path = self._new_file_path(prev)
            f = IndexFile(path, self.hash_slot_num, self.index_num, end_phy, end_ts)
        except (OSError, ValueError):
            log.exception("getLastIndexFile exception")
            if path is not None:
                path.unlink(missing_ok=True)  # a file that could not be reserved (disk full)
            return None
        with self._lock:
            self._files.append(f)
        if prev is not None:
            self._flush_threads = [x for x in self._flush_threads if x.is_alive()]
            before = self._flush_threads[-1] if self._flush_threads else None
            t = threading.Thread(target=self._flush_after, args=(before, prev), name="FlushIndexFileThread",
                                 daemon=True)
            self._flush_threads.append(t)
            t.start()
        return f

    def _flush_after(self, before: threading.Thread | None, f: IndexFile) -> None:
        if before is not None:
            before.join()
        self._flush(f)

    def retry_get_and_create_index_file(self) -> IndexFile | None:
        for times in range(MAX_TRY_IDX_CREATE):
            f = self.get_and_create_last_index_file()
            if f is not None:
                return f
            log.info("Tried to create index file %d times", times + 1)
            if times + 1 < MAX_TRY_IDX_CREATE:
                time.sleep(self.retry_interval_s)
        self.index_file_error = True
        log.error("Mark index file cannot build flag")
        return None

    # ---- building (the dispatch thread) --------------------------------------------------------
    def build_index(self, req: DispatchRequest) -> None:
        """IndexService.buildIndex: index ``topic#uniqKey`` and ``topic#key`` for each key token."""
        if req.uniq_key is None and not req.keys:
            return  # nothing to index (RocketMQ finds the file first; the outcome is the same)
        f = self.retry_get_and_create_index_file()
        if f is None:
            log.error("build index error, stop building index")
            return
        if req.commit_log_offset < f.end_phy_offset:
            return  # already indexed (recovery re-dispatches from before the index's end)
        if transaction_value(req.sys_flag) == TRANSACTION_ROLLBACK_TYPE:
            return
        if req.uniq_key is not None:
            f = self._put_key(f, req, req.uniq_key)
            if f is None:
                log.error("putKey error commitlog %d uniqkey %s", req.commit_log_offset, req.uniq_key)
                return
        if req.keys:
            for key in req.keys.split(KEY_SEPARATOR):
                if key:
                    f = self._put_key(f, req, key)
                    if f is None:
                        log.error("putKey error commitlog %d key %s", req.commit_log_offset, key)
                        return

    def build_index_batch(self, reqs: Sequence[DispatchRequest]) -> None:
        """``build_index`` for a run of records in log order: the same entries in the same order, put
        through ``IndexFile.put_keys``. A key the run's file cannot take goes the one-by-one way."""
        keys: list[str] = []
        phys: list[int] = []
        stamps: list[int] = []
        owner: list[int] = []
        f: IndexFile | None = None
        floor = 0
        last_keyed = -1  # the last record with keys, indexed or skipped
        rollback = TRANSACTION_ROLLBACK_TYPE
        if reqs and all(r.uniq_key is not None and not r.keys for r in reqs):
            # The usual run (a producer's sends: a UNIQ_KEY each, no KEYS): the same lists, built by comprehension.
            f = self.retry_get_and_create_index_file()
            if f is None:
                log.error("build index error, stop building index")
                return
            floor = f.end_phy_offset
            last_keyed = len(reqs) - 1
            chosen = [i for i, r in enumerate(reqs)
                      if r.commit_log_offset >= floor and r.sys_flag & rollback != rollback]
            keys = [f"{reqs[i].topic}#{reqs[i].uniq_key}" for i in chosen]
            phys = [reqs[i].commit_log_offset for i in chosen]
            stamps = [reqs[i].store_timestamp for i in chosen]
            owner = chosen
            reqs_loop: Sequence[DispatchRequest] = ()
        else:
            reqs_loop = reqs
        for i, req in enumerate(reqs_loop):
            uniq = req.uniq_key
            if uniq is None and not req.keys:
                continue
            last_keyed = i
            if f is None:
                f = self.retry_get_and_create_index_file()
                if f is None:
                    log.error("build index error, stop building index")
                    return
                floor = f.end_phy_offset
            if req.commit_log_offset < floor or req.sys_flag & rollback == rollback:
                continue  # already indexed (recovery re-dispatches from before the index's end); rolled back
            prefix = req.topic + "#"
            if uniq is not None:
                keys.append(prefix + uniq)
                phys.append(req.commit_log_offset)
                stamps.append(req.store_timestamp)
                owner.append(i)
            if req.keys:
                for key in req.keys.split(KEY_SEPARATOR):
                    if key:
                        keys.append(prefix + key)
                        phys.append(req.commit_log_offset)
                        stamps.append(req.store_timestamp)
                        owner.append(i)
        codes = hash_codes(keys)
        done = 0
        rolls = 0  # fresh files that took nothing, in a row (``_put_key`` gives a record up after 3)
        while f is not None and done < len(keys):
            put = f.put_keys(keys[done:], codes[done:], phys[done:], stamps[done:])
            done += put
            rolls = 0 if put else rolls + 1
            if done == len(keys):
                break
            if not f.is_write_full():
                # An error, not a full file: the rest goes the one-by-one way, with its retries and logs.
                rest = owner[done]
                self._build_index_from(reqs[rest], done - owner.index(rest))
                for req in reqs[rest + 1:]:
                    self.build_index(req)
                return
            if rolls > MAX_TRY_IDX_CREATE:
                # Files with no room for even one key: give this record up, as _put_key does.
                log.error("putKey error commitlog %d key %s", phys[done], keys[done])
                rest = owner[done]
                while done < len(keys) and owner[done] == rest:
                    done += 1
                rolls = 0
                if done == len(keys):
                    break
            log.warning("Index file [%s] is full, trying to create another one", f.file_name)
            f = self.retry_get_and_create_index_file()
        if f is None:
            if done < len(keys):
                log.error("putKey error commitlog %d key %s", phys[done], keys[done])
            return
        if f.is_write_full() and last_keyed > (owner[done - 1] if done else -1):
            # A record after the last key put (skipped, or given up) still asked for a file, as
            # build_index does before its checks: the full file is rolled and flushed.
            self.retry_get_and_create_index_file()

    def _build_index_from(self, req: DispatchRequest, first: int) -> None:
        """``build_index`` for one record, from its ``first``-th key on (the earlier ones are in)."""
        f = self.retry_get_and_create_index_file()
        if f is None:
            return
        tokens = ([req.uniq_key] if req.uniq_key is not None else []) + \
            [k for k in req.keys.split(KEY_SEPARATOR) if k]
        for key in tokens[first:]:
            nf = self._put_key(f, req, key)
            if nf is None:
                log.error("putKey error commitlog %d key %s", req.commit_log_offset, key)
                return
            f = nf

    def _put_key(self, f: IndexFile, req: DispatchRequest, key: str) -> IndexFile | None:
        prefix = req.topic + "#"
        full = prefix + key
        h = concat_hash_code(prefix, key)
        tries = 0
        while not f.put_key(full, req.commit_log_offset, req.store_timestamp, h):
            tries += 1
            if tries > MAX_TRY_IDX_CREATE:
                return None
            log.warning("Index file [%s] is full, trying to create another one", f.file_name)
            nf = self.retry_get_and_create_index_file()
            if nf is None:
                return None
            f = nf
        return f

    # ---- querying (any thread) -----------------------------------------------------------------
    def query_offset(self, topic: str, key: str, max_num: int, begin: int, end: int) -> QueryOffsetResult:
        """IndexService.queryOffset: newest file to oldest, at most ``maxMsgsNumBatch`` offsets."""
        max_num = min(max_num, self.max_msgs_num_batch)
        result = QueryOffsetResult()
        files = self.files()
        if not files:
            return result
        last = files[-1]
        result.index_last_update_timestamp = last.end_timestamp
        result.index_last_update_phyoffset = last.end_phy_offset
        idx_key = f"{topic}#{key}"
        for f in reversed(files):
            if f.is_time_matched(begin, end):
                result.phy_offsets.extend(
                    f.select_phy_offset([idx_key], max_num - len(result.phy_offsets), begin, end))
            if f.begin_timestamp < begin or len(result.phy_offsets) >= max_num:
                break
        return result

    # ---- deletion, flushing, lifecycle ---------------------------------------------------------
    def delete_expired_file(self, offset: int) -> None:
        """Destroy the oldest files that end below ``offset`` (commit-log min offset), never the last."""
        files = self.files()
        if not files or files[0].end_phy_offset >= offset:
            return
        expired: list[IndexFile] = []
        for f in files[:-1]:
            if f.end_phy_offset >= offset:
                break
            expired.append(f)
        for f in expired:
            if not f.destroy(_DESTROY_EXPIRED_INTERVAL_MS):
                log.error("deleteExpiredFile remove failed: %s still in use", f.file_name)
                break
            with self._lock:
                self._files.remove(f)

    def _flush(self, f: IndexFile) -> None:
        """IndexService.flush(f): a full file's end timestamp becomes checkpoint.indexMsgTimestamp."""
        index_msg_timestamp = f.end_timestamp if f.is_write_full() else 0
        f.flush()
        if index_msg_timestamp > 0:
            self._durable.add(f.file_name)
            self.checkpoint.index_msg_timestamp = index_msg_timestamp
            self.checkpoint.flush()

    def flush(self) -> None:
        """Flush the current file (at shutdown)."""
        f = self.get_last_file()
        if f is not None:
            self._flush(f)

    def wait_flushes(self, timeout_s: float = 30.0) -> None:
        """Wait for the background flushes of full files (shutdown, tests)."""
        deadline = time.monotonic() + timeout_s
        for t in list(self._flush_threads):
            t.join(max(0.0, deadline - time.monotonic()))

    def shutdown(self) -> None:
        """Unmap every file (call ``flush`` first for a clean stop)."""
        self.wait_flushes()
        with self._lock:
            files, self._files = self._files, []
        for f in files:
            f.shutdown(0)

    def destroy(self) -> None:
        """Delete every index file (DefaultMessageStore.destroy)."""
        self.wait_flushes()
        with self._lock:
            files, self._files = self._files, []
        for f in files:
            f.destroy(3000)
