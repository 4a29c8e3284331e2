"""RemotingClient.invoke_async and the request-handler hook, over real sockets against the real RemotingServer."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from reference_broker.remoting import (
    ConnectionContext,
    FrameDecoder,
    RemotingClient,
    RemotingCommand,
    RemotingConnectError,
    RemotingServer,
    RemotingTimeoutError,
    ResponseCode,
    ServerThread,
    create_request,
    create_response,
    encode,
)
from reference_broker.remoting.client import RemotingConnectionLostError

pytestmark = pytest.mark.timeout(30)

ECHO = 9101
SLOW = 9102
DROP = 9104  # the server closes the connection


class Collector:
    """Records each callback; ``wait`` until ``n`` arrived."""

    def __init__(self) -> None:
        self.calls: list[tuple[RemotingCommand | None, Exception | None]] = []
        self.cond = threading.Condition()

    def __call__(self, response, error) -> None:
        with self.cond:
            self.calls.append((response, error))
            self.cond.notify_all()

    def wait(self, n: int, timeout: float = 10.0) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.calls) >= n, timeout), f"{len(self.calls)} of {n} callbacks"


@pytest.fixture
def server():
    srv = RemotingServer()

    async def echo(ctx: ConnectionContext, cmd: RemotingCommand) -> RemotingCommand:
        return create_response(cmd, ResponseCode.SUCCESS, ext_fields=cmd.ext_fields, body=cmd.body)

    async def slow(ctx: ConnectionContext, cmd: RemotingCommand) -> RemotingCommand:
        await asyncio.sleep(float(cmd.ext_fields["sleep"]))
        return create_response(cmd, ResponseCode.SUCCESS)

    async def drop(ctx: ConnectionContext, cmd: RemotingCommand) -> None:
        ctx.close()

    srv.register(ECHO, echo)
    srv.register(SLOW, slow)
    srv.register(DROP, drop)
    st = srv.start_in_thread("127.0.0.1", 0)
    yield st
    st.stop()


class AskingPeer:
    """A raw-socket peer: answers the client's first request only after sending it a request of its own
    (NOTIFY_CONSUMER_IDS_CHANGED, oneway or not) and reading the client's answer, which it reports in the
    remark as "code:remark" (or "none" for a oneway request)."""

    def __init__(self, oneway: bool) -> None:
        self.oneway = oneway
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1)
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            decoder = FrameDecoder()

            def read_one() -> RemotingCommand:
                while (cmd := decoder.next_frame()) is None:
                    decoder.feed(conn.recv(65536))
                return cmd

            first = read_one()
            conn.sendall(encode(create_request(40, {"consumerGroup": "G"}, oneway=self.oneway)))
            if self.oneway:
                remark = "none"
            else:
                answer = read_one()
                assert answer.is_response
                remark = f"{answer.code}:{answer.remark}"
            conn.sendall(encode(create_response(first, ResponseCode.SUCCESS, remark=remark)))
            conn.settimeout(1.0)
            try:  # a oneway request must not be answered: nothing more may arrive
                extra = conn.recv(65536)
            except TimeoutError:
                extra = b""
            self.extra = extra

    def close(self) -> None:
        self.thread.join(5)
        self.listener.close()


@pytest.mark.parametrize("queued", [False, True], ids=["direct-writes", "writer-thread"])
def test_many_requests_in_flight_each_answered_once(server: ServerThread, queued: bool) -> None:
    got = Collector()
    with RemotingClient("127.0.0.1", server.port, queued_writes=queued) as client:
        cmds = [create_request(ECHO, {"i": str(i)}) for i in range(500)]
        for cmd in cmds:
            client.invoke_async(cmd, got, 10.0)
        got.wait(500)
        time.sleep(0.2)  # anything extra would show up now
    assert len(got.calls) == 500
    assert all(err is None for _, err in got.calls)
    responses = [r for r, _ in got.calls if r is not None]
    assert sorted(int(r.ext_fields["i"]) for r in responses) == list(range(500))
    assert {r.opaque for r in responses} == {c.opaque for c in cmds}


def test_timeout_fails_the_request_once_and_a_late_answer_is_ignored(server: ServerThread) -> None:
    got = Collector()
    with RemotingClient("127.0.0.1", server.port) as client:
        client.invoke_async(create_request(SLOW, {"sleep": "0.6"}), got, 0.2)
        got.wait(1)
        response, error = got.calls[0]
        assert response is None and isinstance(error, RemotingTimeoutError)
        time.sleep(0.8)  # the late response arrives and finds no waiter
        assert len(got.calls) == 1
        # the connection is still usable
        assert client.invoke(create_request(ECHO, {"x": "1"})).ext_fields == {"x": "1"}


def test_sweep_fails_only_expired_requests(server: ServerThread) -> None:
    got = Collector()
    with RemotingClient("127.0.0.1", server.port) as client:
        client.invoke_async(create_request(SLOW, {"sleep": "5"}), got, 60.0)
        client.invoke_async(create_request(SLOW, {"sleep": "5"}), got, 0.05)
        assert client.sweep(time.monotonic() + 1.0) == 1
        got.wait(1)
        assert isinstance(got.calls[0][1], RemotingTimeoutError)
        assert client.sweep(time.monotonic() + 1.0) == 0


@pytest.mark.parametrize("queued", [False, True], ids=["direct-writes", "writer-thread"])
def test_connection_loss_fails_pending_requests_with_unknown_outcome(server: ServerThread, queued: bool) -> None:
    got = Collector()
    with RemotingClient("127.0.0.1", server.port, queued_writes=queued) as client:
        client.invoke_async(create_request(SLOW, {"sleep": "5"}), got, 10.0)
        client.invoke_async(create_request(DROP), got, 10.0)
        got.wait(1)
        errors = [e for _, e in got.calls]
        assert all(isinstance(e, RemotingConnectionLostError) for e in errors)
        got.wait(2)
        # the next request reconnects
        assert client.invoke(create_request(ECHO, {"y": "2"})).ext_fields == {"y": "2"}


def test_connect_failure_raises_and_never_calls_back() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        got = Collector()
        with RemotingClient("127.0.0.1", port, timeout_s=2.0) as client, pytest.raises(RemotingConnectError):
            client.invoke_async(create_request(ECHO), got)
        assert got.calls == []


def test_close_fails_pending_requests(server: ServerThread) -> None:
    got = Collector()
    client = RemotingClient("127.0.0.1", server.port)
    client.invoke_async(create_request(SLOW, {"sleep": "5"}), got, 10.0)
    client.close()
    got.wait(1)
    assert isinstance(got.calls[0][1], RemotingConnectError)


def ask(peer: AskingPeer, handler=None, set_later: bool = False) -> str:
    with RemotingClient("127.0.0.1", peer.port, request_handler=None if set_later else handler) as client:
        if set_later:
            client.set_request_handler(handler)
        answer = client.invoke(create_request(ECHO), 10.0)
    peer.close()
    return answer.remark or ""


def test_server_request_goes_to_the_handler_and_its_answer_goes_back() -> None:
    seen: list[RemotingCommand] = []

    def handler(cmd: RemotingCommand) -> RemotingCommand | None:
        seen.append(cmd)
        return create_response(cmd, ResponseCode.SUCCESS, remark="handled")

    assert ask(AskingPeer(oneway=False), handler) == "0:handled"
    assert [(c.code, c.ext_fields) for c in seen] == [(40, {"consumerGroup": "G"})]


def test_without_handler_a_server_request_is_answered_not_supported() -> None:
    remark = ask(AskingPeer(oneway=False))
    assert remark == f"{int(ResponseCode.REQUEST_CODE_NOT_SUPPORTED)}: request type 40 not supported"


def test_oneway_server_request_reaches_the_handler_and_is_not_answered() -> None:
    seen: list[RemotingCommand] = []

    def handler(cmd: RemotingCommand) -> RemotingCommand | None:
        seen.append(cmd)
        return create_response(cmd, ResponseCode.SUCCESS)  # must not be sent for a oneway request

    peer = AskingPeer(oneway=True)
    assert ask(peer, handler, set_later=True) == "none"
    assert [c.code for c in seen] == [40]
    assert peer.extra == b""


def test_a_failing_handler_answers_system_error() -> None:
    def handler(cmd: RemotingCommand) -> RemotingCommand | None:
        raise RuntimeError("boom")

    assert ask(AskingPeer(oneway=False), handler) == f"{int(ResponseCode.SYSTEM_ERROR)}:RuntimeError: boom"


def test_timeouts_that_differ_slightly_share_a_deadline_queue(server: ServerThread) -> None:
    got = Collector()
    with RemotingClient("127.0.0.1", server.port) as client:
        for i in range(200):
            client.invoke_async(create_request(ECHO), got, 3.0 - i * 0.0001)  # what is left of a 3 s budget
        got.wait(200)
        assert len(client._deadlines) == 1
