"""This module owns long polling: pull requests held until a message arrives or their time is up
(broker/.../longpolling/PullRequestHoldService.java, NotifyMessageArrivingListener, 4.9.8).

A PULL that finds nothing and carries the suspend flag is parked under ``topic@queueId`` with the offset it
wants and its tag filter. The dispatch thread reports each run of new consume-queue entries through
``arriving_run(requests)`` (a single entry through ``arriving(topic, queue_id, max_offset, tags_code)``); a
parked request is woken when the queue's max offset is past its offset and the filter matches (RocketMQ's
notifyMessageArriving). Expired requests are woken too and re-executed without the suspend flag, as
RocketMQ's checkHoldRequest does every 5 s (1 s when short polling).

Threading: ``arriving_run`` is called on the dispatch thread. It reads ``_keys`` — a set only the event loop
changes — and crosses into the loop once per run, only for entries of queues that have waiters: with no pull
held a run costs one test, and an idle queue one set lookup per message rather than a loop wake-up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from reference_broker.common.dispatch import DispatchRequest

log = logging.getLogger(__name__)

CHECK_INTERVAL_LONG_S: Final = 5.0  # PullRequestHoldService: waitForRunning(5 * 1000) with long polling
CHECK_INTERVAL_SHORT_S: Final = 1.0  # and shortPollingTimeMills (1000) without


class Wake:
    """Why a held pull was woken: a matching arrival, or its suspend time ran out."""

    ARRIVED = "arrived"
    TIMEOUT = "timeout"
    SHUTDOWN = "shutdown"


@dataclass(eq=False)
class HeldPull:
    topic: str
    queue_id: int
    offset: int
    deadline: float  # time.monotonic()
    matches: Callable[[int], bool] | None  # tags-code filter; None matches everything
    future: asyncio.Future[str]


class PullRequestHoldService:
    def __init__(self, loop: asyncio.AbstractEventLoop, max_offset: Callable[[str, int], int],
                 check_interval_s: float = CHECK_INTERVAL_LONG_S,
                 on_first_held: Callable[[], None] | None = None) -> None:
        self.loop = loop
        self.max_offset = max_offset
        self.check_interval_s = check_interval_s
        # Called when a pull is held and none was: the store's dispatch may be in a long idle wait, chosen while
        # nothing waited, and must look again at once (``any_held`` now says yes).
        self.on_first_held = on_first_held
        self._held: dict[tuple[str, int], list[HeldPull]] = {}
        self._keys: set[tuple[str, int]] = set()  # mirror of _held's keys, read by the dispatch thread
        self._task: asyncio.Task[None] | None = None

    def held_count(self) -> int:
        return sum(len(v) for v in self._held.values())

    def any_held(self) -> bool:
        """A pull is held (the store's dispatch waiter, called on the dispatch thread): dispatch then looks for
        new records every 1 ms, since a held pull's latency is dispatch's. Reads ``_keys`` only."""
        return bool(self._keys)

    def suspend(self, topic: str, queue_id: int, offset: int, timeout_s: float,
                matches: Callable[[int], bool] | None) -> asyncio.Future[str]:
        """Park a request (on the loop); the future resolves to a ``Wake`` reason."""
        fut: asyncio.Future[str] = self.loop.create_future()
        req = HeldPull(topic, queue_id, offset, time.monotonic() + timeout_s, matches, fut)
        key = (topic, queue_id)
        self._held.setdefault(key, []).append(req)
        first = not self._keys
        self._keys.add(key)
        if first and self.on_first_held is not None:
            self.on_first_held()
        self.loop.call_later(timeout_s, self._expire, req)
        # A message may have arrived between the store read and the park: look once more.
        if self.max_offset(topic, queue_id) > offset:
            self._wake(key, lambda r: r is req, Wake.ARRIVED)
        return fut

    def _expire(self, req: HeldPull) -> None:
        if not req.future.done():
            self._wake((req.topic, req.queue_id), lambda r: r is req, Wake.TIMEOUT)

    # ---- called from the dispatch thread ------------------------------------------------------
    def arriving_run(self, reqs: Sequence[DispatchRequest]) -> None:
        """A run of dispatched records, in log order (the store's dispatch hook)."""
        keys = self._keys
        if not keys:
            return
        hits = [((r.topic, r.queue_id), r.consume_queue_offset + 1, r.tags_code) for r in reqs
                if (r.topic, r.queue_id) in keys]
        if hits:
            try:
                self.loop.call_soon_threadsafe(self._notify_all, hits)
            except RuntimeError:  # loop closed during shutdown
                pass

    def arriving_queues(self, grown: Sequence[tuple[str, int, int]]) -> None:
        """Queues that grew, as ``(topic, queue id, max offset)`` (the store's arrival hook, with the dispatch
        process): no tags code, so a held pull with a tag filter wakes and reads (4.9.8 checks the arriving
        record's tags code first)."""
        keys = self._keys
        if not keys:
            return
        hits = [((topic, queue_id), max_offset, None) for topic, queue_id, max_offset in grown
                if (topic, queue_id) in keys]
        if hits:
            try:
                self.loop.call_soon_threadsafe(self._notify_all, hits)
            except RuntimeError:  # loop closed during shutdown
                pass

    def arriving(self, topic: str, queue_id: int, max_offset: int, tags_code: int, _store_ts: int = 0) -> None:
        key = (topic, queue_id)
        if key not in self._keys:
            return
        try:
            self.loop.call_soon_threadsafe(self._notify, key, max_offset, tags_code)
        except RuntimeError:  # loop closed during shutdown
            pass

    # ---- on the loop ----------------------------------------------------------------------------
    def _notify_all(self, hits: Sequence[tuple[tuple[str, int], int, int | None]]) -> None:
        for key, max_offset, tags_code in hits:
            self._notify(key, max_offset, tags_code)

    def _notify(self, key: tuple[str, int], max_offset: int, tags_code: int | None) -> None:
        def due(r: HeldPull) -> bool:
            if max_offset <= r.offset:
                return False
            return tags_code is None or r.matches is None or r.matches(tags_code)

        self._wake(key, due, Wake.ARRIVED)

    def _wake(self, key: tuple[str, int], due: Callable[[HeldPull], bool], reason: str) -> None:
        reqs = self._held.get(key)
        if not reqs:
            return
        keep = []
        for r in reqs:
            if r.future.done():
                continue
            if due(r):
                r.future.set_result(reason)
            else:
                keep.append(r)
        if keep:
            self._held[key] = keep
        else:
            del self._held[key]
            self._keys.discard(key)

    def check_hold_requests(self) -> None:
        """checkHoldRequest: wake what timed out, and anything whose queue moved on (a missed arrival)."""
        now = time.monotonic()
        for key in list(self._held):
            max_offset = self.max_offset(*key)

            def due(r: HeldPull, max_offset: int = max_offset) -> bool:
                return max_offset > r.offset or now >= r.deadline

            self._wake(key, due, Wake.ARRIVED)  # a timed-out one re-executes just the same

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.check_interval_s)
            try:
                self.check_hold_requests()
            except Exception:  # the hold service's loop: the next check runs anyway
                log.exception("checkHoldRequest failed")

    def start(self) -> None:
        self._task = self.loop.create_task(self.run())

    def shutdown(self) -> None:
        """Answer every held request now (it re-executes without suspend), as a broker stopping should."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        for key in list(self._held):
            self._wake(key, lambda _r: True, Wake.SHUTDOWN)
