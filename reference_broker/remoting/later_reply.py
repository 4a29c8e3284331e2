"""LaterReply: an answer another thread completes, given to the server without an asyncio future.

A SYNC_FLUSH send is answered once its group commit completes, on the group-commit thread; the answer crosses
to the event loop (broker/loop_handoff.py) and the connection writes it. With an ``asyncio.Future`` per send,
``set_result`` schedules the server's done callback through ``call_soon``: a Handle, a loop turn and a
callback per send (with the future's own ``cancelled``/``exception``/``result`` calls), about a sixth of a
SYNC_FLUSH send's bookkeeping. A LaterReply is settled on the loop thread by whoever hands the answer over and
calls the server's answer function at once: no Handle, no future.

Both ``bind`` (the server, right after the handler returned it) and ``settle`` (the hand-off's drain, or the
handler's own thread when it completes on the loop) run on the loop's thread, in either order: no lock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from typing import Any

Answer = Callable[[bool, Any], None]  # (ok, the response or the exception)


class LaterReply:
    """A handler's answer that comes later (settled once, on the event loop's thread)."""

    __slots__ = ("_answer", "_settled")

    def __init__(self) -> None:
        self._answer: Answer | None = None
        self._settled: tuple[bool, Any] | None = None  # settled before the server bound it

    def bind(self, answer: Answer) -> None:
        """The server's ``answer(ok, value)``, called once the reply is settled (at once if it already is)."""
        settled = self._settled
        if settled is None:
            self._answer = answer
        else:
            self._settled = None
            answer(*settled)

    def settle(self, ok: bool, value: Any) -> None:
        """The response (``ok``) or the exception the handler failed with (the peer gets SYSTEM_ERROR)."""
        answer = self._answer
        if answer is None:
            self._settled = (ok, value)
        else:
            self._answer = None  # settled once: a second settle (none is made) answers nothing
            answer(ok, value)

    def __await__(self) -> Generator[Any, None, Any]:
        """Awaited where a handler's answer is awaited (a send that also waits for a config write, tests): a
        future of the running loop, bound like the server binds it."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def answer(ok: bool, value: Any) -> None:
            if not fut.done():
                if ok:
                    fut.set_result(value)
                else:
                    fut.set_exception(value)

        self.bind(answer)
        return fut.__await__()
