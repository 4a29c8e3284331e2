"""The lean RocketMQ publisher (harness.rocketmq_lean): its frames decode (with the project's FrameDecoder) to
the request the client library sends; against a real name server and reference broker every send is
acknowledged and its key and born time reach the (library) consumer as the library driver's do, a refusal is
"fail", a broker killed under pending sends makes them "unknown" (each answered once) and the publisher sends
again after the broker's restart; one run against Apache RocketMQ 4.9.8."""

from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.driver import BORN_NS_PROPERTY, Delivery, Driver, RocketMQDriver, SendOutcome
from harness.drivers import make_driver
from harness.launcher import Topology
from harness.records.schema import Outcome
from harness.rocketmq_lean import LeanRocketMQDriver, build_frame, frame_parts, outcome_of_response
from reference_broker.client import Message, protocol
from reference_broker.remoting.codec import FrameDecoder
from reference_broker.remoting.codes import ResponseCode
from reference_broker.remoting.command import RemotingCommand, encode


def _decode(frame: bytes) -> RemotingCommand:
    d = FrameDecoder()
    d.feed(frame)
    cmd = d.next_frame()
    assert cmd is not None and d.buffered == 0
    return cmd


@pytest.mark.parametrize("key", ["k-17", 'a "quoted" key\\with\tblanks', "ключ-ü"])
def test_a_lean_frame_decodes_to_the_librarys_request(key: str) -> None:
    """The library's request for the same message (Message(keys=...) + its UNIQ_KEY), field for field."""
    uniq, born_ns, body = "7F0000010ABC1234AB00000100000007", 1_700_000_000_123_456_789, b"\x00payload\xff" * 30
    lean = _decode(build_frame(frame_parts("grp", "TopicA", 3), 4242, born_ns, key, uniq, body))
    msg = Message("TopicA", body, keys=key)  # as harness.driver.born_message makes it
    msg.put_user_property(BORN_NS_PROPERTY, str(born_ns))
    msg.properties["UNIQ_KEY"] = uniq  # the library stamps it last (Producer._prepare)
    lib = protocol.send_request("grp", "TopicA", 3, body, protocol.encode_properties(msg.properties),
                                born_timestamp=born_ns // 1_000_000)
    lib.opaque = 4242
    want = _decode(encode(lib))
    assert lean == want  # code, language, version, opaque, flag, every ext field, the body
    assert lean.ext_fields["i"] == f"KEYS\x01{key}\x02WAIT\x01true\x02LAB_BORN_NS\x01{born_ns}\x02UNIQ_KEY\x01{uniq}"
    assert lean.ext_fields["g"] == "1700000000123"  # bornTimestamp, ms


def test_response_codes_are_classified_as_the_library_driver_does() -> None:
    ext = {"queueId": "2", "queueOffset": "41", "msgId": "x"}
    for code in (ResponseCode.SUCCESS, ResponseCode.FLUSH_DISK_TIMEOUT, ResponseCode.FLUSH_SLAVE_TIMEOUT,
                 ResponseCode.SLAVE_NOT_AVAILABLE):
        assert outcome_of_response(code, ext, None, 2) == SendOutcome(Outcome.OK, code, 2, 41)
    refused = outcome_of_response(ResponseCode.SYSTEM_ERROR, {}, "request queueId[9] is illegal", 9)
    assert (refused.outcome, refused.code, refused.queue_id) == (Outcome.FAIL, ResponseCode.SYSTEM_ERROR, 9)
    assert "illegal" in (refused.error or "")
    assert outcome_of_response(ResponseCode.SUCCESS, {}, None, 1).outcome == Outcome.FAIL  # no position


def test_make_driver_picks_the_rocketmq_send_path() -> None:
    assert type(make_driver("rocketmq", "127.0.0.1:1", instance="t")) is RocketMQDriver  # the default: library
    assert type(make_driver("rocketmq", "127.0.0.1:1", instance="t", rocketmq_client="lean")) is LeanRocketMQDriver
    with pytest.raises(ValueError, match="rocketmq client"):
        make_driver("rocketmq", "127.0.0.1:1", instance="t", rocketmq_client="native")  # type: ignore[arg-type]


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

    def wait(self, n: int, timeout_s: float = 30.0) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.outs) >= n, timeout_s), f"{len(self.outs)} of {n} answered"
        time.sleep(0.2)  # a second answer to any of them would come now
        assert all(len(v) == 1 for v in self.outs.values()), "a send answered twice"

    def kinds(self) -> collections.Counter[str]:
        return collections.Counter(str(v[0].outcome) for v in self.outs.values())


def _send_and_consume(drv: Driver, topic: str, prefix: str, n: int) -> tuple[Answers, list[Delivery], int, int]:
    """``n`` async sends, then a library consumer until every key came; with the wall clock around the sends."""
    drv.create_topic(topic, 2)
    answers = Answers()
    t0 = time.time_ns()
    for i in range(n):
        drv.send_async(topic, f"{prefix}{i}", b"b" * (100 + i), answers.cb(f"{prefix}{i}"))
    answers.wait(n)
    t1 = time.time_ns()
    got: list[Delivery] = []
    consumer = drv.consumer(f"g_{topic}", [topic], got.extend, name=topic)
    consumer.start()
    deadline = time.monotonic() + 30
    while len({d.key for d in got}) < n and time.monotonic() < deadline:
        time.sleep(0.1)
    consumer.stop()
    return answers, got, t0, t1


