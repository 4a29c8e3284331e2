"""Wall-clock nanoseconds for event timestamps: one ``time.time_ns`` anchor plus ``perf_counter_ns`` deltas.

Why not ``time.time_ns()`` per event: the wall clock can be stepped (NTP, an operator) during a run, which
would make latencies negative or wrong; ``perf_counter_ns`` is monotonic and has ns resolution. The anchor
keeps the values on the wall-clock scale so events from several processes (and the broker's born/store
timestamps) line up to within the anchoring error, which ``WallClock`` measures and exposes.
"""

from __future__ import annotations

import time


class WallClock:
    """``now_ns()`` = anchor wall time + monotonic time elapsed since the anchor."""

    __slots__ = ("anchor_error_ns", "offset_ns")

    def __init__(self) -> None:
        # Bracket time_ns() between two perf_counter_ns() reads and keep the tightest of a few tries: the
        # anchor is then off by at most half the bracket (anchor_error_ns).
        best = None
        for _ in range(5):
            p0 = time.perf_counter_ns()
            wall = time.time_ns()
            p1 = time.perf_counter_ns()
            if best is None or p1 - p0 < best[0]:
                best = (p1 - p0, wall - (p0 + p1) // 2)
        assert best is not None
        self.anchor_error_ns: int = (best[0] + 1) // 2
        self.offset_ns: int = best[1]

    def now_ns(self) -> int:
        return time.perf_counter_ns() + self.offset_ns

    def from_perf_ns(self, perf_ns: int) -> int:
        """Convert a ``time.perf_counter_ns()`` reading taken in this process to wall-clock ns."""
        return perf_ns + self.offset_ns


_PROCESS_CLOCK: WallClock | None = None


def wall_clock() -> WallClock:
    """The process-wide clock (CLOCK_MONOTONIC is system-wide, so the anchor stays valid across fork)."""
    global _PROCESS_CLOCK
    if _PROCESS_CLOCK is None:
        _PROCESS_CLOCK = WallClock()
    return _PROCESS_CLOCK
