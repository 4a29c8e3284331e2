"""The lean publishers (harness.nats_lean, harness.amqp_lean) against the real servers (harness.peers: nats-server,
rabbitmq-server on loopback): every send acknowledged and its key delivered to the (library) consumer, a refusal
is "fail", a server killed under pending sends makes them "unknown" (each answered once), and the publisher
connects again after a restart. Skipped with the reason when a server or client library is not installed."""

from __future__ import annotations

import collections
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.amqp_lean import LeanAmqpPublisher, LeanRabbitMQDriver
from harness.driver import Delivery, Driver, SendOutcome
from harness.driver_load import DriverLoad, LoadShape
from harness.drivers import make_driver
from harness.nats_lean import LeanNatsDriver
from harness.peer_drivers import NatsDriver, RabbitMQDriver
from harness.peers import PeerKind, PeerServer, unavailable_reason
from harness.records import RunRecord
from harness.records.schema import Outcome

pytestmark = pytest.mark.e2e
pytest.importorskip("nats", reason="nats-py not installed (pip install -e '.[peers]'): the consumer side")
pytest.importorskip("pika", reason="pika not installed (pip install -e '.[peers]'): the consumer side")


def test_make_driver_picks_the_send_path() -> None:
    assert type(make_driver("nats", "nats://127.0.0.1:1", instance="t")) is LeanNatsDriver  # the default
    assert type(make_driver("nats", "nats://127.0.0.1:1", instance="t", peer_client="library")) is NatsDriver
    lean = make_driver("rabbitmq-classic", "amqp://127.0.0.1:1", instance="t")
    assert type(lean) is LeanRabbitMQDriver and lean.impl == "rabbitmq-classic"  # same impl: same ack promise
    assert type(make_driver("rabbitmq-quorum", "amqp://127.0.0.1:1", instance="t",
                            peer_client="library")) is RabbitMQDriver
    with pytest.raises(ValueError, match="peer client"):
        make_driver("nats", "nats://127.0.0.1:1", instance="t", peer_client="native")  # type: ignore[arg-type]


def _server(kind: PeerKind, root: Path) -> Iterator[PeerServer]:
    reason = unavailable_reason(kind)
    if reason is not None:
        pytest.skip(reason)
    with PeerServer(kind, root=root) as server:
        yield server


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[PeerServer]:
    yield from _server("nats", tmp_path / "nats")


@pytest.fixture
def rabbit_server(tmp_path: Path) -> Iterator[PeerServer]:
    yield from _server("rabbitmq", tmp_path / "rabbit")


class Answers:
    """Send callbacks collected: each send must be answered exactly once."""

    def __init__(self) -> None:
        self.outs: dict[str, list[SendOutcome]] = collections.defaultdict(list)
        self._cond = threading.Condition()

    def cb(self, key: str) -> Callable[[SendOutcome], None]:
        def done(o: SendOutcome) -> None:
            with self._cond:
                self.outs[key].append(o)
                self._cond.notify_all()
        return done

    def wait(self, n: int, timeout_s: float = 20.0) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.outs) >= n, timeout_s), f"{len(self.outs)} of {n} answered"
        time.sleep(0.2)  # a second answer to any of them would come now
        assert all(len(v) == 1 for v in self.outs.values()), "a send answered twice"

    def kinds(self) -> collections.Counter[str]:
        return collections.Counter(str(v[0].outcome) for v in self.outs.values())


def _sends_and_deliveries(drv: Driver, n: int) -> tuple[Answers, list[Delivery]]:
    drv.start()
    drv.create_topic("LeanT", 2)
    answers = Answers()
    for i in range(n):
        drv.send_async("LeanT", f"k{i}", f"body-{i}".encode() * 50, answers.cb(f"k{i}"))
    answers.wait(n)
    got: list[Delivery] = []
    consumer = drv.consumer("lean_g", ["LeanT"], got.extend, name="c")
    consumer.start()
    deadline = time.monotonic() + 30
    while len({d.key for d in got}) < n and time.monotonic() < deadline:
        time.sleep(0.1)
    consumer.stop()
    return answers, got


