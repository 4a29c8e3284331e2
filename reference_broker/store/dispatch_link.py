"""DispatchLink: the broker's side of the dispatch process (``dispatchInSeparateProcess``; dispatchd.py owns the
link's format).

It stands where ReputMessageService stands in the store (the same attributes and calls: ``reput_from_offset``,
``behind``, ``nudge``, ``wait_caught_up``, ``start``, ``shutdown``): the store's code that waits for dispatch works
unchanged. It also

- publishes the commit log's written offset into the shared page after every put (``publish``);
- receives the child's frames on a thread of its own: it moves the consume-queue views to what the child wrote
  (``ConsumeQueue.follow``) before it moves ``reput_from_offset``, then tells the arrival hook which queues grew
  (held pulls, idle delay levels); it writes the child's flushed checkpoint fields into the store's checkpoint;
- forwards index queries and cleaning to the child, which owns those files now;
- restarts the child if it dies while the store runs, at the last offset it reported (re-dispatching what it
  wrote past that is what recovery does: the units are rewritten equal, the index skips what it holds).
"""

from __future__ import annotations

import itertools
import logging
import os
import pickle
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

from reference_broker.store.checkpoint import IndexSafePoint, StoreCheckpoint
from reference_broker.store.clean import RunningFlags
from reference_broker.store.config import MessageStoreConfig
from reference_broker.store.consume_queue import ConsumeQueue
from reference_broker.store.dispatchd import (
    CHILD_CODE,
    SHM_WAITING,
    SHM_WRITTEN,
    FrameReader,
    Setup,
    open_shared_page,
    pack_frame,
    write_all,
)
from reference_broker.store.index_service import QueryOffsetResult
from reference_broker.store.service_thread import name_os_thread

log = logging.getLogger(__name__)

READY_TIMEOUT_S: Final = 300.0  # loading 10,000 queues and forcing their files takes seconds, not minutes
REQUEST_TIMEOUT_S: Final = 30.0
CATCH_UP_POLL_S: Final = 0.0002
RESTART_DELAY_S: Final = 0.2
ArrivalHook = Callable[[Sequence[tuple[str, int, int]]], None]


class DispatchProcessError(RuntimeError):
    """The dispatch process did not start, or stopped answering."""


class _Reply:
    __slots__ = ("event", "msg")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.msg: dict[str, Any] | None = None


