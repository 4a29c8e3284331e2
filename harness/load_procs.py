"""This module owns the driver workload in several processes: ``ProcessLoad`` runs one ``DriverLoad`` part
(harness.load_split) per child process, each with its own driver (its own client instance and connections),
its own producer and consumer (the same consumer group, so the broker shares the queues among them) and its
own run-record writers ``producer-p<i>`` / ``consumer-c<i>``; the coordinator (this process) starts them
together, runs the drain over all of them and judges the run like the one-process load.

Why processes: the one-process load is one Python interpreter lock for producing, consuming and recording
every event, and was what bounded the compare figures (BENCHMARKS.md "Brokers compared"), not the brokers.

The protocol over each child's pipe (child → coordinator unless marked):

==============================  ================================================================================
message                         meaning
==============================  ================================================================================
``("ready", pid)``              connected, topic created, consumer started
``("go",)`` (coordinator)       start producing now, for ``shape.seconds``
``("seen", [key, …])``          keys this child's consumer received for the first time (every ``FLUSH_S``)
``("produced", counts, keys)``  the window is over and every send answered: the answer counts and the keys the
                                broker acknowledged
``("stop",)`` (coordinator)     the drain is over: stop consuming, close the writers
``("done", counts)``            writers closed (their files are complete), driver stopped
``("error", text)``             the child failed; it exits
==============================  ================================================================================

The drain is the one-process rule over the union: until every acknowledged key (any child's) was received by
some child, or ``drain_timeout_s``. The keys cross the pipes once each (a few ms of CPU per 10k messages, on the
coordinator's core share; it is counted in the generator's cost, harness.load_cost).
"""

from __future__ import annotations

import multiprocessing
import os
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from harness.driver import Driver
from harness.driver_load import DriverLoad, LoadResult, LoadShape, finish_record
from harness.drivers import DEFAULT_PEER_CLIENT, DEFAULT_ROCKETMQ_CLIENT, PeerClient, RocketMQClient
from harness.load_cost import CpuMeter, LoadCost, cores, load_cost
from harness.load_split import key_prefix, merge_counts, split_shape
from harness.records import RunRecord

FLUSH_S = 0.2  # how often a child hands its newly seen keys to the coordinator
READY_S = 120.0  # spawning, importing the clients and connecting, on a loaded 2-core machine
ANSWER_S = 60.0  # a child's answers after the window (its sends time out after a few seconds)


class LoadProcessError(RuntimeError):
    """A load process failed or did not answer; the message carries its error."""


@dataclass(frozen=True)
class PartSpec:
    """What a child needs to run its part: picklable (multiprocessing spawn)."""

    part: int
    driver: str  # a harness.drivers name
    address: str  # the name-server list or the peer's URL
    instance: str
    producer_group: str
    run_dir: str
    shape: LoadShape
    topic: str
    group: str
    key_prefix: str
    peer_client: PeerClient = DEFAULT_PEER_CLIENT
    rocketmq_client: RocketMQClient = DEFAULT_ROCKETMQ_CLIENT


def _flush(conn: Connection, load: DriverLoad) -> None:
    keys = load.take_new_seen()
    if keys:
        conn.send(("seen", keys))


def run_part(conn: Connection, spec: PartSpec) -> None:
    """A child's whole life (the spawn target)."""
    from harness.drivers import make_driver

    try:
        drv = make_driver(spec.driver, spec.address, instance=spec.instance, producer_group=spec.producer_group,
                          peer_client=spec.peer_client, rocketmq_client=spec.rocketmq_client)
        record = RunRecord.open(spec.run_dir)
        load = DriverLoad(drv, record, spec.shape, spec.topic, spec.group, part=spec.part,
                          key_prefix=spec.key_prefix, track_new=True)
        load.prepare()
        conn.send(("ready", os.getpid()))
        if conn.recv()[0] != "go":
            drv.stop()
            return
        load.go()
        deadline = time.monotonic() + spec.shape.seconds
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(FLUSH_S, left))
            _flush(conn, load)
        load.stop_producing()
        ok, fail, unknown = load.counts()
        conn.send(("produced", {"sent_ok": ok, "sent_fail": fail, "sent_unknown": unknown,
                                "seconds": load.result.seconds}, load.acked_keys()))
        while not conn.poll(FLUSH_S):
            _flush(conn, load)
        conn.recv()  # ("stop",)
        load.stop_consuming()
        _flush(conn, load)
        record.close_writers()
        drv.stop()
        conn.send(("done", {"received": load.result.received}))
    except BaseException as exc:  # reported to the coordinator, which fails the run; then this child exits 1
        try:
            conn.send(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-2000:]}"))
        except OSError:
            pass
        raise SystemExit(1) from exc


