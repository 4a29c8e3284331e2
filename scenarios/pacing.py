"""Open-loop pacing: the schedule of intended send times, shared by every User of a process.

Slot k is intended at ``anchor + k * period``: it does not move when a send is late, so a slow broker shows
up as publish delay (start - intended; OMB's publishDelayLatency, issue #247) instead of silently lowering
the offered rate (coordinated omission). Sans-IO: the caller supplies the clock and does the waiting.
"""

from __future__ import annotations


class Pacer:
    """``take(now_ns)`` hands out slots in order; ``None`` when closed loop (rate 0: send as fast as possible).

    ``per_slot`` messages go in one slot (a batch), so the message rate stays ``rate`` whatever the batch size.
    """

    __slots__ = ("_anchor_ns", "_k", "_period_ns", "per_slot", "rate")

    def __init__(self, rate: float, now_ns: int, per_slot: int = 1) -> None:
        self.per_slot = per_slot
        self.rate = 0.0
        self._period_ns = 0.0
        self._anchor_ns = now_ns
        self._k = 0
        self.set_rate(rate, now_ns)

    def set_rate(self, rate: float, now_ns: int) -> None:
        """A new rate from ``now_ns`` on (slots already taken keep their times)."""
        if rate < 0:
            raise ValueError("rate must be >= 0")
        self.rate = rate
        self._period_ns = self.per_slot * 1e9 / rate if rate > 0 else 0.0
        self._anchor_ns = now_ns
        self._k = 0

    @property
    def open_loop(self) -> bool:
        return self.rate > 0

    def take(self) -> int | None:
        """The intended start of the next slot (wall-clock ns), or None in closed loop."""
        if self._period_ns == 0.0:
            return None
        intended = self._anchor_ns + round(self._k * self._period_ns)
        self._k += 1
        return intended

    def behind_ns(self, now_ns: int) -> int:
        """How far the next slot is in the past (0 when on time or closed loop)."""
        if self._period_ns == 0.0:
            return 0
        return max(0, now_ns - (self._anchor_ns + round(self._k * self._period_ns)))
