"""Rewinding a consumer group by time, on real processes of either implementation (test_reset_offset_e2e.py:
the reference broker; test_reset_offset_vs_rocketmq.py: RocketMQ 4.9.8), always through the CLI
(``python -m reference_broker admin resetOffsetByTime``) and the project's client:

- backwards, with the group's push consumer running: the broker sends RESET_CONSUMER_CLIENT_OFFSET, the
  consumer takes the new offsets without a restart and receives again exactly the messages from there on;
- forwards, with a slow consumer behind: the messages between where it was and the time are skipped;
- with nobody online: the stored offsets move, and a consumer started afterwards begins there.

Messages are sent one at a time a few milliseconds apart, so each has its own store timestamp, and the target
is a message's own store timestamp: the reset lands on that message's offset exactly (to the millisecond).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from harness.launcher import Topology
from reference_broker.client import (
    ClientConfig,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    Producer,
    PullConsumer,
    PushConsumer,
)
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import create_request
from reference_broker.tools import admin
from tests.client.helpers import wait_for

RESET_WAIT_S = 0.3  # the consumer's pause for consumption in flight (4.9.8: 10 s)


@dataclass(frozen=True)
class Sent:
    key: str
    queue_id: int
    offset: int
    store_ts: int


def cfg(topo: Topology, name: str) -> ClientConfig:
    return ClientConfig(topo.namesrv_addr, name, poll_name_server_interval_s=1.0, rebalance_interval_s=1.0,
                        persist_consumer_offset_interval_s=0.5, heartbeat_broker_interval_s=2.0)


def send_spaced(topo: Topology, topic: str, n: int, prefix: str) -> list[Sent]:
    """``n`` messages, one at a time, each stored in its own millisecond; their queues, offsets, store times."""
    c = cfg(topo, f"{prefix}-producer")
    with Producer(f"{prefix}Producer", c.namesrv_addr, client_config=c) as producer:
        for i in range(n):
            producer.send(Message(topic, f"{prefix}{i}".encode(), keys=f"{prefix}{i}"))
            time.sleep(0.003)
    time.sleep(0.5)  # RocketMQ builds the consume queue a moment after the answer
    out: list[Sent] = []
    c = cfg(topo, f"{prefix}-reader")
    with PullConsumer(f"{prefix}Reader", c.namesrv_addr, client_config=c) as reader:
        for mq in reader.fetch_message_queues(topic):
            offset = 0
            while True:
                result = reader.pull(mq, "*", offset, 32)
                out += [Sent(m.keys, m.queue_id, m.queue_offset, m.store_timestamp)
                        for m in result.msg_found_list if m.keys.startswith(prefix)]
                if not result.msg_found_list:
                    break
                offset = result.next_begin_offset
    assert len(out) == n, out
    assert len({s.store_ts for s in out}) == n, "two messages share a store millisecond"
    return sorted(out, key=lambda s: s.store_ts)


class Recorder:
    """A push consumer's listener: how often each key arrived, in order; ``delay_s`` per message."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.counts: Counter[str] = Counter()
        self.order: list[str] = []
        self.lock = threading.Lock()
        self.delay_s = delay_s

    def __call__(self, msgs: list[Any], _ctx: object) -> ConsumeConcurrentlyStatus:
        for m in msgs:
            if self.delay_s:
                time.sleep(self.delay_s)
            with self.lock:
                self.counts[m.keys] += 1
                self.order.append(m.keys)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def seen(self) -> set[str]:
        with self.lock:
            return set(self.counts)


def push_consumer(topo: Topology, group: str, topic: str, recorder: Recorder, threads: int = 4) -> PushConsumer:
    c = cfg(topo, f"{group}-consumer")
    consumer = PushConsumer(group, c.namesrv_addr, client_config=c,
                            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                            consume_thread_min=threads, consume_thread_max=threads, pull_batch_size=1)
    consumer.reset_offset_wait_s = RESET_WAIT_S
    consumer.subscribe(topic, "*")
    consumer.register_message_listener(recorder)
    consumer.start()
    return consumer


