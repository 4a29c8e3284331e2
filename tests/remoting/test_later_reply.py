"""LaterReply: a handler's answer settled later on the loop, bound by the server with no future per request
(remoting/later_reply.py). Unit tests of the object, then a real server over a real socket."""

from __future__ import annotations

import asyncio
import threading

import pytest

from reference_broker.remoting import RemotingClient, RemotingServer, ResponseCode, create_request, create_response
from reference_broker.remoting.later_reply import LaterReply

pytestmark = pytest.mark.timeout(20)

LATER = 9101


def test_settled_after_bind_answers_once_and_settled_before_bind_answers_at_bind():
    got: list[tuple[bool, object]] = []
    first = LaterReply()
    first.bind(lambda ok, value: got.append((ok, value)))
    assert got == []
    first.settle(True, "a")
    first.settle(True, "again")  # never made; answers nothing
    second = LaterReply()
    second.settle(False, ValueError("b"))
    assert got == [(True, "a")]
    second.bind(lambda ok, value: got.append((ok, value)))
    assert got[1][0] is False and isinstance(got[1][1], ValueError)


def test_awaiting_it_gives_the_answer_or_raises_the_failure():
    async def main() -> None:
        ok, bad = LaterReply(), LaterReply()
        loop = asyncio.get_running_loop()
        loop.call_soon(ok.settle, True, "answer")
        loop.call_soon(bad.settle, False, RuntimeError("disk on fire"))
        assert await ok == "answer"
        with pytest.raises(RuntimeError, match="disk on fire"):
            await bad

    asyncio.run(main())


def test_a_real_server_answers_later_replies_settled_from_another_thread():
    """Each request's LaterReply is settled by a thread that hands the answer to the loop (as the group commit
    does through LoopHandoff): every request gets its own answer, a failure SYSTEM_ERROR, and nothing stays
    pending once answered."""
    srv = RemotingServer()
    threads: list[threading.Thread] = []

    def later(ctx, cmd):  # type: ignore[no-untyped-def]
        reply = LaterReply()
        loop = asyncio.get_running_loop()
        n = int(cmd.ext_fields["n"])
        value = RuntimeError("flush failed") if n == 7 else create_response(cmd, ResponseCode.SUCCESS, remark=str(n))

        def complete() -> None:
            loop.call_soon_threadsafe(reply.settle, n != 7, value)

        t = threading.Thread(target=complete)
        threads.append(t)
        t.start()
        return reply

    srv.register(LATER, later)
    st = srv.start_in_thread()
    client = RemotingClient("127.0.0.1", srv.port, timeout_s=10)
    try:
        answers = [client.invoke(create_request(LATER, {"n": str(n)})) for n in range(20)]
        for t in threads:
            t.join(5)
        assert [a.remark for a in answers if a.code == ResponseCode.SUCCESS] == [str(n) for n in range(20) if n != 7]
        assert answers[7].code == ResponseCode.SYSTEM_ERROR and "flush failed" in (answers[7].remark or "")
        assert srv.pending_requests() == 0
    finally:
        client.close()
        st.stop()
