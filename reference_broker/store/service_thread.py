"""ServiceThread: the one thread-loop style of the store's background services (RocketMQ's
``org.apache.rocketmq.common.ServiceThread``, 4.9.8), and PeriodicTask for a fixed-delay job on it.

A service is a named daemon thread running ``run()`` until ``shutdown()``. Its two signals:

- ``wakeup()`` sets the "has notified" flag; ``wait_for_running(interval)`` returns at once when the flag
  is set (clearing it), else waits up to ``interval`` for a wake-up. A wake-up that arrives while the
  service is busy is therefore not lost: the next wait returns at once (ServiceThread.waitForRunning).
- ``sleep(interval)`` waits only for the stop signal: the loop of a service that runs on a timer and is
  never woken early (it returns True once the service is stopping).

``shutdown()`` stops the loop and wakes it, then joins the thread; ``make_stop()`` only asks it to stop
(ServiceThread.makeStop), so that several services can be stopped together and joined after.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

PR_SET_NAME = 15  # linux/prctl.h
OS_THREAD_NAME_MAX = 15  # the kernel's TASK_COMM_LEN (16) less the NUL


def _libc_prctl() -> Callable[..., int] | None:
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
        return prctl
    except (OSError, AttributeError):  # not Linux: threads keep the process's name
        return None


_prctl = _libc_prctl()


def name_os_thread(name: str) -> None:
    """Give the calling thread ``name`` in the kernel (``/proc/<pid>/task/<tid>/comm``, what ``top -H``, ``ps -L``
    and py-spy show), cut to 15 bytes. Python 3.11 names its threads only for itself, so without this every
    thread of the broker is "python" from outside; with it the CPU of each service can be read from /proc while
    the broker runs (harness/thread_cpu.py: the dispatch thread's CPU per message). Java names its threads
    the same way (RocketMQ's ServiceThread names are what jstack shows)."""
    if _prctl is not None:
        _prctl(PR_SET_NAME, name.encode("utf-8", "replace")[:OS_THREAD_NAME_MAX], 0, 0, 0)


class ServiceThread:
    """A named daemon thread with RocketMQ's ServiceThread wake-up/stop protocol."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._stopped = threading.Event()
        self._wakeup = threading.Event()  # hasNotified: a wake-up not yet consumed by wait_for_running
        self._thread: threading.Thread | None = None

    @property
    def is_stopped(self) -> bool:
        return self._stopped.is_set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        name_os_thread(self.name)
        try:
            self.run()
        except Exception:  # boundary: the thread's top; a service that dies is logged, not silent
            log.exception("%s died", self.name)

    def run(self) -> None:
        raise NotImplementedError

    def wakeup(self) -> None:
        if not self._wakeup.is_set():  # puts wake services often: skip the lock when already notified
            self._wakeup.set()

    def wait_for_running(self, interval_s: float) -> None:
        self._wakeup.wait(interval_s)
        self._wakeup.clear()

    def sleep(self, interval_s: float) -> bool:
        """Wait ``interval_s`` or until stopped; True when the service is stopping."""
        return self._stopped.wait(interval_s)

    def make_stop(self) -> None:
        self._stopped.set()
        self._wakeup.set()

    def join(self, timeout_s: float = 10.0) -> None:
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout_s)

    def shutdown(self, timeout_s: float = 10.0) -> None:
        self.make_stop()
        self.join(timeout_s)


class PeriodicTask(ServiceThread):
    """``fn`` after ``delay_s``, then every ``period_s`` until stopped (a ScheduledExecutorService's
    scheduleAtFixedRate, as DefaultMessageStore schedules cleanFilesPeriodically and the disk check).
    A failing run is logged and the next one still runs."""

    def __init__(self, name: str, delay_s: float, period_s: float, fn: Callable[[], object]) -> None:
        super().__init__(name)
        self.delay_s = delay_s
        self.period_s = period_s
        self.fn = fn

    def run(self) -> None:
        if self.sleep(self.delay_s):
            return
        while not self.is_stopped:
            try:
                self.fn()
            except Exception:  # boundary: one failed run must not end the schedule
                log.exception("scheduled task %s failed", getattr(self.fn, "__name__", self.fn))
            if self.sleep(self.period_s):
                return
