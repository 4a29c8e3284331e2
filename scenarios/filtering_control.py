"""The filter comparison of ``scenarios/filtering.py``: the same messages consumed by a tag subscription, an
SQL92 subscription and (when the client has it) a FilterServer class filter, each matching the same share of
them (``--selectivity``), and what each costs.

1. The run's own producers stop: this scenario's load is the filter workload below (the run's check still
   covers whatever they sent before).
2. ``--filter-messages`` messages go (the broker's CPU time meanwhile is recorded) to a topic of their own:
   message i has the user property ``sel`` = (i * 37) % 100 (every value once per hundred, spread) and the
   tag ``hit`` when ``sel`` < selectivity x 100, else ``miss<sel % 10>``; so the tag filter ``hit``, the
   selector ``sel < P`` and the class filter
   ``int(message.properties["sel"]) < P`` match exactly the same messages.
   Before that, each mode's push consumer (a fresh group, from the first offset) starts suspended: its filter
   is registered at the broker before the messages are stored, as a long-running consumer's would be (the
   SQL92 filter bits, when on, then cover every message).
3. Each mode in turn is resumed alone and reads until it has every expected message (or ``--drain-timeout``).
   Measured over that drain: the broker's CPU time (its process and its children: filter servers run there),
   the bytes the consumer read from the broker (and filter servers) — the bytes on the wire to the consumer —
   and the delivery rate at the consumer, between its first and last delivery.

Findings in meta.json ``results.filtering`` (one row per mode; a skipped mode says why), and in the report
page (spark_reports/jobs/filtering.py).
"""

from __future__ import annotations

import inspect
import os
import threading
import time
from pathlib import Path
from typing import Any, Final

from reference_broker.client import (
    ClientConfig,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    MessageSelector,
    Producer,
    PushConsumer,
)
from reference_broker.tools import admin
from scenarios.spec import RunContext

MODES: Final = ("tag", "sql92", "filterserver")
SEL_STRIDE: Final = 37  # coprime with 100: consecutive messages spread over the sel values
SEND_BATCH: Final = 64  # messages per batch send while producing the workload
POLL_S: Final = 0.05
# between the consumers' registration and the first message: a message stored in the millisecond its SQL92
# filter was born is not covered by the filter's bits (isMsgInLive: store time > bornTime)
FILTER_BIRTH_GAP_S: Final = 0.05


def sel_value(i: int) -> int:
    return (i * SEL_STRIDE) % 100


def threshold(selectivity: float) -> int:
    """The ``sel`` values below this match: selectivity x 100, at least 1."""
    return max(1, min(100, round(selectivity * 100)))


def message_fields(i: int, cut: int) -> tuple[str, dict[str, str]]:
    """(tags, user properties) of message i."""
    sel = sel_value(i)
    return ("hit" if sel < cut else f"miss{sel % 10}"), {"sel": str(sel)}


def expected_keys(n: int, cut: int, prefix: str) -> set[str]:
    return {f"{prefix}{i}" for i in range(n) if sel_value(i) < cut}


def filter_source(cut: int) -> str:
    """The FilterServer mode's class filter (Python source with ``match(message)``)."""
    return f"def match(message):\n    return int(message.properties.get('sel', '100')) < {cut}\n"


