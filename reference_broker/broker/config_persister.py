"""CoalescingPersister: writes one config file off the event loop, at most once per burst of changes.

RocketMQ persists topics.json and subscriptionGroup.json inline on every change (TopicConfigManager and
SubscriptionGroupManager call ConfigManager.persist), on the processor thread that made the change; its
heartbeats run on their own executor, so that cost never stalls a send. Our managers live on the broker's one
event loop, where an inline rewrite and fsync of the whole table per new group made one heartbeat with N new
groups cost O(N^2) and froze every connection. Here a change only *requests* a write: one writer thread per
file wakes, writes the latest state, and writes again only if more changes arrived meanwhile. Requests are
numbered (generations) so a caller can wait, without blocking the loop, until a write that includes its change
has reached the disk.

A write that fails is logged and retried after ``retry_delay_s``; the error never reaches the request that
asked for the write. ``close`` stops the thread after the write in progress; the owner then writes the final
state itself (ConfigManager.persist at broker shutdown).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Final

log = logging.getLogger(__name__)

RETRY_DELAY_S: Final = 1.0  # our choice: a failing disk is not hammered, a recovered one is caught up soon


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class CoalescingPersister:
    def __init__(self, write: Callable[[], None], name: str, retry_delay_s: float = RETRY_DELAY_S) -> None:
        self._write = write
        self.name = name
        self.retry_delay_s = retry_delay_s
        self._cond = threading.Condition()
        self._requested = 0  # generation of the latest request
        self._written = 0  # every request up to this generation is on disk
        self._waiters: list[tuple[int, asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._thread: threading.Thread | None = None
        self._closed = False
        self.writes = 0
        self.failures = 0
        self.last_error: str | None = None

    @property
    def requested(self) -> int:
        return self._requested

    @property
    def written(self) -> int:
        return self._written

    def request(self) -> int:
        """Ask for a write of the current state; returns the request's generation. Cheap, any thread."""
        with self._cond:
            self._requested += 1
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name=f"persist-{self.name}", daemon=True)
                self._thread.start()
            self._cond.notify_all()
            return self._requested

    def wait_written(self, generation: int, timeout_s: float) -> bool:
        """Block until a write covering ``generation`` succeeded (True) or ``timeout_s`` passed (False)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._written >= generation, timeout_s)

    async def written_async(self, generation: int, timeout_s: float) -> bool:
        """``wait_written`` for the event loop: awaits without holding a thread."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        with self._cond:
            if self._written >= generation:
                return True
            self._waiters.append((generation, loop, fut))
        try:
            await asyncio.wait_for(fut, timeout_s)
            return True
        except TimeoutError:
            return False
        finally:
            with self._cond:
                self._waiters = [w for w in self._waiters if w[2] is not fut]

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop the writer after the write in progress (pending requests are the owner's to write)."""
        with self._cond:
            self._closed = True
            thread = self._thread
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    def mark_written(self, generation: int) -> None:
        """Record that the owner wrote every request up to ``generation`` itself (e.g. at shutdown)."""
        with self._cond:
            self._done(generation)

    # ---- the writer thread ------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and self._written >= self._requested:
                    self._cond.wait()
                if self._closed:
                    return
                generation = self._requested  # the state read from now on includes every request so far
            if self._write_once(generation):
                continue
            with self._cond:
                self._cond.wait_for(lambda: self._closed, self.retry_delay_s)

    def _write_once(self, generation: int) -> bool:
        try:
            self._write()
        except Exception as exc:  # noqa: BLE001 - the writer thread's boundary: counted, retried
            with self._cond:
                self.failures += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
            log.error("cannot persist %s (will retry in %.1f s): %s: %s", self.name, self.retry_delay_s,
                      type(exc).__name__, exc)
            return False
        with self._cond:
            self.writes += 1
            self._done(generation)
        return True

    def _done(self, generation: int) -> None:
        """Under the lock: requests up to ``generation`` are on disk; wake whoever waits for them."""
        self._written = max(self._written, generation)
        self.last_error = None
        ready = [w for w in self._waiters if w[0] <= self._written]
        self._waiters = [w for w in self._waiters if w[0] > self._written]
        self._cond.notify_all()
        for _, loop, fut in ready:
            with contextlib.suppress(RuntimeError):  # the loop already closed: nobody waits any more
                loop.call_soon_threadsafe(_resolve, fut)
