"""The driver: offset parsing (pure) and the RocketMQ implementation against a real broker (the outcome
classification is tested in tests/harness/test_send_outcome.py)."""

from __future__ import annotations

import threading
import time

from harness.driver import Delivery, SendOutcome, parse_offset_table
from harness.records import Outcome


def wait_for(pred, timeout_s=20.0, what="condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} not reached in {timeout_s} s")


# ---- pure ------------------------------------------------------------------------------------------------


def test_parse_offset_table_keeps_one_group():
    body = b'{"offsetTable": {"T@g": {"0": 5, "1": 7}, "T@other": {"0": 9}, "U@g": {"2": 1}}}'
    assert parse_offset_table(body, "g") == {("T", 0): 5, ("T", 1): 7, ("U", 2): 1}
    assert parse_offset_table(b"", "g") == {}


def test_parse_offset_table_reads_rocketmq_bare_queue_ids():
    # RocketMQ 4.9.8's fastjson writes ConsumerOffsetManager's Integer keys bare (docs/findings.md F5).
    body = b'{"offsetTable":{"T@g":{0:5,1:7},"T@other":{0:9}}}'
    assert parse_offset_table(body, "g") == {("T", 0): 5, ("T", 1): 7}


# ---- against a broker ---------------------------------------------------------------------------------------


def test_topic_send_and_outcomes(driver):
    driver.create_topic("DrvSend", 4)
    ok = driver.send("DrvSend", "k-1", b"x" * 10)
    assert ok.outcome == Outcome.OK and ok.code == 0 and 0 <= ok.queue_id < 4 and ok.queue_offset >= 0
    fixed = driver.send("DrvSend", "k-2", b"y", queue=2)
    assert fixed.queue_id == 2
    batch = driver.send_batch("DrvSend", ["k-3", "k-4", "k-5"], [b"a", b"b", b"c"], queue=1)
    assert batch.outcome == Outcome.OK and batch.queue_id == 1
    done = threading.Event()
    got: list[SendOutcome] = []

    def callback(o: SendOutcome) -> None:
        got.append(o)
        done.set()

    driver.send_async("DrvSend", "k-6", b"z", callback)
    assert done.wait(10) and got[0].outcome == Outcome.OK
    too_big = driver.send("DrvSend", "k-7", b"x" * (4 * 1024 * 1024 + 1))
    assert too_big.outcome == Outcome.FAIL and too_big.code == 13  # MESSAGE_ILLEGAL, refused by the client


def test_a_stopped_broker_makes_sends_unknown(topo, driver):
    driver.create_topic("DrvStall", 2)
    assert driver.send("DrvStall", "warm", b"w").outcome == Outcome.OK
    driver.send_timeout_s = 0.5
    driver.stop()  # a new producer with the short timeout
    topo.brokers[0].pause()
    try:
        o = driver.send("DrvStall", "stalled", b"s")
    finally:
        topo.brokers[0].resume()
    assert o.outcome == Outcome.UNKNOWN, o


def test_consume_pause_resume_and_backlog(driver):
    driver.create_topic("DrvConsume", 2)
    got: list[Delivery] = []
    lock = threading.Lock()

    def on_delivery(ds: list[Delivery]) -> None:
        with lock:
            got.extend(ds)

    c = driver.consumer("drv_group", ["DrvConsume"], on_delivery, name="c0", threads=2, batch=8)
    c.start()
    wait_for(lambda: c.owned_queues() == 2, what="queues assigned")
    before = time.time_ns()
    for i in range(10):
        assert driver.send("DrvConsume", f"a-{i}", b"x" * 100).outcome == Outcome.OK
    wait_for(lambda: len(got) >= 10, what="10 deliveries")
    d = next(x for x in got if x.key == "a-0")
    assert d.topic == "DrvConsume" and d.nbytes == 100 and d.queue_offset >= 0
    assert before - 1_000_000_000 < d.born_ns <= d.store_ns + 1_000_000 < time.time_ns() + 1_000_000  # store: ms
    c.pause()
    time.sleep(1.5)  # a pull already held at the broker may still bring messages; the next ones wait
    n = len(got)
    for i in range(20):
        driver.send("DrvConsume", f"b-{i}", b"x")
    time.sleep(1.0)
    assert len(got) - n < 20  # at most one held pull per queue (2 x batch 8) completes after the pause
    wait_for(lambda: driver.backlog("drv_group", ["DrvConsume"]).total >= 20 - (len(got) - n),
             what="the broker reporting the backlog")
    c.resume()
    wait_for(lambda: {x.key for x in got} >= {f"b-{i}" for i in range(20)}, what="the paused messages")
    c.stop()
    backlog = driver.backlog("drv_group", ["DrvConsume"])
    assert backlog.total == 0 and set(backlog.per_queue) == {"DrvConsume/0", "DrvConsume/1"}


def test_broker_facts(driver):
    facts = driver.broker_facts()
    assert facts["broker"]["flushDiskType"] == "ASYNC_FLUSH"
    assert facts["broker_impl"].startswith("reference_broker")
    assert list(facts["brokers"]) == ["broker-a"]