def reset_cli(topo: Topology, group: str, topic: str, timestamp: int, force: bool = True) -> dict[str, Any]:
    p = subprocess.run([sys.executable, "-m", "reference_broker", "admin", "resetOffsetByTime", "-n",
                        topo.namesrv_addr, "-g", group, "-t", topic, "-s", str(timestamp), "-f", str(force).lower(),
                        "--json"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    result: dict[str, Any] = json.loads(p.stdout)
    return result


def committed(topo: Topology, group: str, topic: str, broker_name: str, queue_id: int) -> int:
    addr = admin.master_addrs(topo.namesrv_addr)[broker_name]
    with RemotingClient.from_addr(addr, 10) as c:
        r = c.invoke(create_request(RequestCode.QUERY_CONSUMER_OFFSET,
                                    {"consumerGroup": group, "topic": topic, "queueId": str(queue_id)}))
    return int(r.ext_fields["offset"]) if r.code == ResponseCode.SUCCESS else -1


def _at_or_after(sent: list[Sent], offsets: dict[int, int]) -> set[str]:
    return {s.key for s in sent if s.offset >= offsets[s.queue_id]}


def rows_by_queue(result: dict[str, Any], column: str) -> dict[int, int]:
    return {int(r["queueId"]): int(r[column]) for r in result["rows"]}


def consumed(topo: Topology, group: str, topic: str, n: int, prefix: str) -> tuple[list[Sent], Recorder,
                                                                                    PushConsumer]:
    """``n`` messages sent, then all consumed by a running push consumer of ``group``, its offsets persisted."""
    sent = send_spaced(topo, topic, n, prefix)
    recorder = Recorder()
    consumer = push_consumer(topo, group, topic, recorder)
    try:
        wait_for(lambda: recorder.seen() >= {s.key for s in sent}, 60, "first delivery")
        time.sleep(1.5)  # offsets persisted
    except BaseException:
        consumer.shutdown()
        raise
    return sent, recorder, consumer


def backwards_with_a_live_consumer(topo: Topology, topic: str) -> None:
    sent, recorder, consumer = consumed(topo, "RewindLive", topic, 16, "bw")
    try:
        target = sent[9]  # the tenth message stored
        result = reset_cli(topo, "RewindLive", topic, target.store_ts)
        assert result["mode"] == "broker"
        offsets = rows_by_queue(result, "offset")
        assert offsets[target.queue_id] == target.offset  # to the millisecond: that message's own offset
        again = _at_or_after(sent, offsets)
        assert target.key in again
        wait_for(lambda: all(recorder.counts[k] >= 2 for k in again), 60, "redelivery after the reset")
        time.sleep(1.0)
        with recorder.lock:
            assert {k for k, n in recorder.counts.items() if n >= 2} == again  # nothing before the time again
    finally:
        consumer.shutdown()


def forwards_past_a_slow_consumer(topo: Topology, topic: str) -> None:
    sent = send_spaced(topo, topic, 40, "fw")  # one queue: the offsets are the send order
    recorder = Recorder(delay_s=0.3)
    consumer = push_consumer(topo, "RewindAhead", topic, recorder, threads=1)
    try:
        broker = next(iter(admin.master_addrs(topo.namesrv_addr)))
        wait_for(lambda: committed(topo, "RewindAhead", topic, broker, 0) >= 1, 60, "an offset committed")
        target = sent[30]
        result = reset_cli(topo, "RewindAhead", topic, target.store_ts)
        assert rows_by_queue(result, "offset") == {0: 30}
        wait_for(lambda: recorder.seen() >= {s.key for s in sent[30:]}, 60, "delivery from the new offset")
        seen = recorder.seen()
        skipped = [s.key for s in sent[:30] if s.key not in seen]
        assert skipped, "nothing was skipped: the consumer had caught up before the reset"
        # the skipped messages are one run ending right before the target
        assert skipped == [s.key for s in sent[30 - len(skipped):30]]
    finally:
        consumer.shutdown()


def with_nobody_online(topo: Topology, topic: str) -> None:
    sent, _recorder, consumer = consumed(topo, "RewindStored", topic, 12, "off")
    consumer.shutdown()
    target = sent[4]
    result = reset_cli(topo, "RewindStored", topic, target.store_ts)
    assert result["mode"] == "stored"
    offsets = rows_by_queue(result, "resetOffset")
    assert offsets[target.queue_id] == target.offset
    broker = result["rows"][0]["brokerName"]
    for queue_id, offset in offsets.items():
        assert committed(topo, "RewindStored", topic, broker, queue_id) == offset
    again = Recorder()
    consumer = push_consumer(topo, "RewindStored", topic, again)
    try:
        expected = _at_or_after(sent, offsets)
        wait_for(lambda: again.seen() >= expected, 60, "delivery from the stored offsets")
        time.sleep(1.0)
        assert again.seen() == expected
    finally:
        consumer.shutdown()

