"""This module owns the scaling experiment (``python -m harness scaling``): how the reference broker's cost grows
with message size, in-flight depth, producer processes, queue count and backlog depth, each curve measured
beside its limit so a reader sees how far from the wall each point is.

Curves (one fresh embedded topology per curve: a real name server and broker; the lean load generator,
``bench producer --lean``, so the broker rather than the client library is what is measured):

============  =========================================  =================================================
curve         x                                          its limit, measured in the same sitting
============  =========================================  =================================================
size          body bytes, 128 B ... 64 KiB (64 in flight) fio's sequential write of the store's filesystem
                                                         (bytes/s ÷ body size: the disk's wall), and the bare
                                                         broker (``bench bare-broker``) at the same size
depth         messages in flight, one producer process   the bare broker at the same depth
producers     producer processes (64 in flight each)     the bare broker with as many processes
queues        queues, 1 ... 10,000 (topics of at most     the same broker with one queue (the issue's 0.9 ×)
              1,000), each sent one message first
groups        broker groups on this machine (RocketMQ's  one group × the count (linear scale-out); each group
              scale-out), a producer process per group   is one interpreter, so this machine's cores are the
                                                         wall
backlog       messages stored before a consumer group    fio's sequential write as msg/s (the store's reads
              starts from the first offset               come from the page cache here: a hot backlog)
backlog_cold  the same, the broker in a memory cgroup     fio's sequential write as msg/s; the cgroup keeps
              (``cold_memory_max``, 256 MiB) smaller      the broker's page cache under its limit, so the
              than every backlog (root; skipped without)  drain reads from the device (harness.memory_cgroup)
============  =========================================  =================================================

Each point is one JSON object in ``OUT/scaling.jsonl`` (``ROW_KEYS``); ``python -m spark_reports scaling --runs
OUT`` plots them. A consume point whose consumers drained the whole backlog before their time was up reports
the rate to the last delivery (``drained``: start-up and the rebalance included, so a lower bound).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from harness.broker_bench import BARE_TOPIC, Progress, bare_broker, cpu_seconds, run_consumer, run_producer
from harness.fio_baseline import fio_baseline
from harness.launcher import Topology
from harness.memory_cgroup import MemoryCgroup, Skip, detect
from harness.records import jsonl
from harness.records.scaling import CURVES, ROW_KEYS, SCALING_FILE
from harness.rocketmq import BrokerImpl
from reference_broker.tools import admin

DEFAULT_SIZE: Final = 1024
DEFAULT_IN_FLIGHT: Final = 64
MAX_QUEUES_PER_TOPIC: Final = 1000  # the broker's limit is 1,024 (admin_processor); 10,000 = 10 topics of 1,000


def split_queues(total: int, per_topic_max: int) -> list[int]:
    """``total`` queues over the fewest topics of at most ``per_topic_max``, sizes differing by at most one."""
    topics = -(-total // per_topic_max)
    base, extra = divmod(total, topics)
    return [base + 1 if i < extra else base for i in range(topics)]


@dataclass(frozen=True)
class Plan:
    seconds: float = 5.0
    sizes: tuple[int, ...] = (128, 512, 1024, 4096, 16384, 65536)
    depths: tuple[int, ...] = (1, 4, 16, 64, 256)
    producers: tuple[int, ...] = (1, 2, 4)
    queues: tuple[int, ...] = (1, 16, 256, 1024, 10_000)
    backlogs: tuple[int, ...] = (10_000, 100_000, 400_000)
    cold_backlogs: tuple[int, ...] = (400_000, 1_000_000)  # 1 KiB each: 1.6 and 4 × the group's limit
    cold_memory_max: int = 256 << 20  # the broker's memory cgroup (its RSS and its page cache)
    groups: tuple[int, ...] = (1, 2, 3)
    curves: tuple[str, ...] = CURVES
    flush: str = "ASYNC_FLUSH"
    bare: bool = True  # the bare broker beside the size, depth and producers curves

    @classmethod
    def quick(cls, **over: Any) -> Plan:
        """A few points per curve, 2 s each (the test's plan; about 3 minutes in all)."""
        base = cls(seconds=2.0, sizes=(128, 4096, 65536), depths=(1, 64), producers=(1, 2), queues=(1, 1024),
                   backlogs=(5_000, 50_000), cold_backlogs=(300_000,), groups=(1, 2))
        return cls(**{**asdict(base), **over})

    def __post_init__(self) -> None:
        unknown = set(self.curves) - set(CURVES)
        if unknown:
            raise ValueError(f"unknown curve(s) {sorted(unknown)}; known: {', '.join(CURVES)}")
        if self.flush not in ("ASYNC_FLUSH", "SYNC_FLUSH"):
            raise ValueError(f"flush must be ASYNC_FLUSH or SYNC_FLUSH, not {self.flush!r}")
        for name in ("sizes", "depths", "producers", "queues", "backlogs", "cold_backlogs", "groups"):
            values = getattr(self, name)
            if not values or any(v < 1 for v in values):
                raise ValueError(f"{name}: positive integers, at least one")
        if max(self.sizes) > 4 << 20:
            raise ValueError("sizes: at most 4 MiB (the broker's maxMessageSize)")
        if self.seconds <= 0:
            raise ValueError("seconds must be positive")
        if self.cold_memory_max < 64 << 20:
            raise ValueError("cold_memory_max: at least 64 MiB (the broker's own memory is charged to it too)")


@dataclass
class Session:
    """Where the rows go, and what every row shares."""

    out: Path
    plan: Plan
    impl: BrokerImpl = "reference"
    name: str = field(default_factory=lambda: time.strftime("%Y%m%dT%H%M%S"))

    def write(self, row: dict[str, Any]) -> dict[str, Any]:
        full = {k: row.get(k) for k in ROW_KEYS}
        full.update(session=self.name, flush=self.plan.flush, impl=self.impl, ts_ns=time.time_ns(),
                    loadavg=list(os.getloadavg()))
        jsonl.append(self.out / SCALING_FILE, full)
        return full


def producer_row(curve: str, x: int, target: str, result: dict[str, Any], *, size: int, in_flight: int,
                 processes: int, queues: int | None = None) -> dict[str, Any]:
    """A row from a ``bench producer --json`` summary (pure)."""
    tps = float(result.get("send_tps") or 0.0)
    return {"curve": curve, "x": x, "target": target, "msgs_per_s": tps, "mb_per_s": tps * size / 1e6,
            "p50_ms": result.get("p50_ms"), "p99_ms": result.get("p99_ms"),
            "broker_cpu_us_per_msg": result.get("broker_cpu_us_per_msg"),
            "client_cpu_us_per_msg": result.get("client_cpu_us_per_msg"), "size": size, "in_flight": in_flight,
            "processes": processes, "queues": queues}


def fio_row(curve: str, x: int, write_bytes_per_s: float, size: int) -> dict[str, Any]:
    """The device's wall at one point: its sequential write bandwidth as messages of ``size`` body bytes per
    second (an upper bound: a stored record also carries its header, topic and properties)."""
    return {"curve": curve, "x": x, "target": "fio", "msgs_per_s": write_bytes_per_s / size,
            "mb_per_s": write_bytes_per_s / 1e6, "size": size}


def lean(topic: str, seconds: float, size: int, in_flight: int, processes: int, *extra: str) -> list[str]:
    return ["-t", topic, "--lean", "-p", str(processes), "-s", str(size), "--in-flight", str(in_flight),
            "-d", str(seconds), *extra]


def _create_topic(topo: Topology, topic: str, queues: int) -> None:
    """A topic with ``queues`` read and write queues, routable before the first send (the lean generator sends
    round-robin over the route's queues)."""
    admin.update_topic(topo.namesrv_addr, topic, queues, queues)
    _wait_routable(topo, topic, queues)


def _wait_dispatched(topo: Topology, timeout_s: float = 120.0) -> None:
    """Until the broker's dispatch (reput) has caught up with its commit log (runtime info
    ``dispatchBehindBytes``, as 4.9.8 reports it)."""
    deadline = time.monotonic() + timeout_s
    addr = topo.brokers[0].addr
    while time.monotonic() < deadline:
        try:
            if admin.broker_status(addr).get("dispatchBehindBytes", "0") == "0":
                return
        except (admin.AdminError, OSError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"the broker's dispatch did not catch up within {timeout_s} s")


def _wait_routable(topo: Topology, topic: str, queues: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if len(admin.read_queues(topo.namesrv_addr, topic)) >= queues:
                return
        except admin.AdminError:
            pass  # the broker has not registered the topic with the name server yet
        if time.monotonic() > deadline:
            raise RuntimeError(f"topic {topic} not routable with {queues} queues after {timeout_s} s")
        time.sleep(0.1)


def _fio_write_bps(directory: Path, progress: Progress) -> float | None:
    result = fio_baseline(directory, "quick", progress=progress)
    value = result.get("seq_write_bytes_per_s")
    if value is None:
        progress(f"fio: {result.get('skipped') or result.get('errors')}; the size and backlog curves have no wall")
    return float(value) if value else None


def run(plan: Plan, out: Path, progress: Progress = print, impl: BrokerImpl = "reference",
        rocketmq_home: Path | None = None, root: Path | None = None) -> list[dict[str, Any]]:
    """Every curve of ``plan``; the rows written to ``out``/scaling.jsonl and returned."""
    session = Session(out, plan, impl)
    rows: list[dict[str, Any]] = []

    def emit(row: dict[str, Any]) -> None:
        rows.append(session.write(row))
        progress(format_rows([rows[-1]]).splitlines()[1])

    bare = plan.bare and impl == "reference"
    with tempfile.TemporaryDirectory(prefix="rmq-lab-scaling-", dir=root) as tmp_s:
        tmp = Path(tmp_s)
        fio_bps = _fio_write_bps(tmp, progress) if {"size", "backlog", "backlog_cold"} & set(plan.curves) else None
        for curve in plan.curves:
            if curve == "groups":
                _groups_curve(plan, emit, progress, impl, rocketmq_home, tmp / curve)
                continue
            if curve == "backlog_cold":
                _cold_backlog_curve(plan, emit, progress, impl, rocketmq_home, tmp / curve, fio_bps)
                continue
            with Topology(tmp / curve, broker_conf={"flushDiskType": plan.flush}, impl=impl,
                          rocketmq_home=rocketmq_home) as topo:
                run_producer(topo, ["-t", "Warm", "-q", "200", "-w", "4", "-s", str(DEFAULT_SIZE)], progress)
                CURVE_RUNNERS[curve](topo, plan, emit, progress, bare=bare, fio_bps=fio_bps, tmp=tmp / curve)
    return rows


Emit = Callable[[dict[str, Any]], None]


def _size_curve(topo: Topology, plan: Plan, emit: Emit, progress: Progress, *, bare: bool, fio_bps: float | None,
                tmp: Path) -> None:
    for size in plan.sizes:
        r = run_producer(topo, lean(f"Size{size}", plan.seconds, size, DEFAULT_IN_FLIGHT // 2, 2), progress)
        emit(producer_row("size", size, "broker", r, size=size, in_flight=DEFAULT_IN_FLIGHT, processes=2))
        if fio_bps:
            emit(fio_row("size", size, fio_bps, size))
    if bare:
        with bare_broker(topo, tmp) as pid:
            for size in plan.sizes:
                r = run_producer(topo, lean(BARE_TOPIC, plan.seconds, size, DEFAULT_IN_FLIGHT // 2, 2), progress,
                                 broker_pid=pid)
                emit(producer_row("size", size, "bare", r, size=size, in_flight=DEFAULT_IN_FLIGHT, processes=2))


def _depth_curve(topo: Topology, plan: Plan, emit: Emit, progress: Progress, *, bare: bool, fio_bps: float | None,
                 tmp: Path) -> None:
    for depth in plan.depths:
        r = run_producer(topo, lean(f"Depth{depth}", plan.seconds, DEFAULT_SIZE, depth, 1), progress)
        emit(producer_row("depth", depth, "broker", r, size=DEFAULT_SIZE, in_flight=depth, processes=1))
    if bare:
        with bare_broker(topo, tmp) as pid:
            for depth in plan.depths:
                r = run_producer(topo, lean(BARE_TOPIC, plan.seconds, DEFAULT_SIZE, depth, 1), progress,
                                 broker_pid=pid)
                emit(producer_row("depth", depth, "bare", r, size=DEFAULT_SIZE, in_flight=depth, processes=1))


def _producers_curve(topo: Topology, plan: Plan, emit: Emit, progress: Progress, *, bare: bool,
                     fio_bps: float | None, tmp: Path) -> None:
    for n in plan.producers:
        r = run_producer(topo, lean(f"Producers{n}", plan.seconds, DEFAULT_SIZE, DEFAULT_IN_FLIGHT, n), progress)
        emit(producer_row("producers", n, "broker", r, size=DEFAULT_SIZE, in_flight=DEFAULT_IN_FLIGHT * n,
                          processes=n))
    if bare:
        with bare_broker(topo, tmp) as pid:
            for n in plan.producers:
                r = run_producer(topo, lean(BARE_TOPIC, plan.seconds, DEFAULT_SIZE, DEFAULT_IN_FLIGHT, n), progress,
                                 broker_pid=pid)
                emit(producer_row("producers", n, "bare", r, size=DEFAULT_SIZE, in_flight=DEFAULT_IN_FLIGHT * n,
                                  processes=n))


def _queues_curve(topo: Topology, plan: Plan, emit: Emit, progress: Progress, *, bare: bool,
                  fio_bps: float | None, tmp: Path) -> None:
    for n in plan.queues:
        # A broker takes at most MAX_QUEUES_PER_TOPIC queues per topic: more are several topics, the lean
        # generator round-robin over all their queues.
        topics = []
        for i, q in enumerate(split_queues(n, MAX_QUEUES_PER_TOPIC)):
            topics.append(f"Queues{n}_{i}")
            _create_topic(topo, topics[-1], q)
        # One message to every queue first: the first send to a queue creates its consume-queue file (open,
        # truncate, map: ~10,000 of them in a few seconds would be most of what a short point measured).
        run_producer(topo, ["-t", ",".join(topics), "--lean", "-p", "1", "-s", str(DEFAULT_SIZE), "--in-flight",
                            "32", "-q", str(n), "-d", "600"], progress)
        _wait_dispatched(topo)  # the files are created by dispatch, which may still be at it
        r = run_producer(topo, lean(",".join(topics), plan.seconds, DEFAULT_SIZE, DEFAULT_IN_FLIGHT // 2, 2),
                         progress)
        emit(producer_row("queues", n, "broker", r, size=DEFAULT_SIZE, in_flight=DEFAULT_IN_FLIGHT, processes=2,
                          queues=n))


def _backlog_curve(topo: Topology, plan: Plan, emit: Emit, progress: Progress, *, bare: bool,
                   fio_bps: float | None, tmp: Path) -> None:
    for depth in plan.backlogs:
        _backlog_point(topo, "backlog", depth, plan.seconds, emit, progress, fio_bps)


def _backlog_point(topo: Topology, curve: str, depth: int, seconds: float, emit: Emit, progress: Progress,
                   fio_bps: float | None, **extra: Any) -> None:
    """Store ``depth`` messages on a topic of 8 queues, then consume them from the first offset for ``seconds``
    with two consumer processes: the rate, send-to-consume latency, CPU per message and bytes read from storage."""
    topic = f"Backlog{depth}"
    _create_topic(topo, topic, 8)
    per_process = -(-depth // 2)
    run_producer(topo, ["-t", topic, "--lean", "-p", "2", "-s", str(DEFAULT_SIZE), "--in-flight", "32",
                        "-q", str(per_process), "-d", "3600"], progress)
    stored = 2 * per_process
    pid = topo.brokers[0].pid
    cpu0, read0 = cpu_seconds(pid), read_bytes(pid)
    r = run_consumer(topo, ["-t", topic, "-g", f"scaling_{curve}_{depth}", "--from-first", "-p", "2",
                            "-d", str(seconds)], progress)
    consumed = int(r.get("consumed") or 0)
    drained = consumed >= stored
    read1 = read_bytes(pid)
    # Drained before its time was up: the rate to the last delivery (start-up and rebalance included).
    tps = float((r.get("active_tps") if drained else r.get("tps")) or 0.0)
    emit({"curve": curve, "x": stored, "target": "broker", "msgs_per_s": tps,
          "mb_per_s": tps * DEFAULT_SIZE / 1e6, "p50_ms": r.get("e2e_p50_ms"), "p99_ms": r.get("e2e_p99_ms"),
          "broker_cpu_us_per_msg": (cpu_seconds(pid) - cpu0) / consumed * 1e6 if consumed else None,
          "client_cpu_us_per_msg": r.get("client_cpu_us_per_msg"), "size": DEFAULT_SIZE, "processes": 2,
          "queues": 8, "drained": drained,
          "read_bytes": read1 - read0 if read0 is not None and read1 is not None else None, **extra})
    if fio_bps:
        emit(fio_row(curve, stored, fio_bps, DEFAULT_SIZE))


def read_bytes(pid: int | None) -> int | None:
    """``read_bytes`` of /proc/PID/io: what the process made the kernel fetch from storage (page-cache hits
    are not counted), so a cold drain shows here and a hot one does not. None when it cannot be read."""
    if pid is None:
        return None
    try:
        for line in Path(f"/proc/{pid}/io").read_text().splitlines():
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cold_backlog_curve(plan: Plan, emit: Emit, progress: Progress, impl: BrokerImpl, rocketmq_home: Path | None,
                        tmp: Path, fio_bps: float | None) -> None:
    """The backlog curve with the broker in a memory cgroup smaller than every backlog (scenarios/backlog.py's
    technique, docs/backlog.md): its page cache cannot hold the backlog, so the drain reads from the device."""
    found = detect(plan.cold_memory_max, name=f"rmq-lab-scaling-{os.getpid()}")
    if isinstance(found, Skip):
        progress(f"backlog_cold: skipped: {found.reason}")
        return
    cg = MemoryCgroup(found)
    with cg, Topology(tmp, broker_conf={"flushDiskType": plan.flush}, impl=impl, rocketmq_home=rocketmq_home,
                      broker_spawn_hook=cg.admit) as topo:
        run_producer(topo, ["-t", "Warm", "-q", "200", "-w", "4", "-s", str(DEFAULT_SIZE)], progress)
        for depth in plan.cold_backlogs:
            _backlog_point(topo, "backlog_cold", depth, plan.seconds, emit, progress, fio_bps,
                           memory_max=plan.cold_memory_max)
        kills = cg.oom_kills()
        if kills:
            progress(f"backlog_cold: the kernel's OOM killer ended {kills} process(es) in the broker's group: "
                     f"raise cold_memory_max above the broker's own memory")


def _groups_curve(plan: Plan, emit: Emit, progress: Progress, impl: BrokerImpl, rocketmq_home: Path | None,
                  tmp: Path) -> None:
    """RocketMQ's scale-out: n broker groups (masters of one cluster), a topic on each group alone and one lean
    producer process per group, all at once; the rate is their sum, the broker CPU summed over the brokers."""
    for n in plan.groups:
        with Topology(tmp / f"g{n}", broker_conf={"flushDiskType": plan.flush}, brokers=n, impl=impl,
                      rocketmq_home=rocketmq_home) as topo:
            for i, broker in enumerate(topo.brokers):
                admin.update_topic(topo.namesrv_addr, f"Group{i}", 8, 8, broker_addr=broker.addr)
            for i in range(n):
                _wait_routable(topo, f"Group{i}", 8)
            pids = [b.pid for b in topo.brokers]
            cpu0 = sum(cpu_seconds(pid) for pid in pids)
            progress(f"{n} producer processes, one per group")
            procs = [subprocess.Popen([sys.executable, "-m", "reference_broker", "bench", "producer", "-n",
                                       topo.namesrv_addr, "--json", "-i", "1000",
                                       *lean(f"Group{i}", plan.seconds, DEFAULT_SIZE, DEFAULT_IN_FLIGHT, 1)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                     for i in range(n)]
            results = []
            try:
                for proc in procs:
                    out, err = proc.communicate(timeout=600)
                    if proc.returncode != 0:
                        raise RuntimeError(f"bench producer failed ({proc.returncode}): {err[-2000:]}")
                    results.append(json.loads(out))
            finally:
                for proc in procs:  # none outlives a failed point
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()
            messages = sum(int(r.get("messages") or 0) for r in results)
            cpu = sum(cpu_seconds(pid) for pid in pids) - cpu0
            tps = sum(float(r.get("send_tps") or 0.0) for r in results)
            emit({"curve": "groups", "x": n, "target": "broker", "msgs_per_s": tps,
                  "mb_per_s": tps * DEFAULT_SIZE / 1e6,
                  "p50_ms": max(float(r.get("p50_ms") or 0.0) for r in results),
                  "p99_ms": max(float(r.get("p99_ms") or 0.0) for r in results),
                  "broker_cpu_us_per_msg": cpu / messages * 1e6 if messages else None,
                  "client_cpu_us_per_msg": (sum(float(r.get("client_cpu_us_per_msg") or 0.0) for r in results) / n),
                  "size": DEFAULT_SIZE, "in_flight": DEFAULT_IN_FLIGHT * n, "processes": n, "queues": 8 * n})


CURVE_RUNNERS: Final[dict[str, Callable[..., None]]] = {
    "size": _size_curve, "depth": _depth_curve, "producers": _producers_curve, "queues": _queues_curve,
    "backlog": _backlog_curve}
assert set(CURVE_RUNNERS) | {"groups", "backlog_cold"} == set(CURVES)


def format_rows(rows: list[dict[str, Any]]) -> str:
    """A plain table of the rows, one curve after another (what the command prints)."""
    lines = [f"{'curve':<10}{'x':>10}  {'target':<7}{'msg/s':>11}{'MB/s':>9}{'p50 ms':>11}{'p99 ms':>11}"
             f"{'broker us':>11}"]
    def num(r: dict[str, Any], key: str, fmt: str) -> str:
        v = r.get(key)
        return format(v, fmt) if isinstance(v, (int, float)) else "-"

    for r in rows:
        lines.append(f"{r['curve']:<10}{r['x']:>10}  {r['target']:<7}{num(r, 'msgs_per_s', ',.0f'):>11}"
                     f"{num(r, 'mb_per_s', ',.1f'):>9}{num(r, 'p50_ms', ',.3f'):>11}{num(r, 'p99_ms', ',.3f'):>11}"
                     f"{num(r, 'broker_cpu_us_per_msg', '.1f'):>11}" + ("  (drained: a lower bound)"
                                                                      if r.get("drained") else ""))
    return "\n".join(lines)

