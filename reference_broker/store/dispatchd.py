"""The dispatch process (``dispatchInSeparateProcess``): ReputMessageService, the consume-queue flush and their
cleaning in a child of the broker, so that dispatch never takes the broker's interpreter lock.

Not in RocketMQ (4.9.8 dispatches on a thread of the broker's JVM, which has no interpreter lock): a lab extension,
off by default (docs/dispatch.md). The child writes exactly what the thread writes, with the same code
(``ReputMessageService.do_reput``, ``CommitLogDispatcher``, ``ConsumeQueue``, ``IndexService``,
``FlushConsumeQueueService``, ``CleanConsumeQueueService``); the broker keeps the commit log and everything
else, and reads the consume queues through views (``ConsumeQueue.follow``). Recovery stays in the broker, before
the child exists. Started by the broker's ``DispatchLink`` (dispatch_link.py) as a child interpreter running
``main`` (``CHILD_CODE``); it dies with the broker (PR_SET_PDEATHSIG, and an end of file on its control pipe).

The link (this module owns its format):

Shared page ``{storePathRootDir}/dispatch.shm``, two int64 slots used, native byte order, each with one writer:

| slot | field | writer | meaning |
|---|---|---|---|
| 0 | written offset | broker, after every put | the child dispatches the (whole) records below it |
| 1 | waiting | broker, per frame received and per nudge | 1: a held pull waits: look every 1 ms |

While nothing waits the child looks every ``dispatchIdleIntervalMillis`` (reput.py's cadence): each ``run`` frame
takes the broker's interpreter lock once.

Two pipes, the broker's frames to the child on one (``Setup.control_fd``) and the child's to the broker on the other
(``Setup.events_fd``): frames of a 4-byte big-endian length and a JSON object whose ``k`` is its kind.

| k | from | fields |
|---|---|---|
| ``ready`` | child | ``o``: queues and index loaded, dispatch starts at this commit-log offset |
| ``run`` | child | ``o``: dispatched below it; ``n``: records since the last run; ``q``: ``[topic, queue id, max \
offset]`` of each queue that grew; ``e``: records a dispatcher skipped so far; ``f``: RunningFlags' write errors |
| ``ckpt`` | child | what is on disk now, for the broker's checkpoint: ``lt`` logicsMsgTimestamp, ``lo`` the logics \
offset, ``it`` indexMsgTimestamp, ``sp`` the index safe point (or null) |
| ``reply`` | child | ``id``, and for ``query`` ``p`` (commit-log offsets), ``ts``/``po`` (the index's last update); \
for ``clean`` ``q`` (``[topic, queue id, min offset in bytes]`` of every queue) |
| ``bye`` | child | ``o``: stopped, everything flushed |
| ``nudge`` | broker | dispatch now (a reader found nothing) |
| ``query`` | broker | ``id``, ``topic``, ``key``, ``max``, ``begin``, ``end``: IndexService.queryOffset |
| ``clean`` | broker | ``id``, ``min``: the log begins there now: unmap below it, delete expired queue and index files |
| ``stop`` | broker | no more puts, dispatch caught up: dispatch what is left, flush, report, exit |

x86-64 keeps stores in order, so a record's bytes are in the page cache before the written offset that covers
them, and a consume-queue unit before the ``run`` frame that announces it (the frame is a system call).

Threads in the child: the dispatch thread (ReputMessageService, with its idle wait and nudges), the consume-queue
flush thread, and the main thread, which reads the broker's frames and answers them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import mmap
import os
import pickle
import signal
import struct
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

import orjson

from reference_broker.common.dispatch import DispatchRequest
from reference_broker.store.checkpoint import IndexSafePoint, StoreCheckpoint
from reference_broker.store.clean import CleanConsumeQueueService, RunningFlags
from reference_broker.store.commit_log_follower import CommitLogFollower
from reference_broker.store.config import MessageStoreConfig
from reference_broker.store.consume_queue import ConsumeQueue
from reference_broker.store.consume_queue_table import (
    ConsumeQueueTable,
    create_consume_queue,
    iter_queues,
    load_consume_queues,
)
from reference_broker.store.dispatcher import CommitLogDispatcher
from reference_broker.store.flush import FlushConsumeQueueService
from reference_broker.store.index_service import IndexService
from reference_broker.store.reput import ReputMessageService

log = logging.getLogger(__name__)

SHM_NAME: Final = "dispatch.shm"
SHM_SIZE: Final = mmap.PAGESIZE
SHM_WRITTEN: Final = 0  # the fields above, as indexes of int64 slots
SHM_WAITING: Final = 1
FRAME_HEAD: Final = struct.Struct(">I")
MAX_FRAME: Final = 64 << 20  # a clean reply for 10,000 queues is well under 1 MiB
ERROR_FLAGS: Final = RunningFlags.WRITE_LOGICS_QUEUE_ERROR | RunningFlags.WRITE_INDEX_FILE_ERROR
PR_SET_PDEATHSIG: Final = 1
# The child's command line: ``python -c CHILD_CODE``. Not ``-m`` this module: run as __main__, its Setup class
# would not be the one the broker pickled.
CHILD_CODE: Final = "import sys; from reference_broker.store.dispatchd import main; sys.exit(main())"


@dataclass(frozen=True)
class Setup:
    """What the broker hands the child on its standard input (pickled: the child is the broker's own code)."""

    config: MessageStoreConfig
    reput_from: int
    parent_pid: int
    control_fd: int  # the child reads the broker's frames here
    events_fd: int  # and writes its own here


def open_shared_page(root: Path) -> mmap.mmap:
    fd = os.open(root / SHM_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if os.fstat(fd).st_size < SHM_SIZE:
            os.ftruncate(fd, SHM_SIZE)
        return mmap.mmap(fd, SHM_SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)


def pack_frame(msg: dict[str, Any]) -> bytes:
    body = orjson.dumps(msg)
    return FRAME_HEAD.pack(len(body)) + body


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class FrameReader:
    """Whole frames out of a byte stream; a length past MAX_FRAME is a broken link (ValueError)."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        buf = self._buf
        buf += data
        out: list[dict[str, Any]] = []
        pos = 0
        while len(buf) - pos >= 4:
            (n,) = FRAME_HEAD.unpack_from(buf, pos)
            if n > MAX_FRAME:
                raise ValueError(f"dispatch link: frame of {n} bytes")
            if len(buf) - pos - 4 < n:
                break
            out.append(orjson.loads(bytes(buf[pos + 4:pos + 4 + n])))
            pos += 4 + n
        del buf[:pos]
        return out


class ReportingCheckpoint(StoreCheckpoint):
    """The child's checkpoint: the fields the consume-queue flush and the index set, and no file of its own.
    ``flush`` reports them to the broker, whose checkpoint file holds them (one writer per file)."""

    def __init__(self, report: Callable[[dict[str, Any]], None]) -> None:  # no super(): no file
        self.path = Path(os.devnull)
        self.physic_msg_timestamp = self.logics_msg_timestamp = self.index_msg_timestamp = 0
        self.physic_msg_offset = self.logics_msg_offset = 0
        self.index_safe_point: IndexSafePoint | None = None
        self.dispatched_logics_timestamp = 0
        self.loaded = False
        self._lock = threading.Lock()
        self._closed = False
        self._report = report

    def flush(self) -> None:
        with self._lock:
            sp = self.index_safe_point
            msg = {"k": "ckpt", "lt": self.logics_msg_timestamp, "lo": self.logics_msg_offset,
                   "it": self.index_msg_timestamp, "sp": asdict(sp) if sp is not None else None}
        self._report(msg)

    def shutdown(self) -> None:
        self._closed = True


class ChildReput(ReputMessageService):
    """The dispatch thread of the child: ReputMessageService's loop, idle wait and nudges, reporting after each look
    that dispatched something (one ``run`` frame, so one hand-off of the broker's interpreter lock, per look)."""

    def __init__(self, child: Dispatchd, log_: CommitLogFollower, config: MessageStoreConfig) -> None:
        super().__init__(log_, child.dispatch, config.delay_level_table_ms())
        self.child = child

    def do_reput(self) -> bool:
        self.child.log.apply_drops()
        moved = super().do_reput()
        self.child.report_run()
        return moved


class Dispatchd:
    def __init__(self, config: MessageStoreConfig, control_fd: int, events_fd: int, reput_from: int) -> None:
        self.config = config
        self.control_fd = control_fd
        self.events_fd = events_fd
        self._send_lock = threading.Lock()
        self._shm = open_shared_page(config.store_path_root_dir)
        self._shared = memoryview(self._shm).cast("q")
        self.table: ConsumeQueueTable = {}
        self._table_lock = threading.Lock()
        self.flags = RunningFlags()
        self.checkpoint = ReportingCheckpoint(self.send)
        self.index = IndexService(config.store_path_index, config.max_hash_slot_num, config.max_index_num,
                                  self.checkpoint, message_index_safe=config.message_index_safe,
                                  safe_point_recovery=config.recover_from_checkpoint_offset)
        self.log = CommitLogFollower(config.store_path_commit_log, config.mapped_file_size_commit_log,
                                     self.written)
        self.dispatcher = CommitLogDispatcher(config, self.table, self.find_consume_queue, self.index,
                                              self.checkpoint, self.flags)
        self.reput = ChildReput(self, self.log, config)
        self.reput.reput_from_offset = reput_from
        self.reput.waiters.append(self.waiting)
        self.reput.idle_interval_s = max(1, config.dispatch_idle_interval_ms) / 1000
        self.flush = FlushConsumeQueueService(lambda: iter_queues(self.table), self.checkpoint, config,
                                              lambda: self.reput.reput_from_offset,
                                              self.index.take_safe_point if config.message_index_enable else None)
        self.clean = CleanConsumeQueueService(self.log, lambda: iter_queues(self.table), self.index.delete_expired_file)
        self._grown: set[tuple[str, int]] = set()
        self._sent_offset = -1
        self._sent_count = 0

    def written(self) -> int:
        return int(self._shared[SHM_WRITTEN])

    def waiting(self) -> bool:
        return self._shared[SHM_WAITING] != 0

    # ---- state -------------------------------------------------------------------------------------
    def load(self) -> bool:
        """The queues and the index as the broker's recovery left them (it wrote, flushed and closed them)."""
        if not load_consume_queues(self.config, self.table):
            return False
        for cq in iter_queues(self.table):
            cq.recover()
            cq.correct_min_offset(self.log.get_min_offset())
        if self.config.message_index_enable and not self.index.load(True):
            return False
        # What the broker's recovery, or a dispatch process that died, wrote may be only in the page cache, and
        # the queues above take it as flushed: force every file once, so that no checkpoint claims it unflushed.
        # (A file with nothing dirty costs one system call.)
        for cq in iter_queues(self.table):
            for mf in cq.mapped_file_queue.iter_files():
                mf.force()
        for f in self.index.files():
            f.force()  # not flush(): that forces only what this process writes (found by a power-loss cell)
        return True

    def find_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        queues = self.table.get(topic)
        cq = queues.get(queue_id) if queues is not None else None
        if cq is None:  # the flush and cleaning walk the table from other threads
            cq = create_consume_queue(self.config, self.table, self._table_lock, topic, queue_id)
        return cq

    def dispatch(self, reqs: list[DispatchRequest]) -> None:
        self.dispatcher.dispatch(reqs)
        self._grown.update((r.topic, r.queue_id) for r in reqs)

    # ---- the link ----------------------------------------------------------------------------------
    def send(self, msg: dict[str, Any]) -> None:
        frame = pack_frame(msg)
        with self._send_lock:
            write_all(self.events_fd, frame)

    def report_run(self) -> None:
        """On the dispatch thread, after a look: the queues that grew and where dispatch stands."""
        o = self.reput.reput_from_offset
        if o == self._sent_offset and not self._grown:
            return
        grown, self._grown = self._grown, set()
        q = []
        for topic, queue_id in grown:
            cq = self.table.get(topic, {}).get(queue_id)
            if cq is not None:
                q.append([topic, queue_id, cq.get_max_offset_in_queue()])
        n = self.reput.dispatched_count
        self.send({"k": "run", "o": o, "n": n - self._sent_count, "q": q, "e": self.dispatcher.error_count,
                   "f": self.flags.flag & ERROR_FLAGS})
        self._sent_offset, self._sent_count = o, n

    def _handle(self, msg: dict[str, Any]) -> bool:
        """One frame from the broker; False for ``stop``."""
        kind = msg.get("k")
        if kind == "stop":
            return False
        if kind == "nudge":
            self.reput.nudge()
        elif kind == "query":
            res = self.index.query_offset(msg["topic"], msg["key"], msg["max"], msg["begin"], msg["end"])
            self.send({"k": "reply", "id": msg["id"], "p": res.phy_offsets, "ts": res.index_last_update_timestamp,
                       "po": res.index_last_update_phyoffset})
        elif kind == "clean":
            # The files below the log's new start are unmapped by the dispatch thread (it may be reading one now)
            self.log.drop_below(int(msg["min"]))
            self.reput.nudge()
            self.log.wait_dropped(1.0)
            self.clean.run()
            self.send({"k": "reply", "id": msg["id"],
                       "q": [[cq.topic, cq.queue_id, cq.min_logic_offset] for cq in iter_queues(self.table)]})
        return True

    def run(self) -> int:
        if not self.load():
            log.error("dispatch process: the consume queues or the index did not load")
            return 1
        self.send({"k": "ready", "o": self.reput.reput_from_offset})
        self.flush.start()
        self.reput.start()
        reader = FrameReader()
        linked = running = True
        while running:
            data = os.read(self.control_fd, 1 << 16)
            if not data:
                linked = False  # the broker is gone (its death signal is on its way): stop as on "stop"
                break
            for msg in reader.feed(data):
                running = self._handle(msg) and running
        # "stop": the broker takes no puts and saw dispatch caught up; the shutdown below dispatches what is left
        self.reput.shutdown(5.0)
        self.report_run()
        self.flush.shutdown()  # the last full flush reports the checkpoint fields
        if linked:
            self.send({"k": "bye", "o": self.reput.reput_from_offset})
        self.index.shutdown()
        for cq in iter_queues(self.table):
            cq.shutdown()
        self.log.close()
        return 0


def _die_with_parent(parent_pid: int) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(1)  # the broker died before the request above took effect


def main(argv: Sequence[str] | None = None) -> int:
    setup = pickle.load(sys.stdin.buffer)
    assert isinstance(setup, Setup)
    _die_with_parent(setup.parent_pid)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s dispatchd %(levelname)s %(name)s: %(message)s")
    return Dispatchd(setup.config, setup.control_fd, setup.events_fd, setup.reput_from).run()