def _same_deliveries(answers: Answers, got: list[Delivery], prefix: str, n: int, t0: int, t1: int) -> None:
    assert answers.kinds() == {"ok": n}
    by_key = {d.key: d for d in got}
    assert set(by_key) == {f"{prefix}{i}" for i in range(n)}
    for key, d in by_key.items():
        o = answers.outs[key][0]
        assert (d.queue_id, d.queue_offset) == (o.queue_id, o.queue_offset)  # acked where it was stored
        assert d.nbytes == 100 + int(key[len(prefix):])
        assert t0 <= d.born_ns <= t1  # the send time in ns (LAB_BORN_NS), on either path
    per_queue = collections.Counter(d.queue_id for d in got)
    assert set(per_queue) == {0, 1} and abs(per_queue[0] - per_queue[1]) <= 1  # round-robin


def _drivers(namesrv: str) -> tuple[Driver, Driver]:
    tag = f"{os.getpid()}-{time.time_ns() % 10**6}"
    return (make_driver("rocketmq", namesrv, instance=f"lean-{tag}", rocketmq_client="lean"),
            make_driver("rocketmq", namesrv, instance=f"lib-{tag}", rocketmq_client="library"))


@pytest.mark.e2e
def test_lean_sends_are_acknowledged_and_delivered_as_the_librarys(tmp_path: Path) -> None:
    with Topology(tmp_path / "topo") as topo:
        lean, lib = _drivers(topo.namesrv_addr)
        try:
            for drv in (lean, lib):
                drv.start()
            results = {name: _send_and_consume(drv, f"Lean_{name}", f"{name}-", 300)
                       for name, drv in (("lean", lean), ("lib", lib))}
            facts = lean.broker_facts()
        finally:
            for drv in (lean, lib):
                drv.stop()
    for name, (answers, got, t0, t1) in results.items():
        _same_deliveries(answers, got, f"{name}-", 300, t0, t1)
    assert facts["rocketmq_client"] == "lean"


@pytest.mark.e2e
def test_a_refused_send_is_fail_and_the_connection_stays(tmp_path: Path) -> None:
    with Topology(tmp_path / "topo") as topo:
        drv = make_driver("rocketmq", topo.namesrv_addr, instance=f"lean-refused-{os.getpid()}",
                          rocketmq_client="lean")
        try:
            drv.start()
            drv.create_topic("Refused", 2)
            assert isinstance(drv, LeanRocketMQDriver)
            answers = Answers()
            drv.publisher().publish_to(topo.brokers[0].addr, "Refused", 99, "bad-queue", b"x", answers.cb("bad"))
            answers.wait(1)
            no_route = drv.send("NoSuchTopicHere", "k", b"x")  # the name server has no route: nothing written
            after = drv.send("Refused", "after", b"x", queue=1)
        finally:
            drv.stop()
    bad = answers.outs["bad"][0]
    assert (bad.outcome, bad.code) == (Outcome.FAIL, ResponseCode.SYSTEM_ERROR) and "illegal" in (bad.error or "")
    assert no_route.outcome == Outcome.FAIL and "no route" in (no_route.error or ""), no_route
    assert (after.outcome, after.queue_id) == (Outcome.OK, 1), after


@pytest.mark.e2e
def test_a_killed_broker_makes_pending_sends_unknown_then_sends_resume_after_its_restart(tmp_path: Path) -> None:
    with Topology(tmp_path / "topo") as topo:
        drv = make_driver("rocketmq", topo.namesrv_addr, instance=f"lean-kill-{os.getpid()}",
                          send_timeout_s=30.0, rocketmq_client="lean")
        broker = topo.brokers[0]
        try:
            drv.start()
            drv.create_topic("Killed", 2)
            assert drv.send("Killed", "before", b"x").outcome == Outcome.OK  # route and connection up
            answers = Answers()
            broker.pause()  # SIGSTOP: the sends are written and pile up unanswered
            try:
                for i in range(50):
                    drv.send_async("Killed", f"p{i}", b"x", answers.cb(f"p{i}"))
                time.sleep(0.3)
                assert not answers.outs, "answered while the broker was stopped"
            finally:
                broker.kill()
                broker.resume()
            answers.wait(50)
            assert answers.kinds() == {"unknown": 50}
            assert all("connection lost" in (v[0].error or "") for v in answers.outs.values())
            down = drv.send("Killed", "down", b"x")
            broker.start()  # the same port and store
            deadline = time.monotonic() + 60
            while (out := drv.send("Killed", "again", b"x")).outcome != Outcome.OK and time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            drv.stop()
    assert down.outcome == Outcome.FAIL, down  # not connected: nothing written
    assert out.outcome == Outcome.OK, out


@pytest.mark.e2e
@pytest.mark.slow
def test_lean_sends_against_rocketmq_498(tmp_path: Path, rocketmq_home: Path) -> None:
    with Topology(tmp_path / "rmq", impl="rocketmq", rocketmq_home=rocketmq_home) as topo:
        lean, lib = _drivers(topo.namesrv_addr)
        try:
            for drv in (lean, lib):
                drv.start()
            results = {name: _send_and_consume(drv, f"Lean_{name}", f"{name}-", 200)
                       for name, drv in (("lean", lean), ("lib", lib))}
            assert isinstance(lean, LeanRocketMQDriver)
            answers = Answers()
            lean.publisher().publish_to(topo.brokers[0].addr, "Lean_lean", 99, "bad", b"x", answers.cb("bad"))
            answers.wait(1)
        finally:
            for drv in (lean, lib):
                drv.stop()
    for name, (a, got, t0, t1) in results.items():
        _same_deliveries(a, got, f"{name}-", 200, t0, t1)
    assert answers.outs["bad"][0].outcome == Outcome.FAIL  # 4.9.8's msgCheck: the queue id is illegal
