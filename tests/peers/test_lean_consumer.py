"""The lean JetStream pull consumer (harness.nats_lean_consumer, ``LeanNatsDriver.consumer``) against a real
nats-server (harness.peers, loopback): its deliveries carry the fields the library consumer records for the same
messages, it creates the same durable, starts from a timestamp, stops pulling when paused, loses nothing across
a kill -9 and restart of the server, and leaves no thread behind. Skipped with the reason when nats-server or
nats-py (the library path compared with) is not installed."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path

import pytest

from harness import nats_lean_consumer
from harness.driver import Delivery
from harness.drivers import make_driver
from harness.nats_lean import LeanNatsDriver
from harness.nats_lean_consumer import LeanNatsConsumer
from harness.peer_drivers import NatsDriver, _NatsConsumer, stream_name
from harness.peers import PeerServer, unavailable_reason
from harness.records.schema import Outcome

pytestmark = pytest.mark.e2e
pytest.importorskip("nats", reason="nats-py not installed (pip install -e '.[peers]'): topics and the library path")

THREAD = "nats-lean-consumer"


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[PeerServer]:
    reason = unavailable_reason("nats")
    if reason is not None:
        pytest.skip(reason)
    with PeerServer("nats", root=tmp_path / "nats") as server:
        yield server


@pytest.fixture
def driver(nats_server: PeerServer) -> Iterator[LeanNatsDriver]:
    drv = make_driver("nats", nats_server.url, instance="t")
    assert isinstance(drv, LeanNatsDriver)
    drv.start()
    yield drv
    drv.stop()


class Got:
    """Deliveries collected from the consumer's thread."""

    def __init__(self) -> None:
        self.items: list[Delivery] = []
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, batch: list[Delivery]) -> None:
        with self._lock:
            self.items.extend(batch)
            self.calls += 1

    def keys(self) -> set[str]:
        with self._lock:
            return {d.key for d in self.items}

    def wait_keys(self, want: set[str], timeout_s: float = 15.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not want <= self.keys() and time.monotonic() < deadline:
            time.sleep(0.05)
        missing = want - self.keys()
        assert not missing, f"{len(missing)} of {len(want)} not delivered, e.g. {sorted(missing)[:3]}"


def _send(drv: NatsDriver, topic: str, keys: list[str], size: int = 200) -> dict[str, tuple[int, int]]:
    """Each key sent (queue = its index % 2): key -> (queue, offset)."""
    sent = {}
    for i, k in enumerate(keys):
        out = drv.send(topic, k, f"{k}:".encode().ljust(size, b"x"), queue=i % 2)
        assert out.outcome == Outcome.OK, out
        sent[k] = (out.queue_id, out.queue_offset)
    return sent


def _consume(drv: NatsDriver, group: str, topic: str, want: set[str], **kw: int) -> list[Delivery]:
    got = Got()
    c = drv.consumer(group, [topic], got, name=group, **kw)
    c.start()
    try:
        got.wait_keys(want)
    finally:
        c.stop()
    return got.items


def test_deliveries_carry_what_the_library_consumer_records(driver: LeanNatsDriver, nats_server: PeerServer) -> None:
    driver.create_topic("F", 2)
    keys = [f"f{i}" for i in range(300)]
    sent = _send(driver, "F", keys)
    lean = _consume(driver, "lean_g", "F", set(keys))
    library = NatsDriver(nats_server.url)
    try:
        assert isinstance(library.consumer("x", ["F"], print, name="x"), _NatsConsumer)  # the library path's own
        lib = _consume(library, "lib_g", "F", set(keys))
    finally:
        library.stop()
    by_key = {d.key: d for d in lean}
    assert len(lean) == 300 and len(by_key) == 300  # each once
    for k, (queue, offset) in sent.items():
        d = by_key[k]
        assert (d.topic, d.queue_id, d.queue_offset, d.nbytes) == ("F", queue, offset + 1, 200)  # stream seq
        assert 0 < d.born_ns <= d.store_ns < time.time_ns()
    for d in lib:
        mine = asdict(by_key[d.key])
        # nats-py reads the store time through a float (its datetime): equal to within its rounding
        assert abs(mine.pop("store_ns") - d.store_ns) < 1000
        theirs = asdict(d)
        theirs.pop("store_ns")
        assert mine == theirs


def test_it_creates_the_durable_the_library_creates(driver: LeanNatsDriver, nats_server: PeerServer) -> None:
    driver.create_topic("C", 1)
    _send(driver, "C", ["c0"])
    start_ms = int(time.time() * 1000) - 60_000
    _consume(driver, "lean_g", "C", {"c0"}, from_timestamp_ms=start_ms)
    library = NatsDriver(nats_server.url)
    try:
        _consume(library, "lib_g", "C", {"c0"}, from_timestamp_ms=start_ms)
        lean_cfg, lib_cfg = (asdict(library.call(library.js.consumer_info(stream_name("C"), g)).config)
                             for g in ("lean_g", "lib_g"))
    finally:
        library.stop()
    for cfg in (lean_cfg, lib_cfg):
        cfg.pop("name")
        cfg.pop("durable_name")
    assert lean_cfg == lib_cfg
    assert lean_cfg["deliver_policy"] == "by_start_time" and lean_cfg["filter_subject"] == "C.*"


def test_it_starts_from_a_timestamp(driver: LeanNatsDriver) -> None:
    driver.create_topic("TS", 2)
    _send(driver, "TS", [f"old{i}" for i in range(20)])
    time.sleep(0.05)
    start_ms = int(time.time() * 1000)
    time.sleep(0.05)
    new = [f"new{i}" for i in range(20)]
    _send(driver, "TS", new)
    got = _consume(driver, "ts_g", "TS", set(new), from_timestamp_ms=start_ms)
    assert {d.key for d in got} == set(new)


def test_pause_stops_pulling_and_resume_starts_again(driver: LeanNatsDriver) -> None:
    driver.create_topic("P", 2)
    first = [f"a{i}" for i in range(50)]
    _send(driver, "P", first)
    got = Got()
    c = driver.consumer("p_g", ["P"], got, name="p")
    c.start()
    try:
        got.wait_keys(set(first))
        c.pause()
        time.sleep(nats_lean_consumer.EXPIRES_S + 0.3)  # the pulls outstanding at the pause expire
        later = [f"b{i}" for i in range(50)]
        _send(driver, "P", later)
        time.sleep(1.0)
        assert got.keys() == set(first), "delivered while paused"
        c.resume()
        got.wait_keys(set(first) | set(later))
    finally:
        c.stop()
    assert driver.backlog("p_g", ["P"]).total == 0  # everything acknowledged


def test_a_server_killed_and_restarted_loses_nothing(driver: LeanNatsDriver, nats_server: PeerServer) -> None:
    driver.create_topic("K", 2)
    before = [f"k{i}" for i in range(100)]
    _send(driver, "K", before)
    got = Got()
    c = driver.consumer("k_g", ["K"], got, name="k")
    assert isinstance(c, LeanNatsConsumer)
    c.start()
    try:
        got.wait_keys(set(before))
        nats_server.kill()
        time.sleep(0.5)  # the consumer sees the connection go and retries against nothing
        nats_server.start()  # the same port and store
        after = [f"r{i}" for i in range(100)]
        _retry_sends(driver, "K", after)
        got.wait_keys(set(before) | set(after), timeout_s=20)
    finally:
        c.stop()
    assert c.reconnects >= 1


def _retry_sends(drv: NatsDriver, topic: str, keys: list[str], timeout_s: float = 15.0) -> None:
    """Each key sent until it is acknowledged (the publisher reconnects on its own after the restart)."""
    deadline = time.monotonic() + timeout_s
    for k in keys:
        while (out := drv.send(topic, k, b"x" * 100)).outcome != Outcome.OK:
            assert time.monotonic() < deadline, out
            time.sleep(0.1)


def _stop_time(stop: Callable[[], None]) -> float:
    t0 = time.monotonic()
    stop()
    return time.monotonic() - t0


def test_stop_is_prompt_and_leaves_no_thread(driver: LeanNatsDriver, nats_server: PeerServer) -> None:
    driver.create_topic("S", 1)
    _send(driver, "S", ["s0"])
    got = Got()
    running = driver.consumer("s_g", ["S"], got, name="s")
    running.start()
    got.wait_keys({"s0"})
    assert any(t.name == THREAD for t in threading.enumerate())
    assert _stop_time(running.stop) < 1.0
    nats_server.kill()  # a consumer retrying against a server that is gone
    dangling = driver.consumer("s_g", ["S"], Got(), name="s2")
    dangling.start()
    time.sleep(0.5)
    assert _stop_time(dangling.stop) < 1.0
    assert not any(t.name == THREAD for t in threading.enumerate())


def test_a_topic_subscribed_after_start_is_consumed_too(driver: LeanNatsDriver) -> None:
    driver.create_topic("A", 2)
    driver.create_topic("B", 3)
    _send(driver, "A", ["a0"])
    _send(driver, "B", ["b0", "b1"])
    got = Got()
    c = driver.consumer("ab_g", ["A"], got, name="ab")
    c.start()
    try:
        got.wait_keys({"a0"})
        assert c.owned_queues() == 2
        c.subscribe(["B", "A"])
        got.wait_keys({"a0", "b0", "b1"})
        assert c.owned_queues() == 5
        c.commit()  # every delivery is acknowledged as it is handled: nothing to do, nothing raised
    finally:
        c.stop()
    assert sorted((d.topic, d.key) for d in got.items) == [("A", "a0"), ("B", "b0"), ("B", "b1")]