class ProcessLoad:
    """``run()`` like ``DriverLoad.run``: the load in ``processes`` children, judged here. ``driver`` (this
    process's, started) creates the topic first and answers the backlog and broker facts at the end;
    ``driver_name``/``address`` are how the children make their own."""

    def __init__(self, driver: Driver, driver_name: str, address: str, record: RunRecord, shape: LoadShape,
                 topic: str, group: str, *, processes: int, instance: str, broker_pid: int | None = None,
                 peer_client: PeerClient = DEFAULT_PEER_CLIENT,
                 rocketmq_client: RocketMQClient = DEFAULT_ROCKETMQ_CLIENT) -> None:
        self.driver = driver
        self.record = record
        self.shape = shape
        self.topic = topic
        self.group = group
        self.broker_pid = broker_pid
        self.parts = [PartSpec(i, driver_name, address, f"{instance}-p{i}", f"cmp_{instance}", str(record.run_dir),
                               part, topic, group, key_prefix(record.run_id, i), peer_client,
                               rocketmq_client)
                      for i, part in enumerate(split_shape(shape, processes))]
        self.cost: LoadCost | None = None
        self._acked: set[str] = set()
        self._seen: set[str] = set()

    def _pump(self, conns: list[Connection], timeout_s: float, only: set[int] | None = None) -> list[tuple[int, Any]]:
        """The messages that arrive within ``timeout_s`` (from the children in ``only``), ``seen`` batches merged
        and ``error``s raised on the way."""
        ready = {id(c) for c in wait([c for i, c in enumerate(conns) if only is None or i in only], timeout_s)}
        out = []
        for i, c in enumerate(conns):
            if id(c) not in ready:
                continue
            try:
                msg = c.recv()
            except EOFError as exc:
                raise LoadProcessError(f"load process {i} exited") from exc
            if msg[0] == "seen":
                self._seen.update(msg[1])
            elif msg[0] == "error":
                raise LoadProcessError(f"load process {i}: {msg[1]}")
            out.append((i, msg))
        return out

    def _collect(self, conns: list[Connection], want: str, timeout_s: float) -> dict[int, tuple[Any, ...]]:
        """Every child's ``want`` message (the others merged on the way)."""
        got: dict[int, tuple[Any, ...]] = {}
        deadline = time.monotonic() + timeout_s
        while len(got) < len(conns):
            left = deadline - time.monotonic()
            if left <= 0:
                missing = sorted(set(range(len(conns))) - set(got))
                raise LoadProcessError(f"load processes {missing} sent no {want!r} in {timeout_s:.0f} s")
            for i, msg in self._pump(conns, min(left, 1.0), set(range(len(conns))) - set(got)):
                if msg[0] == want:
                    got[i] = msg
        return got

    def run(self, allow_loss: bool = False, extra_meta: dict[str, Any] | None = None) -> LoadResult:
        self.driver.start()
        self.driver.create_topic(self.topic, self.shape.queues)
        ctx = multiprocessing.get_context("spawn")  # no forked copies of this process's client threads
        procs: list[multiprocessing.process.BaseProcess] = []
        conns: list[Connection] = []
        try:
            for spec in self.parts:
                mine, theirs = ctx.Pipe()
                child = ctx.Process(target=run_part, args=(theirs, spec), name=f"load-p{spec.part}", daemon=True)
                child.start()
                theirs.close()
                procs.append(child)
                conns.append(mine)
            ready = self._collect(conns, "ready", READY_S)
            meter = CpuMeter({**{f"p{i}": int(ready[i][1]) for i in range(len(conns))}, "broker": self.broker_pid,
                              "coordinator": os.getpid()})
            meter.mark("start")
            t0 = time.monotonic()
            for c in conns:
                c.send(("go",))
            while (left := t0 + self.shape.seconds - time.monotonic()) > 0:  # the window: merge seen keys
                self._pump(conns, left)
            meter.mark("window_end")
            window_s = time.monotonic() - t0
            produced = self._collect(conns, "produced", ANSWER_S)
            for msg in produced.values():
                self._acked.update(msg[2])
            deadline = time.monotonic() + self.shape.drain_timeout_s
            while not self._acked <= self._seen and (left := deadline - time.monotonic()) > 0:
                self._pump(conns, min(left, 0.1))
            for c in conns:
                c.send(("stop",))
            done = self._collect(conns, "done", ANSWER_S)
            meter.mark("end")
            for p in procs:
                p.join(30)
        finally:
            for p in procs:  # only the children this load started
                if p.is_alive():
                    p.kill()
                    p.join(10)
            for c in conns:
                c.close()
        merged = merge_counts([{**produced[i][1], **done[i][1]} for i in range(len(conns))])
        result = LoadResult(self.record.run_dir, sent_ok=merged["sent_ok"], sent_fail=merged["sent_fail"],
                            sent_unknown=merged["sent_unknown"], received=merged["received"],
                            seconds=merged["seconds"], unreceived=len(self._acked - self._seen))
        clients = [meter.marks(f"p{i}") for i in range(len(conns))]
        self.cost = load_cost([m for m in clients if m is not None], meter.marks("broker"), window_s,
                              result.sent_ok, cores(), coordinator=meter.marks("coordinator"),
                              loadavg=os.getloadavg(),
                              machine=meter.machine())
        meta = dict(extra_meta or {})
        meta["load"] = self.cost.to_json()
        return finish_record(self.driver, self.record, result, self.group, self.topic, allow_loss, meta)
