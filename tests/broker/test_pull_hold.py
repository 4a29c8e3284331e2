"""Long polling: held pulls woken by arrivals (from another thread), by filter, by timeout and at shutdown."""

import asyncio
import threading

from reference_broker.broker.pull_hold import PullRequestHoldService, Wake
from reference_broker.common.dispatch import DispatchRequest


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


def test_arrival_from_another_thread_wakes_a_matching_request():
    async def main():
        loop = asyncio.get_running_loop()
        max_off = {"v": 5}
        hold = PullRequestHoldService(loop, lambda t, q: max_off["v"])
        fut = hold.suspend("T", 0, 5, 10.0, None)
        assert hold.held_count() == 1
        other = hold.suspend("T", 1, 5, 10.0, None)

        def dispatch():
            max_off["v"] = 6
            hold.arriving("T", 0, 6, 0)

        threading.Thread(target=dispatch).start()
        assert await fut == Wake.ARRIVED
        assert not other.done(), "another queue's request stays held"
        hold.shutdown()
        assert await other == Wake.SHUTDOWN

    run(main())


def test_arrival_not_past_the_offset_or_not_matching_keeps_it_held():
    async def main():
        loop = asyncio.get_running_loop()
        hold = PullRequestHoldService(loop, lambda t, q: 0)
        fut = hold.suspend("T", 0, 3, 10.0, lambda code: code == 42)
        hold._notify(("T", 0), 3, 42)  # max offset not past 3
        hold._notify(("T", 0), 4, 7)  # filter does not match
        await asyncio.sleep(0.01)
        assert not fut.done()
        hold._notify(("T", 0), 4, 42)
        assert await fut == Wake.ARRIVED
        assert hold.held_count() == 0
        assert ("T", 0) not in hold._keys

    run(main())


def test_timeout_wakes_with_timeout_reason():
    async def main():
        hold = PullRequestHoldService(asyncio.get_running_loop(), lambda t, q: 0)
        assert await hold.suspend("T", 0, 0, 0.05, None) == Wake.TIMEOUT

    run(main())


def test_message_that_arrived_before_parking_is_not_missed():
    async def main():
        hold = PullRequestHoldService(asyncio.get_running_loop(), lambda t, q: 10)
        assert await hold.suspend("T", 0, 9, 10.0, None) == Wake.ARRIVED

    run(main())


def test_periodic_check_catches_a_missed_notification():
    async def main():
        state = {"max": 0}
        hold = PullRequestHoldService(asyncio.get_running_loop(), lambda t, q: state["max"], check_interval_s=0.02)
        hold.start()
        fut = hold.suspend("T", 0, 0, 10.0, None)
        state["max"] = 1  # no arriving() call at all
        assert await fut == Wake.ARRIVED
        hold.shutdown()

    run(main())


def test_arriving_for_an_idle_queue_does_not_touch_the_loop():
    loop = asyncio.new_event_loop()
    try:
        hold = PullRequestHoldService(loop, lambda t, q: 0)
        loop.close()
        hold.arriving("T", 0, 1, 0)  # would raise if it tried call_soon_threadsafe on a closed loop
    finally:
        if not loop.is_closed():
            loop.close()


def _dispatched(topic: str, queue_id: int, cq_offset: int, tags_code: int) -> DispatchRequest:
    return DispatchRequest(topic, queue_id, 0, 100, tags_code, 0, cq_offset, "", None, 0, 0)


def test_a_run_wakes_only_the_queues_that_grew_past_the_held_offset():
    async def main():
        hold = PullRequestHoldService(asyncio.get_running_loop(), lambda t, q: 0)
        grown = hold.suspend("T", 0, 5, 10.0, lambda code: code == 42)
        behind = hold.suspend("T", 1, 9, 10.0, None)
        untouched = hold.suspend("U", 0, 0, 10.0, None)
        run_of = [_dispatched("T", 0, 5, 7), _dispatched("T", 1, 3, 0), _dispatched("T", 0, 6, 42),
                  _dispatched("V", 0, 0, 0)]
        threading.Thread(target=hold.arriving_run, args=(run_of,)).start()
        assert await grown == Wake.ARRIVED  # the entry at 6 matches its filter
        await asyncio.sleep(0.01)
        assert not behind.done() and not untouched.done()
        hold.shutdown()

    run(main())


def test_a_run_with_no_pull_held_does_not_touch_the_loop():
    loop = asyncio.new_event_loop()
    hold = PullRequestHoldService(loop, lambda t, q: 0)
    loop.close()
    hold.arriving_run([_dispatched("T", 0, 0, 0)])  # would raise on the closed loop if it crossed


def test_the_first_held_pull_tells_dispatch_and_any_held_says_so():
    """on_first_held: dispatch may be in a long idle wait chosen while nothing was held (store/reput.py)."""
    async def main():
        calls = []
        hold = PullRequestHoldService(asyncio.get_running_loop(), lambda t, q: 0, on_first_held=lambda: calls.append(1))
        assert not hold.any_held()
        a = hold.suspend("T", 0, 0, 10.0, None)
        b = hold.suspend("T", 1, 0, 10.0, None)
        assert hold.any_held() and calls == [1]  # once, for the first
        hold._notify(("T", 0), 1, 0)
        hold._notify(("T", 1), 1, 0)
        assert await a == Wake.ARRIVED and await b == Wake.ARRIVED
        assert not hold.any_held()
        c = hold.suspend("T", 0, 0, 10.0, None)
        assert calls == [1, 1]  # none was held again
        hold.shutdown()
        assert await c == Wake.SHUTDOWN

    run(main())