def test_nats_every_send_acknowledged_and_delivered(nats_server: PeerServer) -> None:
    drv = make_driver("nats", nats_server.url, instance="t")
    assert isinstance(drv, LeanNatsDriver)
    try:
        answers, got = _sends_and_deliveries(drv, 500)
    finally:
        drv.stop()
    assert answers.kinds() == {"ok": 500}
    offsets = sorted(o[0].queue_offset for o in answers.outs.values())
    assert offsets == list(range(500))  # the stream sequence - 1, one per stored message
    assert {d.key for d in got} == {f"k{i}" for i in range(500)}
    assert all(d.born_ns > 0 and d.queue_id in (0, 1) for d in got)  # the born header reached the consumer


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_rabbitmq_every_send_confirmed_and_delivered(rabbit_server: PeerServer, queue_type: str) -> None:
    drv = make_driver(f"rabbitmq-{queue_type}", rabbit_server.url, instance="t")
    assert isinstance(drv, LeanRabbitMQDriver)
    try:
        answers, got = _sends_and_deliveries(drv, 500)
        facts = drv.broker_facts()
    finally:
        drv.stop()
    assert answers.kinds() == {"ok": 500}
    assert {d.key for d in got} == {f"k{i}" for i in range(500)}  # message_id = the key
    assert all(d.born_ns > 0 for d in got)  # the headers table's born time
    assert facts["peer_client"] == "lean" and facts["broker_impl"].startswith("rabbitmq-server 3.")


def test_rabbitmq_a_large_body_crosses_frames(rabbit_server: PeerServer) -> None:
    drv = make_driver("rabbitmq-classic", rabbit_server.url, instance="t")
    try:
        drv.start()
        drv.create_topic("Big", 1)
        body = bytes(range(256)) * 2000  # 512 KB: several body frames at frame_max 128 KB
        assert drv.send("Big", "big", body).outcome == Outcome.OK
        got: list[Delivery] = []
        consumer = drv.consumer("g", ["Big"], got.extend, name="c")
        consumer.start()
        deadline = time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            time.sleep(0.1)
        consumer.stop()
    finally:
        drv.stop()
    assert [(d.key, d.nbytes) for d in got] == [("big", len(body))]


def test_nats_no_responders_and_a_refusing_stream_are_fail(nats_server: PeerServer) -> None:
    drv = make_driver("nats", nats_server.url, instance="t")
    try:
        drv.start()
        out = drv.send("NoStream", "k", b"x")  # no stream on the subject: the server's 503
        assert (out.outcome, out.code) == (Outcome.FAIL, 503) and "no responders" in (out.error or "")
        assert isinstance(drv, NatsDriver)
        from nats.js.api import DiscardPolicy, StreamConfig

        # A stream that takes one message and refuses the next (discard new): a PubAck with an error.
        drv.call(drv.js.add_stream(StreamConfig(name="One", subjects=["One.0"], max_msgs=1,
                                                discard=DiscardPolicy.NEW)))
        assert drv.send("One", "a", b"x", queue=0).outcome == Outcome.OK
        refused = drv.send("One", "b", b"x", queue=0)
        too_big = drv.send("One", "big", bytes(2 << 20), queue=0)  # above max_payload: refused, still connected
        assert too_big.outcome == Outcome.FAIL and "max_payload" in (too_big.error or "")
        assert drv.send("NoStream", "after", b"x").code == 503  # the connection survived it
    finally:
        drv.stop()
    assert refused.outcome == Outcome.FAIL and refused.code > 0 and "error" in (refused.error or ""), refused


def test_rabbitmq_return_and_nack_are_fail(rabbit_server: PeerServer) -> None:
    import pika  # type: ignore[import-untyped]

    drv = make_driver("rabbitmq-quorum", rabbit_server.url, instance="t")
    try:
        drv.start()
        answers = Answers()
        assert isinstance(drv, LeanRabbitMQDriver)
        pub = drv._running()  # the lean publisher: a routing key no queue has is returned (mandatory)
        assert isinstance(pub, LeanAmqpPublisher)
        pub.publish("NoSuchQueue.0", 0, "ret", b"x", answers.cb("ret"))
        # A classic queue that takes one message and rejects the rest (overflow reject-publish): a basic.nack
        # (a quorum queue with the same arguments took the second message too: RabbitMQ 3.10).
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", rabbit_server.port))
        conn.channel().queue_declare("Full.0", durable=True, arguments={
            "x-max-length": 1, "x-overflow": "reject-publish"})
        conn.close()
        pub.publish("Full.0", 0, "first", b"x", answers.cb("first"))
        answers.wait(2)
        pub.publish("Full.0", 0, "second", b"x", answers.cb("second"))
        answers.wait(3)
    finally:
        drv.stop()
    ret, first, second = (answers.outs[k][0] for k in ("ret", "first", "second"))
    assert (ret.outcome, ret.code) == (Outcome.FAIL, 312) and "returned" in (ret.error or "")
    assert first.outcome == Outcome.OK
    assert second.outcome == Outcome.FAIL and second.error == "basic.nack"