class DispatchLink:
    def __init__(self, config: MessageStoreConfig, upper: Callable[[], int], checkpoint: StoreCheckpoint,
                 running_flags: RunningFlags, find_consume_queue: Callable[[str, int, bool], ConsumeQueue | None],
                 hand_over: Callable[[], None], arrival: ArrivalHook) -> None:
        self.config = config
        self.upper = upper
        self.checkpoint = checkpoint
        self.running_flags = running_flags
        self.find_consume_queue = find_consume_queue
        self.hand_over = hand_over  # the store lets go of the files the child will write (its index service)
        self.arrival = arrival
        # ReputMessageService's attributes the store reads or sets
        self.reput_from_offset = 0
        self.dispatched_count = 0
        self.dispatch_runs = 0
        self.stuck_skips = 0
        self.waiters: list[Callable[[], bool]] = []  # read here, told to the child through the shared page
        self.busy_idle_s = self.idle_interval_s = 0.001
        self.wait_for_whole_records = False
        # the child's
        self.error_count = 0
        self.restarts = 0
        self.index_last_update = (0, 0)  # (timestamp, commit-log offset) of the index, as the last query saw it
        self._proc: subprocess.Popen[bytes] | None = None
        self._control_w: int | None = None  # the broker's ends of the two pipes
        self._events_r: int | None = None
        self._send_lock = threading.Lock()
        self._publish_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._replies: dict[int, _Reply] = {}
        self._ready = threading.Event()
        self._failed_start: int | None = None
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._shm = open_shared_page(config.store_path_root_dir)
        self._written = memoryview(self._shm).cast("q")
        self._written[SHM_WRITTEN] = 0
        self._written[SHM_WAITING] = 0
        self._closed = False  # the page is unmapped (after shutdown): a late nudge or put must not touch it

    @property
    def pid(self) -> int:
        proc = self._proc
        return proc.pid if proc is not None else 0

    # ---- the put path ------------------------------------------------------------------------------
    def publish(self, offset: int) -> None:
        """The commit log is written (whole records) below ``offset``; never moves back (puts from other threads
        may publish out of order)."""
        with self._publish_lock:
            if not self._closed and offset > self._written[SHM_WRITTEN]:
                self._written[SHM_WRITTEN] = offset

    def _tell_waiting(self) -> None:
        """Whether anything waits for dispatch now (a held pull), for the child's cadence."""
        waiting = 0
        for w in self.waiters:
            if w():
                waiting = 1
                break
        with self._publish_lock:
            if not self._closed and self._written[SHM_WAITING] != waiting:
                self._written[SHM_WAITING] = waiting

    # ---- ReputMessageService's calls ---------------------------------------------------------------
    def behind(self) -> int:
        return max(0, self.upper() - self.reput_from_offset)

    def is_commit_log_available(self) -> bool:
        return self.reput_from_offset < self.upper()

    def nudge(self) -> None:
        self._tell_waiting()
        self._send({"k": "nudge"})

    def nudge_if_behind(self) -> None:
        if self.reput_from_offset < self.upper():
            self.nudge()

    def wait_caught_up(self, timeout_s: float) -> bool:
        target = self.upper()
        if self.reput_from_offset >= target:
            return True
        self.nudge()
        deadline = time.monotonic() + timeout_s
        while self.reput_from_offset < target:
            if self._stopping or self._thread is None or time.monotonic() >= deadline:
                return False
            time.sleep(CATCH_UP_POLL_S)
        return True

    def start(self) -> None:
        """Hand the files over, start the child and wait until it has loaded them (DispatchProcessError if not)."""
        self.hand_over()
        self.publish(self.upper())
        self._spawn()
        self._thread = threading.Thread(target=self._receive, name="DispatchLink", daemon=True)
        self._thread.start()
        if not self._ready.wait(READY_TIMEOUT_S):
            self._stopping = True
            self._kill()
            raise DispatchProcessError(f"the dispatch process did not load the store in {READY_TIMEOUT_S:.0f} s")
        if self._failed_start is not None:
            self._stopping = True
            raise DispatchProcessError(f"the dispatch process exited ({self._failed_start}) before it loaded the "
                                       "store: see its log above")

    def shutdown(self, wait_caught_up_s: float = 5.0) -> None:
        """Let the child catch up (up to ``wait_caught_up_s``, as ReputMessageService.shutdown), then have it flush
        and exit; its last checkpoint fields are in the store's checkpoint when this returns."""
        deadline = time.monotonic() + wait_caught_up_s
        while self.is_commit_log_available() and time.monotonic() < deadline and self._thread is not None:
            self.wait_caught_up(max(0.0, deadline - time.monotonic()))
        if self.is_commit_log_available():
            log.warning("shutdown with dispatch behind by %d bytes", self.behind())
        self._stopping = True
        self._send({"k": "stop"})
        t = self._thread
        if t is not None:
            t.join(60)
        self._kill()
        with self._publish_lock:
            self._closed = True
            self._written.release()
            self._shm.close()

    # ---- forwarded to the child --------------------------------------------------------------------
    def query_offset(self, topic: str, key: str, max_num: int, begin: int, end: int) -> QueryOffsetResult:
        r = self._request({"k": "query", "topic": topic, "key": key, "max": max_num, "begin": begin, "end": end})
        res = QueryOffsetResult()
        res.phy_offsets = [int(p) for p in r["p"]]
        res.index_last_update_timestamp = int(r["ts"])
        res.index_last_update_phyoffset = int(r["po"])
        self.index_last_update = (res.index_last_update_timestamp, res.index_last_update_phyoffset)
        return res

    def clean(self, commit_log_min_offset: int) -> None:
        """CleanConsumeQueueService's pass, run by the child; the views let go of the files it deleted."""
        r = self._request({"k": "clean", "min": commit_log_min_offset})
        for topic, queue_id, min_logic in r["q"]:
            cq = self.find_consume_queue(topic, int(queue_id), False)
            if cq is not None and int(min_logic) != cq.min_logic_offset:
                cq.follow_min(int(min_logic))

    # ---- the child ---------------------------------------------------------------------------------
    def _spawn(self) -> None:
        control_r, control_w = os.pipe()
        events_r, events_w = os.pipe()
        setup = Setup(self.config, self.reput_from_offset, os.getpid(), control_r, events_w)
        proc = subprocess.Popen([sys.executable, "-c", CHILD_CODE], stdin=subprocess.PIPE,
                                pass_fds=(control_r, events_w), close_fds=True)
        os.close(control_r)  # the child's ends: an end of file on either side means the other is gone
        os.close(events_w)
        assert proc.stdin is not None
        try:
            proc.stdin.write(pickle.dumps(setup))
            proc.stdin.close()
        except OSError:
            pass  # it died at once: the receiver reads the end of its pipe
        self._control_w, self._events_r, self._proc = control_w, events_r, proc

    def _kill(self) -> None:
        proc = self._proc
        if proc is None:
            return
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            log.error("dispatch process %d did not exit: killed", proc.pid)
            proc.kill()
            proc.wait()

    def _send(self, msg: dict[str, Any]) -> bool:
        frame = pack_frame(msg)
        try:
            with self._send_lock:
                fd = self._control_w
                if fd is None:
                    return False
                write_all(fd, frame)
        except OSError:
            return False  # the child is gone: the receiver restarts it
        return True

    def _request(self, msg: dict[str, Any]) -> dict[str, Any]:
        rid = next(self._ids)
        reply = self._replies[rid] = _Reply()
        try:
            if not self._send({**msg, "id": rid}) or not reply.event.wait(REQUEST_TIMEOUT_S) or reply.msg is None:
                raise DispatchProcessError(f"the dispatch process did not answer {msg['k']!r}")
            return reply.msg
        finally:
            self._replies.pop(rid, None)

    def _receive(self) -> None:
        """The receiver thread: frames until the child's end closes; then a restart, unless the store stops."""
        name_os_thread("DispatchLink")
        failures = 0
        while True:
            events, proc = self._events_r, self._proc
            assert events is not None and proc is not None
            reader = FrameReader()
            try:
                while True:
                    data = os.read(events, 1 << 16)
                    if not data:
                        break
                    for msg in reader.feed(data):
                        self._on(msg)
                    self._tell_waiting()
            except (OSError, ValueError):
                log.exception("dispatch link broken")
            rc = proc.wait()
            os.close(events)
            with self._send_lock:
                if self._control_w is not None:
                    os.close(self._control_w)
                    self._control_w = None
            for reply in list(self._replies.values()):
                reply.event.set()  # msg None: the request fails now rather than at its timeout
            if self._stopping:
                return
            if not self._ready.is_set():  # it never loaded the store: start() fails, no restart
                self._failed_start = rc
                self._ready.set()
                return
            failures += 1
            log.error("dispatch process %d exited (%s): restarting it at commit-log offset %d",
                      proc.pid, rc, self.reput_from_offset)
            time.sleep(min(5.0, RESTART_DELAY_S * failures))
            if self._stopping:  # the store began to stop meanwhile: nothing to restart for
                return
            self._spawn()
            if self._stopping:  # it began to stop during the spawn: its "stop" went to the dead child
                self._send({"k": "stop"})
            self.restarts += 1

    def _on(self, msg: dict[str, Any]) -> None:
        kind = msg["k"]
        if kind == "run":
            grown: list[tuple[str, int, int]] = []
            for topic, queue_id, max_offset in msg["q"]:
                cq = self.find_consume_queue(topic, queue_id, True)
                if cq is not None:
                    cq.follow(max_offset)
                    grown.append((topic, queue_id, max_offset))
            self.dispatched_count += msg["n"]
            self.error_count = msg["e"]
            flags = msg["f"]
            if flags & RunningFlags.WRITE_LOGICS_QUEUE_ERROR:
                self.running_flags.make_logics_queue_error()
            if flags & RunningFlags.WRITE_INDEX_FILE_ERROR:
                self.running_flags.make_index_file_error()
            self.reput_from_offset = msg["o"]  # after the views: a reader that waited for it sees the units
            self.dispatch_runs += 1
            if grown:
                try:
                    self.arrival(grown)
                except Exception:  # a hook's bug must not stop the link
                    log.exception("arrival hook failed")
        elif kind == "ckpt":
            cp = self.checkpoint
            if msg["lt"] > 0:
                cp.logics_msg_timestamp = msg["lt"]
            if msg["lo"] > 0:
                cp.note_logics_offset(msg["lo"])
            if msg["sp"] is not None:
                cp.note_index_safe_point(IndexSafePoint(**msg["sp"]))
            cp.index_msg_timestamp = max(cp.index_msg_timestamp, msg["it"])
            cp.flush()
        elif kind == "ready":
            self.reput_from_offset = msg["o"]
            self._ready.set()
        elif kind == "reply":
            reply = self._replies.get(msg["id"])
            if reply is not None:
                reply.msg = msg
                reply.event.set()
        elif kind == "bye":
            self.reput_from_offset = msg["o"]
