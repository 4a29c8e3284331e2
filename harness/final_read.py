"""The final read: each acknowledged message no consumer received, read back from the broker by position.

A run's consumers may end behind its producers (a drain that timed out). An acknowledged message that no
consumer received is then not yet shown lost: the broker may still hold it. Jepsen's queue tests end with a
final drain whose dequeues join the history; here the read is targeted and kept apart. Each acknowledged send
row names the (topic, queue, offset) the broker gave it; the positions whose key no accepted receive row has
are pulled back with a pull consumer of the harness's own group (it commits no offset), and each message found
whose key was wanted there becomes an op "read" row. The checker calls such a key ``unread`` (stored and
served at the end, never delivered within the run), not ``lost``.

A send row carries no broker name, so with several brokers a (topic, queue id) is read on every broker that
has it; a found message counts only when its key is one that was acknowledged at that position (keys are
unique per run), so a position read on the wrong broker adds nothing.

``wanted_positions`` and ``windows`` are pure; ``read_back`` does the pulls.
"""

# pyarrow ships no type information; its names are Any here.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from harness.records import EventWriter
from harness.records.schema import Op, Outcome
from reference_broker.client import ClientConfig, MessageQueue, MQClientError, PullConsumer, PullStatus

COLUMNS: Final = ["op", "key", "topic", "queue_id", "queue_offset", "outcome"]
PULL_BATCH: Final = 32  # RocketMQ's pull batch cap (PullMessageProcessor: maxMsgNums), as the consumers use
SESSION: Final = "final-read"
MAX_PULL_ERRORS: Final = 5  # per (broker, queue): then that queue's positions stay unread


Position = tuple[str, int, int]  # topic, queue id, queue offset


def wanted_positions(events: pa.Table) -> dict[Position, set[str]]:
    """(topic, queue id, offset) -> the keys acknowledged there that no accepted receive (or earlier read) has.

    ``events`` needs the ``COLUMNS``. A send acknowledged without a position (queue id or offset -1) cannot be
    read back by position and is left out: the checker still calls it lost if nobody received it."""
    ok = pc.equal(events["outcome"], Outcome.OK)
    seen = events.filter(pc.and_(ok, pc.is_in(events["op"], pa.array([Op.RECEIVE, Op.READ]))))["key"]
    sends = events.filter(pc.and_(pc.and_(ok, pc.equal(events["op"], Op.SEND)),
                                  pc.and_(pc.greater_equal(events["queue_id"], 0),
                                          pc.greater_equal(events["queue_offset"], 0))))
    sends = sends.filter(pc.invert(pc.is_in(sends["key"], value_set=seen.combine_chunks().unique())))
    out: dict[Position, set[str]] = {}
    for key, topic, queue, offset in zip(*(sends[c].to_pylist() for c in ("key", "topic", "queue_id",
                                                                             "queue_offset")), strict=True):
        out.setdefault((topic, queue, offset), set()).add(key)
    return out


def windows(offsets: Sequence[int], batch: int = PULL_BATCH) -> list[tuple[int, int]]:
    """Distinct offsets as (first offset, count) pulls of at most ``batch`` offsets each, a pull starting at
    the first offset not yet covered: a gap shorter than a batch (a received message between two unreceived
    ones) is read over rather than paid for with another round trip."""
    pulls: list[tuple[int, int]] = []
    for offset in np.unique(np.asarray(offsets, np.int64)).tolist():
        if pulls and offset < pulls[-1][0] + batch:
            pulls[-1] = (pulls[-1][0], offset - pulls[-1][0] + 1)
        else:
            pulls.append((offset, 1))
    return pulls


@dataclass
class ReadStats:
    """What the final read did: positions asked, messages found, pulls made and what went wrong."""

    wanted: int = 0
    found: int = 0
    pulls: int = 0
    seconds: float = 0.0
    complete: bool = True
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {"wanted": self.wanted, "found": self.found, "pulls": self.pulls, "seconds": round(self.seconds, 3),
                "complete": self.complete, "problems": self.problems[:20]}


def _by_queue(wanted: dict[Position, set[str]]) -> Iterator[tuple[str, int, list[int]]]:
    queues: dict[tuple[str, int], list[int]] = {}
    for topic, queue, offset in wanted:
        queues.setdefault((topic, queue), []).append(offset)
    for (topic, queue), offsets in sorted(queues.items()):
        yield topic, queue, offsets


def read_back(namesrv: str, wanted: dict[Position, set[str]], writer: EventWriter, *, group: str,
              instance: str, budget_s: float = 60.0, clock: Callable[[], int] = time.time_ns) -> ReadStats:
    """Pull every wanted position and record each wanted key found there as a read row; at most ``budget_s``."""
    stats = ReadStats(wanted=sum(len(keys) for keys in wanted.values()))
    if not wanted:
        return stats
    t0 = time.monotonic()
    deadline = t0 + budget_s
    consumer = PullConsumer(group, namesrv, client_config=ClientConfig(namesrv, instance))
    try:
        consumer.start()
        routes: dict[str, list[MessageQueue] | None] = {}  # one route look-up per topic, not per queue
        for topic, queue, offsets in _by_queue(wanted):
            if topic not in routes:
                try:
                    routes[topic] = sorted(consumer.fetch_message_queues(topic))
                except MQClientError as exc:
                    routes[topic] = None
                    stats.complete = False
                    stats.problems.append(f"{topic}: no route ({exc})")
            for mq in (mq for mq in routes[topic] or () if mq.queue_id == queue):
                if time.monotonic() >= deadline:
                    stats.complete = False
                    stats.problems.append(f"stopped after {budget_s:g} s")
                    return stats
                _read_queue(consumer, mq, offsets, wanted, writer, stats, clock)
    except MQClientError as exc:
        stats.complete = False
        stats.problems.append(f"final read failed: {exc}")
    finally:
        consumer.shutdown()
        stats.seconds = time.monotonic() - t0
    return stats


def _read_queue(consumer: PullConsumer, mq: MessageQueue, offsets: list[int], wanted: dict[Position, set[str]],
                writer: EventWriter, stats: ReadStats, clock: Callable[[], int]) -> None:
    errors = 0
    for first, count in windows(offsets):
        offset, end_offset = first, first + count
        while offset < end_offset:  # a pull may return fewer messages than asked (the broker's transfer caps)
            start = clock()
            try:
                result = consumer.pull(mq, "*", offset, end_offset - offset)
            except MQClientError as exc:
                errors += 1
                stats.complete = False
                stats.problems.append(f"{mq.broker_name}/{mq.topic}/{mq.queue_id} at {offset}: {exc}")
                if errors >= MAX_PULL_ERRORS:
                    return
                break
            stats.pulls += 1
            if result.pull_status is not PullStatus.FOUND or not result.msg_found_list:
                break  # gone (below the queue's min offset) or never there: those keys stay unread
            end = clock()
            for m in result.msg_found_list:
                if m.keys in wanted.get((mq.topic, mq.queue_id, m.queue_offset), ()):
                    writer.record_read(m.keys, m.topic, m.queue_id, m.queue_offset, start, end,
                                       born_ns=m.born_timestamp * 1_000_000, store_ns=m.store_timestamp * 1_000_000,
                                       nbytes=len(m.body))
                    stats.found += 1
            offset = max(offset + 1, result.msg_found_list[-1].queue_offset + 1)
