"""ConsumePool: the push consumer's consume thread pool (ConsumeMessageConcurrentlyService.consumeExecutor).

It does what ``ThreadPoolExecutor`` did here: it runs submitted calls in order, on up to ``max_threads``
threads, started as work arrives; after ``shutdown`` it refuses new work with RuntimeError, as RocketMQ's
pool throws RejectedExecutionException. It makes no Future per call. At RocketMQ's default
consumeMessageBatchMaxSize of 1 there is one call per message, and a py-spy profile of the consumer put
about a quarter of its CPU in the Future, its Condition and the executor's bookkeeping.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

_STOP = None  # a worker that takes this ends


class ConsumePool:
    def __init__(self, max_threads: int, name: str) -> None:
        if max_threads < 1:
            raise ValueError(f"max_threads must be at least 1, got {max_threads}")
        self._max = max_threads
        self._name = name
        self._calls: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]] | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)  # released by a worker each time it is about to wait for work
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._shutdown = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on a pool thread; RuntimeError once the pool is shut down."""
        if self._shutdown:
            raise RuntimeError("cannot schedule new calls after shutdown")
        self._calls.put((fn, args))
        if self._idle.acquire(blocking=False):
            return  # an idle worker will take it
        with self._lock:
            if len(self._threads) < self._max and not self._shutdown:
                t = threading.Thread(target=self._work, name=f"{self._name}_{len(self._threads)}", daemon=True)
                self._threads.append(t)
                t.start()

    def _work(self) -> None:
        calls = self._calls
        while True:
            item = calls.get()
            if item is _STOP:
                return
            fn, args = item
            try:
                fn(*args)
            except Exception:  # a call's own failure must not end the worker (the executor kept it in a Future)
                log.exception("consume call %r failed", fn)
            self._idle.release()

    @property
    def threads(self) -> int:
        return len(self._threads)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """``ThreadPoolExecutor.shutdown``: refuse new calls; with ``cancel_futures`` drop the queued ones;
        with ``wait`` join the workers once they have finished what they run."""
        with self._lock:
            self._shutdown = True
            threads = list(self._threads)
        if cancel_futures:
            while True:
                try:
                    self._calls.get_nowait()
                except queue.Empty:
                    break
        for _ in threads:
            self._calls.put(_STOP)
        if wait:
            for t in threads:
                if t is not threading.current_thread():
                    t.join()