def _stopped(server: PeerServer) -> None:
    """Every process of the server is stopped (state T) within 2 s of SIGSTOP: else the test says what ran."""
    pid = server.pid
    deadline = time.monotonic() + 2.0
    state = "?"
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            state = "gone"
        if state == "T":
            return
        time.sleep(0.01)
    raise AssertionError(f"the server ({pid}) is not stopped after SIGSTOP: state {state}; alive={server.alive}; "
                         f"log:\n{server.log_path.read_text()[-2000:]}")


def _killed_under_pending(server: PeerServer, publish: Callable[[str, Callable[[SendOutcome], None]], None],
                          n: int) -> Answers:
    """Stop the server (SIGSTOP: the sends pile up unanswered), send ``n``, then kill it: all ``n`` pending."""
    answers = Answers()
    server.pause()
    try:
        _stopped(server)
        for i in range(n):
            publish(f"p{i}", answers.cb(f"p{i}"))
        time.sleep(0.3)
        assert not answers.outs, "answered while the server was stopped"
    finally:
        server.kill()
        server.resume()
    answers.wait(n)
    return answers


def test_nats_killed_server_makes_pending_sends_unknown_then_reconnects(nats_server: PeerServer) -> None:
    drv = make_driver("nats", nats_server.url, instance="t", send_timeout_s=30.0)
    try:
        drv.start()
        drv.create_topic("K", 1)
        answers = _killed_under_pending(
            nats_server, lambda k, cb: drv.send_async("K", k, b"x", cb, queue=0), 50)
        assert answers.kinds() == {"unknown": 50}
        assert all("connection lost" in (v[0].error or "") for v in answers.outs.values())
        assert drv.send("K", "down", b"x").outcome == Outcome.FAIL  # nothing to write to: not connected
        nats_server.start()  # the same port and store
        deadline = time.monotonic() + 15
        while (out := drv.send("K", "again", b"x", queue=0)).outcome != Outcome.OK and time.monotonic() < deadline:
            time.sleep(0.2)
        assert out.outcome == Outcome.OK, out
    finally:
        drv.stop()


def test_rabbitmq_killed_server_makes_pending_sends_unknown(rabbit_server: PeerServer) -> None:
    drv = make_driver("rabbitmq-classic", rabbit_server.url, instance="t", send_timeout_s=30.0)
    try:
        drv.start()
        drv.create_topic("K", 1)
        answers = _killed_under_pending(
            rabbit_server, lambda k, cb: drv.send_async("K", k, b"x", cb, queue=0), 50)
        assert answers.kinds() == {"unknown": 50}
        assert all("connection lost" in (v[0].error or "") for v in answers.outs.values())
        assert drv.send("K", "down", b"x", queue=0).outcome == Outcome.FAIL
    finally:
        drv.stop()


@pytest.mark.parametrize("driver", ["nats", "rabbitmq-quorum"])
@pytest.mark.parametrize("peer_client", ["lean", "library"])
def test_driver_load_names_its_client(driver: str, peer_client: str, tmp_path: Path) -> None:
    """The driver workload through either send path: nothing lost, and meta.json says which client sent."""
    kind: PeerKind = "nats" if driver == "nats" else "rabbitmq"
    reason = unavailable_reason(kind)
    if reason is not None:
        pytest.skip(reason)
    with PeerServer(kind, root=tmp_path / "srv") as server:
        drv = make_driver(driver, server.url, instance="t", peer_client=peer_client)  # type: ignore[arg-type]
        assert isinstance(drv, NatsDriver if driver == "nats" else RabbitMQDriver)
        record = RunRecord.create(tmp_path / "runs", f"lean-{driver}", {"driver": driver})
        load = DriverLoad(drv, record, LoadShape(seconds=1.0, in_flight=16, queues=2), topic="LT", group="lg")
        try:
            result = load.run()
        finally:
            drv.stop()
    assert result.sent_ok > 50 and result.sent_fail == 0 and result.sent_unknown == 0
    assert result.check is not None and result.check.valid and result.check.lost == 0
    meta = json.loads((record.run_dir / "meta.json").read_text())
    assert meta["peer_client"] == peer_client
