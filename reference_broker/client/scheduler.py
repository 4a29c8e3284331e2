"""This module owns the client's timer thread: one-shot and fixed-rate tasks (Java's ScheduledExecutorService).

One daemon thread runs every task in deadline order, so tasks must be short; a task that raises is logged
and, if periodic, scheduled again. Built on ``threading`` only, so gevent's monkey-patching makes it a
greenlet. ``shutdown`` drops what has not run yet.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable

log = logging.getLogger(__name__)


class Scheduler:
    def __init__(self, name: str = "client-scheduler") -> None:
        self._name = name
        self._heap: list[tuple[float, int, Callable[[], object], float]] = []
        self._seq = itertools.count()  # ties in deadline run in submission order
        self._cond = threading.Condition()
        self._stopped = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        with self._cond:
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()

    def schedule(self, delay_s: float, task: Callable[[], object]) -> None:
        self._push(time.monotonic() + max(delay_s, 0.0), task, 0.0)

    def schedule_at_fixed_rate(self, initial_delay_s: float, period_s: float, task: Callable[[], object]) -> None:
        if period_s <= 0:
            raise ValueError("period must be positive")
        self._push(time.monotonic() + max(initial_delay_s, 0.0), task, period_s)

    def _push(self, when: float, task: Callable[[], object], period: float) -> None:
        with self._cond:
            if self._stopped:
                return
            heapq.heappush(self._heap, (when, next(self._seq), task, period))
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped:
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        when, _seq, task, period = heapq.heappop(self._heap)
                        break
                    self._cond.wait(self._heap[0][0] - now if self._heap else None)
                else:
                    return
            try:
                task()
            except Exception:  # the scheduler thread's loop: one task must not end it
                log.exception("scheduled task %r failed", task)
            if period > 0:
                # Fixed rate, but never a burst of catch-up runs after a stall.
                self._push(max(when + period, time.monotonic()), task, period)

    def shutdown(self, timeout_s: float = 5.0) -> None:
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)


class Worker:
    """One thread running submitted callables in order (the shape of PullMessageService): ``execute`` now,
    ``execute_later`` through a scheduler. A callable that raises is logged; the worker carries on."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._tasks: deque[Callable[[], object]] = deque()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        with self._cond:
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()

    def execute(self, task: Callable[[], object]) -> None:
        with self._cond:
            if self._stopped:
                return
            self._tasks.append(task)
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._tasks and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
                task = self._tasks.popleft()
            try:
                task()
            except Exception:  # the worker thread's loop: one task must not end it
                log.exception("task %r failed", task)

    def shutdown(self, timeout_s: float = 5.0) -> None:
        with self._cond:
            self._stopped = True
            self._tasks.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
