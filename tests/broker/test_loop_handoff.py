"""LoopHandoff: answers completed on other threads reach the event loop in batches (one wake-up per batch)."""

from __future__ import annotations

import asyncio
import threading

from reference_broker.broker.loop_handoff import LoopHandoff


def test_a_batch_from_another_thread_wakes_the_loop_once_and_resolves_every_future():
    async def main() -> tuple[list[object], int]:
        loop = asyncio.get_running_loop()
        handoff = LoopHandoff(loop)
        futs = [loop.create_future() for _ in range(50)]
        calls = 0
        real = loop.call_soon_threadsafe

        def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
            nonlocal calls
            calls += 1
            return real(*args, **kwargs)

        loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
        boom = ValueError("boom")

        def complete() -> None:  # one thread completes them all while the loop waits: one batch
            for i, f in enumerate(futs):
                if i == 7:
                    handoff.fail(f, boom)
                else:
                    handoff.resolve(f, i)

        t = threading.Thread(target=complete)
        t.start()
        t.join()
        done = await asyncio.gather(*futs, return_exceptions=True)
        return done, calls

    done, calls = asyncio.run(main())
    assert calls == 1
    assert done[:7] == list(range(7)) and isinstance(done[7], ValueError) and done[8:] == list(range(8, 50))


def test_the_next_batch_wakes_the_loop_again():
    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        handoff = LoopHandoff(loop)
        out = []
        for n in range(3):
            f = loop.create_future()
            threading.Thread(target=handoff.resolve, args=(f, n)).start()
            out.append(await asyncio.wait_for(f, 5))
        return out

    assert asyncio.run(main()) == [0, 1, 2]


def test_on_the_loop_thread_a_future_is_set_at_once_and_a_cancelled_one_is_skipped():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        handoff = LoopHandoff(loop)
        f, cancelled = loop.create_future(), loop.create_future()
        cancelled.cancel()
        handoff.resolve(f, "x")
        handoff.resolve(cancelled, "y")
        assert f.done() and f.result() == "x"
        assert cancelled.cancelled()

    asyncio.run(main())