def filter_server_support() -> str | None:
    """None when the client can subscribe with a class filter, else why not."""
    try:
        params = inspect.signature(PushConsumer.subscribe).parameters
    except (TypeError, ValueError):
        return "the client's PushConsumer.subscribe cannot be inspected"
    if "filter_source" not in params:
        return "the client has no FilterServer class filter (PushConsumer.subscribe(topic, filter_source=...))"
    return None


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` and its live descendants (/proc/<pid>/stat fields 14 and 15)."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        p = int(entry.name)
        parents[p] = int(fields[1])
        times[p] = (int(fields[11]) + int(fields[12])) / tick
    if pid not in times:
        return None
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        total += times.get(p, 0.0)
        todo.extend(c for c, parent in parents.items() if parent == p)
    return total


def _cpu(pids: list[int]) -> float | None:
    values = [process_cpu_s(p) for p in pids]
    return None if not pids or any(v is None for v in values) else sum(v for v in values if v is not None)


def _client_config(ctx: RunContext, name: str) -> ClientConfig:
    return ClientConfig(ctx.info.namesrv, f"lab-{ctx.info.tag}-{name}-{os.getpid()}", poll_name_server_interval_s=1.0,
                        rebalance_interval_s=1.0, persist_consumer_offset_interval_s=1.0)


def _create_topic(ctx: RunContext, topic: str, queues: int) -> None:
    for b in ctx.brokers:
        admin.update_topic(ctx.info.namesrv, topic, queues, queues, broker_addr=b.addr)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if admin.read_queues(ctx.info.namesrv, topic):
                return
        except admin.AdminError:
            pass
        ctx.sleep(0.2)
    raise RuntimeError(f"no route for {topic} after 30 s")


def produce(ctx: RunContext, topic: str, n: int, cut: int, prefix: str) -> dict[str, Any]:
    body = os.urandom(ctx.settings.message_size)
    sent = 0
    pids = [b.pid for b in ctx.brokers if b.pid is not None]
    cpu0 = _cpu(pids)
    start = time.monotonic()
    with Producer(f"lab_filtering_{ctx.info.tag}", ctx.info.namesrv,
                  client_config=_client_config(ctx, "filter-producer")) as producer:
        for first in range(0, n, SEND_BATCH):
            batch = []
            for i in range(first, min(n, first + SEND_BATCH)):
                tags, props = message_fields(i, cut)
                batch.append(Message(topic, body, tags=tags, keys=f"{prefix}{i}", properties=props))
            producer.send_batch(batch)
            sent += len(batch)
    elapsed = time.monotonic() - start
    cpu1 = _cpu(pids)
    # with enableCalcFilterBitMap the SQL92 selectors are evaluated here, at dispatch: their cost shows in this
    # figure (the produce phase), not in the drains'
    return {"messages": sent, "seconds": elapsed, "rate": sent / elapsed if elapsed > 0 else None,
            "broker_cpu_s": None if cpu0 is None or cpu1 is None else cpu1 - cpu0}


class ModeRun:
    """One mode's consumer: started suspended before the workload is produced (so that its filter is
    registered, and an SQL92 group's bloom-filter bits computed, before the messages are stored), then
    resumed alone for its drain."""

    def __init__(self, ctx: RunContext, mode: str, topic: str, n: int, cut: int, prefix: str) -> None:
        self.ctx = ctx
        self.mode = mode
        self.skipped = filter_server_support() if mode == "filterserver" else None
        self.expected = expected_keys(n, cut, prefix)
        self.got: set[str] = set()
        self.unexpected = 0
        self.first_at: float | None = None
        self.last_at: float | None = None
        self.lock = threading.Lock()
        self.group = f"lab_filtering_{ctx.info.tag}_{mode}"
        self.consumer: PushConsumer | None = None
        if self.skipped is not None:
            return
        consumer = PushConsumer(self.group, ctx.info.namesrv, client_config=_client_config(ctx, f"filter-{mode}"),
                                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                                pull_batch_size=ctx.settings.consume_batch,
                                consume_message_batch_max_size=ctx.settings.consume_batch)
        if mode == "tag":
            consumer.subscribe(topic, "hit")
        elif mode == "sql92":
            consumer.subscribe(topic, MessageSelector.by_sql(f"sel < {cut}"))
        else:
            subscribe: Any = consumer.subscribe  # the FilterServer client's signature (not in every client)
            subscribe(topic, filter_source=filter_source(cut))
        consumer.register_message_listener(self._listener)
        consumer.suspend()
        consumer.start()
        self.consumer = consumer

    def _listener(self, msgs: list[Any], _ctx: object) -> ConsumeConcurrentlyStatus:
        now = time.monotonic()
        with self.lock:
            if self.first_at is None:
                self.first_at = now
            for m in msgs:
                if m.keys in self.expected:
                    if m.keys not in self.got:
                        self.got.add(m.keys)
                        self.last_at = now
                else:
                    self.unexpected += 1
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def _wire(self) -> int | None:
        instance = getattr(self.consumer, "_instance", None)  # the consumer's own client instance (connections)
        return sum(instance.bytes_received().values()) if instance is not None else None

    def drain(self) -> dict[str, Any]:
        """Resume alone and read until every expected message is in (or ``--drain-timeout``)."""
        row: dict[str, Any] = {"mode": self.mode}
        if self.consumer is None:
            return {**row, "skipped": self.skipped}
        ctx = self.ctx
        pids = [b.pid for b in ctx.brokers if b.pid is not None]
        wire0, cpu0 = self._wire(), _cpu(pids)
        start = time.monotonic()
        deadline = start + max(ctx.settings.drain_timeout_s, 1.0)
        self.consumer.resume()
        while time.monotonic() < deadline and not ctx.stopped.is_set():
            with self.lock:
                if len(self.got) >= len(self.expected):
                    break
            time.sleep(POLL_S)
        cpu1, wire1 = _cpu(pids), self._wire()
        self.consumer.suspend()
        with self.lock:
            delivered, unexpected, first, last = len(self.got), self.unexpected, self.first_at, self.last_at
        cpu = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
        wire = None if wire0 is None or wire1 is None else wire1 - wire0
        # the rate between the first and the last delivery: a suspended consumer looks again only every 1 s,
        # which would otherwise count as the consumer's time
        span = (last - first) if first is not None and last is not None else None
        return {**row, "group": self.group, "expected": len(self.expected), "delivered": delivered,
                "unexpected": unexpected, "complete": delivered == len(self.expected) and not unexpected,
                "seconds": span, "msgs_per_s": delivered / span if span else None,
                "resume_to_last_s": None if last is None else last - start,
                "broker_cpu_s": cpu, "broker_cpu_us_per_msg": cpu / delivered * 1e6 if cpu is not None and delivered
                else None, "wire_bytes": wire,
                "wire_bytes_per_msg": wire / delivered if wire is not None and delivered else None}

    def close(self) -> None:
        if self.consumer is not None:
            self.consumer.shutdown()


def control(ctx: RunContext) -> None:
    s = ctx.settings
    out: dict[str, Any] = {"selectivity": s.selectivity, "messages": s.filter_messages,
                           "message_size": s.message_size, "modes": []}
    ctx.results["filtering"] = out
    ctx.hub.command("stop_producing")
    cut = threshold(s.selectivity)
    out["threshold"] = cut
    topic = f"lab_filtering_{ctx.info.tag}_f"
    prefix = f"{ctx.info.tag}-f-"
    out["topic"] = topic
    _create_topic(ctx, topic, s.queues)
    runs: list[ModeRun] = []
    try:
        for mode in [m.strip() for m in s.filter_modes.split(",") if m.strip()]:
            runs.append(ModeRun(ctx, mode, topic, s.filter_messages, cut, prefix))
        ctx.sleep(FILTER_BIRTH_GAP_S)
        ctx.say(f"producing {s.filter_messages} messages ({cut} % match) to {topic}")
        out["produce"] = produce(ctx, topic, s.filter_messages, cut, prefix)
        for r in runs:
            if ctx.stopped.is_set():
                break
            row = r.drain()
            out["modes"].append(row)
            ctx.say(f"{r.mode}: {row.get('skipped') or row}")
    finally:
        for r in runs:
            r.close()
