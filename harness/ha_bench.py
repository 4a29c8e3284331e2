"""The replication benchmark (``python -m harness ha-bench``): what classic master/slave replication costs and how
fast it moves bytes, against real name server and broker processes.

1. SYNC_MASTER beside ASYNC_MASTER. Two broker groups (a master and one slave each, each group its own
   topology and name server, so the generator's route holds only that group's master) run at once; the same
   lean-generator load (single 1 KiB sends, 64 in flight) goes to one and then the other, the order swapped
   every round, as ab-bench does. Both groups live for the whole run rather than being restarted per round: a
   restart would put store recovery and a cold interpreter into every round, and a group that is not under
   load idles (its threads take a few % of a core). The ratio SYNC/ASYNC is taken per round (both runs of a
   round met the same machine), then its median and spread.
2. Replication lag under maximum load: during each ASYNC_MASTER run a thread samples both brokers'
   GET_BROKER_RUNTIME_INFO every ``LAG_SAMPLE_S``. The master's own reply holds its commit log's end and the
   highest offset a slave acknowledged (``slaveFallBehindMuch`` is their difference, one instant on one
   machine); the slave's reply gives what it has stored (``commitLogMaxOffset``), read just after the master's
   so its lag is if anything understated by the few ms between the two requests.
3. Slave catch-up: a master alone is filled with ``catchup_bytes`` of commit log (batches of 32 from the lean
   generator), then an empty slave starts and is timed until its commit log reaches the master's end. An empty
   slave is sent the master's last commit-log file from its start (HAConnection's rule, store/ha/protocol.py),
   so the commit-log file is made larger than the data (``catchup_file_size``): the slave then copies all of it.
   Beside it, fio's sequential write rate on the same filesystem (harness/fio_baseline.py).

4. The same against Apache RocketMQ 4.9.8 (``impls``: the CLI's ``--broker-impl``): its own groups, rounds and
   catch-up in the same sitting, one implementation after the other, so its SYNC/ASYNC ratio and catch-up rate
   stand beside ours. 4.9.8's GET_BROKER_RUNTIME_INFO has no HA keys, so for it the acknowledged lag is not
   measured (only the stored lag), and readiness is "the slave stored what a probe sent" rather than the
   master's connection count. Both implementations' groups get the same small files (``GROUP_CONF``).

Most of the arithmetic is pure (``lag_stats``, ``ratio_stats``, ``catchup_rate``, ``figures``) and tested on
made-up samples; the rest drives processes.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from harness.broker_bench import Plan as BenchPlan
from harness.broker_bench import cpu_seconds, lean_args, run_producer
from harness.launcher import BrokerProcess, Topology
from harness.rocketmq import BrokerImpl
from reference_broker.bench.fio import FioParams, run_fio_baselines
from reference_broker.remoting.errors import RemotingError
from reference_broker.tools import admin

Progress = Callable[[str], None]

MODES: Final = ("SYNC_MASTER", "ASYNC_MASTER")
TARGET_RATIO: Final = 0.5  # the issue: SYNC_MASTER at least half of ASYNC_MASTER's send rate
TARGET_CATCHUP_MB_S: Final = 200.0
LAG_SAMPLE_S: Final = 0.2
TOPIC: Final = "HaBench"
MIB: Final = 1024 * 1024
# Every compared group's files, for both implementations: RocketMQ reserves its 1 GiB commit-log and ~420 MB index
# files up front, and eight brokers of that would not fit this machine's disk (the test suite's sizes).
GROUP_CONF: Final = {"mappedFileSizeCommitLog": 128 * MIB, "maxHashSlotNum": 100_000, "maxIndexNum": 400_000}


@dataclass(frozen=True)
class Plan:
    rounds: int = 6
    seconds: float = 3.0
    size: int = 1024
    processes: int = 2
    in_flight: int = 32  # per process: 2 × 32 = 64 in flight
    flush_modes: tuple[str, ...] = ("ASYNC_FLUSH",)
    catchup_bytes: int = 1024 * MIB
    ha_transfer_batch: int | None = None  # haTransferBatchSize of the catch-up group; None: the default 32 KiB

    @classmethod
    def quick(cls) -> Plan:
        return cls(rounds=2, seconds=2.0, catchup_bytes=128 * MIB)

    @property
    def catchup_file_size(self) -> int:
        """The commit-log file size of the catch-up group: half again the data and at least 128 MiB over it,
        whole MiB, so the data (which overshoots its target by the error of one run's length, at least half a
        second of the generator's ~60-100 MB/s) stays in the first file."""
        return (max(self.catchup_bytes * 3 // 2, self.catchup_bytes + 128 * MIB) + MIB - 1) // MIB * MIB


# ---- pure arithmetic --------------------------------------------------------------------------------------

def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(round(q * len(s) / 100, 9)) - 1))
    return float(s[k])


def lag_stats(samples: Sequence[dict[str, int]]) -> dict[str, Any]:
    """Max and percentiles of the two lags over ``samples`` (each: master_max, master_acked, slave_max, in
    bytes): ``acked`` the master's end minus the highest acknowledged offset (the master's one snapshot),
    ``stored`` the master's end minus what the slave had stored a moment later. Only samples taken under load
    count — the master's end moved since the sample before — so the generator's start and the other group's
    turn (lag 0) do not dilute the percentiles. Samples without ``master_acked`` (RocketMQ 4.9.8 does not report
    it) give the stored lag alone, the acknowledged one None."""
    loaded = [s for prev, s in itertools.pairwise(samples) if s["master_max"] > prev["master_max"]]
    stored = [max(0, s["master_max"] - s["slave_max"]) for s in loaded]
    out: dict[str, Any] = {"samples": len(samples), "loaded_samples": len(loaded),
                           "stored_max_bytes": max(stored, default=0), "stored_p99_bytes": percentile(stored, 99),
                           "stored_p50_bytes": percentile(stored, 50)}
    if any("master_acked" not in s for s in samples):  # a broker that does not say (RocketMQ 4.9.8)
        return {**out, "acked_max_bytes": None, "acked_p99_bytes": None, "acked_p50_bytes": None}
    acked = [max(0, s["master_max"] - s["master_acked"]) for s in loaded]
    return {**out, "acked_max_bytes": max(acked, default=0), "acked_p99_bytes": percentile(acked, 99),
            "acked_p50_bytes": percentile(acked, 50)}


def ratio_stats(sync_tps: Sequence[float], async_tps: Sequence[float]) -> dict[str, Any]:
    """SYNC/ASYNC per round (paired: both runs of a round met the same machine), their median and spread."""
    ratios = [s / a for s, a in zip(sync_tps, async_tps, strict=True) if a]
    return {"per_round": ratios, "median": statistics.median(ratios) if ratios else 0.0,
            "min": min(ratios, default=0.0), "max": max(ratios, default=0.0),
            "sd": statistics.stdev(ratios) if len(ratios) > 1 else 0.0,
            "held": bool(ratios) and statistics.median(ratios) >= TARGET_RATIO}


def catchup_rate(start_offset: int, end_offset: int, seconds: float) -> float:
    """MB/s (10^6 bytes) of copying ``start_offset``..``end_offset`` in ``seconds``."""
    return (end_offset - start_offset) / seconds / 1e6 if seconds > 0 else 0.0


def _kib(n: float | None) -> str:
    return "n/a" if n is None else f"{n / 1024:,.0f}"


def figures(result: dict[str, Any]) -> list[tuple[str, str, str, bool | None]]:
    """(figure, measured, target, held) rows of a run's result, each implementation's rows in turn."""
    rows: list[tuple[str, str, str, bool | None]] = []
    fio: float | None = None
    for impl, res in result["impls"].items():
        for flush, m in res["modes"].items():
            r = m["ratio"]
            for mode in MODES:
                runs = m[mode]
                tps = statistics.median(x["send_tps"] for x in runs)
                rows.append((f"{impl}: {mode} {flush}: send rate (median of rounds)",
                             f"{tps:,.0f} msg/s, p50 {statistics.median(x['p50_ms'] for x in runs):.2f} ms, "
                             f"p99 {statistics.median(x['p99_ms'] for x in runs):.2f} ms", "reported", None))
                rows.append((f"{impl}: {mode} {flush}: broker CPU per message (master / slave)",
                             f"{statistics.median(x['master_cpu_us_per_msg'] for x in runs):.1f} / "
                             f"{statistics.median(x['slave_cpu_us_per_msg'] for x in runs):.1f} us", "reported",
                             None))
            rows.append((f"{impl}: SYNC/ASYNC {flush}, paired by round",
                         f"{r['median']:.2f} (min {r['min']:.2f}, max {r['max']:.2f}, sd {r['sd']:.2f})",
                         f">= {TARGET_RATIO:g}", r["held"]))
            lag = m["lag"]
            rows.append((f"{impl}: ASYNC_MASTER {flush}: lag acknowledged (p50 / p99 / max)",
                         f"{_kib(lag['acked_p50_bytes'])} / {_kib(lag['acked_p99_bytes'])} / "
                         f"{_kib(lag['acked_max_bytes'])} KiB "
                         f"({lag['loaded_samples']} of {lag['samples']} samples under load)", "reported", None))
            rows.append((f"{impl}: ASYNC_MASTER {flush}: lag stored on the slave (p50 / p99 / max)",
                         f"{_kib(lag.get('stored_p50_bytes'))} / {_kib(lag['stored_p99_bytes'])} / "
                         f"{_kib(lag['stored_max_bytes'])} KiB", "reported", None))
        c = res.get("catchup")
        if c:
            batch = result["plan"].get("ha_transfer_batch") or 32 * 1024
            rows.append((f"{impl}: slave catch-up, {c['bytes'] / MIB:,.0f} MiB from offset {c['start_offset']}, "
                         f"frames <= {batch // 1024} KiB",
                         f"{c['mb_s']:,.0f} MB/s ({c['seconds']:.2f} s)", f">= {TARGET_CATCHUP_MB_S:g} MB/s",
                         c["mb_s"] >= TARGET_CATCHUP_MB_S))
            rows.append((f"{impl}: ... counted from the slave's first stored bytes",
                         f"{c['mb_s_from_first_bytes']:,.0f} MB/s", "reported", None))
            rows.append((f"{impl}: ... CPU over the copy (master / slave)",
                         f"{c['master_cpu_cores']:.2f} / {c['slave_cpu_cores']:.2f} cores", "reported", None))
            if "fio_seq_write_bytes_per_s" in c or "fio_skipped" in c:
                fio = c.get("fio_seq_write_bytes_per_s")
                rows.append(("fio sequential write, same filesystem",
                             "skipped" if fio is None else f"{fio / 1e6:,.0f} MB/s", "reported", None))
    return rows


def format_result(result: dict[str, Any]) -> str:
    p = result["plan"]
    mach = result.get("machine", {})
    lines = [f"{p['rounds']} paired rounds of {p['seconds']:g} s, lean generator, {p['processes']} x "
             f"{p['in_flight']} in flight, {p['size']} B single sends"]
    if mach:
        lines.append(f"{mach['cpus']} usable cores; load average (1 min) {mach['loadavg_start'][0]:.1f} at the start, "
                     f"{mach['loadavg_end'][0]:.1f} at the end")
    for impl, res in result["impls"].items():
        for flush, m in res["modes"].items():
            per = ", ".join(f"{x:.2f}" for x in m["ratio"]["per_round"])
            lines.append(f"{impl}: {flush}: SYNC/ASYNC per round: {per}")
    rows = figures(result)
    w = max(len(r[0]) for r in rows)
    lines.append(f"{'figure':<{w}}  {'measured':>48}  {'target':<14} verdict")
    for name, measured, target, ok in rows:
        verdict = "-" if ok is None else ("held" if ok else "NOT HELD")
        lines.append(f"{name:<{w}}  {measured:>48}  {target:<14} {verdict}")
    return "\n".join(lines)


# ---- processes --------------------------------------------------------------------------------------------

def _status(b: BrokerProcess) -> dict[str, str]:
    return admin.broker_status(b.addr)


def _offset(b: BrokerProcess) -> int:
    try:
        return int(_status(b)["commitLogMaxOffset"])
    except admin.AdminError as exc:
        # RocketMQ 4.9.8 fails GET_BROKER_RUNTIME_INFO while its commit log has no file yet (the disk-ratio
        # figure reads the last file of an empty list): an empty log.
        if "NoSuchElementException" in str(exc):
            return 0
        raise


def wait_slave_connected(master: BrokerProcess, timeout_s: float = 30.0) -> None:
    """Until the master counts a slave connection: a SYNC_MASTER answers SLAVE_NOT_AVAILABLE before that."""
    deadline = time.monotonic() + timeout_s
    while int(_status(master).get("haConnectionCount", "0")) < 1:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{master.name}: no slave connected after {timeout_s:g} s")
        time.sleep(0.1)


def wait_slave_stores_probe(topo: Topology, progress: Progress, timeout_s: float = 60.0) -> None:
    """Until the slave stored everything a probe sent to the master (for a broker whose runtime info does not
    count HA connections: RocketMQ 4.9.8). Probes sent before the slave connected are stored on the master
    all the same (SLAVE_NOT_AVAILABLE under SYNC_MASTER), so the slave catching up proves the connection."""
    master, slave = topo.brokers[0], topo.brokers[1]
    deadline = time.monotonic() + timeout_s
    while True:
        run_producer(topo, ["-t", TOPIC, "-q", "20", "-w", "1", "-s", "64"], progress)
        end = _offset(master)
        while time.monotonic() < deadline:
            if end > 0 and _offset(slave) >= end:
                return
            time.sleep(0.2)
            if _offset(slave) == 0:
                break  # not connected yet: probe again
        if time.monotonic() > deadline:
            raise RuntimeError(f"{master.name}: the slave stored nothing of the probes after {timeout_s:g} s")


class LagSampler(threading.Thread):
    """Samples the master's end and acknowledged offset and the slave's end every ``LAG_SAMPLE_S``."""

    def __init__(self, master: BrokerProcess, slave: BrokerProcess) -> None:
        super().__init__(name="ha-bench-lag", daemon=True)
        self.master, self.slave = master, slave
        self.samples: list[dict[str, int]] = []
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(LAG_SAMPLE_S):
            try:
                m = _status(self.master)
                s = _status(self.slave)
            except (admin.AdminError, RemotingError, OSError):
                continue  # a reply that timed out under load: a gap, not a figure
            sample = {"master_max": int(m["commitLogMaxOffset"]), "slave_max": int(s["commitLogMaxOffset"])}
            if "haPush2SlaveMaxOffset" in m:  # not in RocketMQ 4.9.8's table
                sample["master_acked"] = int(m["haPush2SlaveMaxOffset"])
            self.samples.append(sample)

    def stop(self) -> list[dict[str, int]]:
        self._done.set()
        self.join()
        return self.samples


def _lean(plan: Plan, topic: str, seconds: float, *extra: str) -> list[str]:
    """broker-bench's lean-generator arguments (lean_args) for ``seconds``."""
    return lean_args(BenchPlan(seconds, plan.size, plan.processes, plan.in_flight), topic, *extra)


def _run(topo: Topology, plan: Plan, progress: Progress, seconds: float,
         sampler: LagSampler | None = None) -> dict[str, Any]:
    """One lean run against the group of ``topo``, with the master's and the slave's CPU per message."""
    slave = topo.brokers[1]
    slave_cpu0 = cpu_seconds(slave.pid)
    if sampler is not None:
        sampler.start()
    try:
        r = run_producer(topo, _lean(plan, TOPIC, seconds, "--in-flight", str(plan.in_flight)), progress)
    finally:
        samples = sampler.stop() if sampler is not None else None
    n = r.get("messages") or 0
    out = {k: r.get(k) for k in ("send_tps", "messages", "p50_ms", "p99_ms", "send_failed", "response_failed",
                                 "client_cpu_us_per_msg")}
    out["master_cpu_us_per_msg"] = r["broker_cpu_us_per_msg"]
    out["slave_cpu_us_per_msg"] = (cpu_seconds(slave.pid) - slave_cpu0) / n * 1e6 if n else None
    if samples is not None:
        out["lag_samples"] = samples
    return out


def _group(root: Path, role: str, flush: str, impl: BrokerImpl, progress: Progress) -> Topology:
    topo = Topology(root, broker_conf={**GROUP_CONF, "brokerRole": role, "flushDiskType": flush}, slaves=1,
                    impl=impl).start()
    try:
        if impl == "reference":
            wait_slave_connected(topo.brokers[0])
        else:
            wait_slave_stores_probe(topo, progress)
    except BaseException:
        topo.kill()
        raise
    return topo


def compare_roles(plan: Plan, flush: str, root: Path, progress: Progress,
                  impl: BrokerImpl = "reference") -> dict[str, Any]:
    """Paired rounds of SYNC_MASTER and ASYNC_MASTER groups of ``impl`` under ``flush`` (see the module's
    docstring)."""
    groups: dict[str, Topology] = {}
    try:
        for role in MODES:
            groups[role] = _group(root / f"{impl}-{flush}-{role}", role, flush, impl, progress)
        for topo in groups.values():  # the same warm-up: topic creation, first files, the interpreters
            run_producer(topo, ["-t", TOPIC, "-q", "200", "-w", "4", "-s", str(plan.size)], progress)
            _run(topo, plan, progress, min(2.0, plan.seconds))
        runs: dict[str, list[dict[str, Any]]] = {role: [] for role in MODES}
        for n in range(plan.rounds):
            for role in MODES if n % 2 == 0 else MODES[::-1]:
                sampler = LagSampler(groups[role].brokers[0], groups[role].brokers[1]) \
                    if role == "ASYNC_MASTER" else None
                r = _run(groups[role], plan, progress, plan.seconds, sampler)
                runs[role].append(r)
                progress(f"{impl} {flush} round {n + 1}/{plan.rounds} {role}: {r['send_tps']:,.0f} msg/s, "
                         f"p99 {r['p99_ms']:.2f} ms, master {r['master_cpu_us_per_msg']:.1f} us/msg, "
                         f"slave {r['slave_cpu_us_per_msg']:.1f} us/msg")
    finally:
        for topo in groups.values():
            topo.kill()  # the stores are thrown away: no graceful stop
            topo.cleanup()
    samples = [s for r in runs["ASYNC_MASTER"] for s in r.pop("lag_samples", [])]
    return {**runs, "ratio": ratio_stats([r["send_tps"] for r in runs["SYNC_MASTER"]],
                                         [r["send_tps"] for r in runs["ASYNC_MASTER"]]),
            "lag": lag_stats(samples), "lag_samples": samples}


def _fill(topo: Topology, plan: Plan, progress: Progress) -> int:
    """Batches of 32 to the group's master until its commit log holds ``plan.catchup_bytes``: each run a
    count of messages (``-q``) worth what is left, estimated a little low (a stored record is the body and at
    least ~100 bytes more), so the data ends a little over the target, within the file, whatever the broker's
    rate (RocketMQ takes batches several times faster than a timed first run expected)."""
    master = topo.brokers[0]
    while (end := _offset(master)) < plan.catchup_bytes:
        per_process = max(32, math.ceil((plan.catchup_bytes - end) / (plan.size + 100) / plan.processes))
        run_producer(topo, [*_lean(plan, TOPIC + "Fill", 120.0, "-b", "32", "--in-flight", "4"),
                            "-q", str(per_process)], progress)
    return end


def catchup(plan: Plan, root: Path, progress: Progress, fio: bool = True,
            impl: BrokerImpl = "reference") -> dict[str, Any]:
    """An empty slave of ``impl`` copying a filled master's commit log (see the module's docstring)."""
    conf: dict[str, Any] = {"flushDiskType": "ASYNC_FLUSH", "mappedFileSizeCommitLog": plan.catchup_file_size}
    if plan.ha_transfer_batch is not None:
        conf["haTransferBatchSize"] = plan.ha_transfer_batch
    # A directory of its own: a master or slave store left by an earlier call would make the copy instant.
    topo = Topology(Path(tempfile.mkdtemp(prefix=f"catchup-{impl}-", dir=root)), broker_conf=conf, impl=impl).start()
    try:
        master = topo.brokers[0]
        end = _fill(topo, plan, progress)
        progress(f"{impl}: master holds {end / MIB:,.0f} MiB; starting an empty slave")
        t0 = time.monotonic()
        # haMasterAddress: the slave connects on boot rather than after its first name-server registration.
        slave = topo.add_slave(master, extra={"haMasterAddress": f"127.0.0.1:{master.ha_port}"})
        t_ready = time.monotonic()
        cpu0 = cpu_seconds(master.pid), cpu_seconds(slave.pid)
        first: tuple[float, int] | None = None
        while (got := _offset(slave)) < end:
            now = time.monotonic()
            if got and first is None:
                first = (now, got)
            if now - t0 > 600:
                raise RuntimeError(f"the slave stored {got} of {end} bytes after 600 s")
            time.sleep(0.02)
        t_done = time.monotonic()
        cpu_s = cpu_seconds(master.pid) - cpu0[0], cpu_seconds(slave.pid) - cpu0[1]
        start = end - end % plan.catchup_file_size  # transfer_start_offset's rule: the last file from its start
    finally:
        topo.kill()
    out: dict[str, Any] = {
        "bytes": end - start, "start_offset": start, "end_offset": end, "file_size": plan.catchup_file_size,
        "seconds": t_done - t_ready, "boot_s": t_ready - t0, "mb_s": catchup_rate(start, end, t_done - t_ready),
        "mb_s_from_first_bytes": catchup_rate(first[1], end, t_done - first[0]) if first else 0.0,
        # CPU over the copy, in cores (seconds of CPU per second): what bounds it beside the disk
        "master_cpu_cores": cpu_s[0] / (t_done - t_ready), "slave_cpu_cores": cpu_s[1] / (t_done - t_ready),
    }
    if fio:
        progress("fio sequential write on the same filesystem")
        params = FioParams(seq_write_size_bytes=min(plan.catchup_bytes, 1 << 30), sync_size_bytes=16 << 20,
                           sync_runtime_s=1.0, randread_size_bytes=16 << 20, randread_runtime_s=1.0)
        (root / "fio").mkdir(exist_ok=True)
        res, skipped = run_fio_baselines(root / "fio", params)
        out["fio_seq_write_bytes_per_s"] = None if res is None else res.seq_write_bytes_per_s
        if res is None:
            out["fio_skipped"] = skipped
    topo.cleanup()
    return out


# RocketMQ 4.9.8 refuses every put once its disk is 90 % used (CleanCommitLogService's
# rocketmq.broker.diskSpaceWarningLevelRatio; cleaning forcibly from 85 %), a level a shared machine's disk may be
# at for reasons that have nothing to do with the benchmark (which keeps its own files small: GROUP_CONF).
RELAXED_DISK_GUARD: Final = ("-Drocketmq.broker.diskSpaceWarningLevelRatio=0.99 "
                             "-Drocketmq.broker.diskSpaceCleanForciblyRatio=0.99")


@contextlib.contextmanager
def _relaxed_disk_guard() -> Iterator[None]:
    """RocketMQ processes started inside get RELAXED_DISK_GUARD (through JAVA_OPT_EXT, harness/rocketmq.java_env)."""
    before = os.environ.get("JAVA_OPT_EXT")
    os.environ["JAVA_OPT_EXT"] = f"{before or ''} {RELAXED_DISK_GUARD}".strip()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("JAVA_OPT_EXT", None)
        else:
            os.environ["JAVA_OPT_EXT"] = before


def run(plan: Plan, progress: Progress = print, root: Path | None = None, fio: bool = True,
        impls: Sequence[BrokerImpl] = ("reference",)) -> dict[str, Any]:
    """Every figure for each implementation of ``impls`` in turn (module docstring); fio once, beside the first
    catch-up. ``result["impls"][impl]`` holds one implementation's ``modes`` and ``catchup``."""
    if plan.rounds < 2:
        raise ValueError("at least 2 rounds: a spread needs two ratios")
    out: dict[str, Any] = {"plan": {**asdict(plan), "catchup_file_size": plan.catchup_file_size}, "impls": {},
                           "machine": {"cpus": len(os.sched_getaffinity(0)), "loadavg_start": os.getloadavg()}}
    with tempfile.TemporaryDirectory(prefix="rmq-lab-ha-bench-", dir=root) as tmp:
        for i, impl in enumerate(impls):
            res: dict[str, Any] = {"modes": {}}
            with _relaxed_disk_guard() if impl == "rocketmq" else contextlib.nullcontext():
                for flush in plan.flush_modes:
                    res["modes"][flush] = compare_roles(plan, flush, Path(tmp), progress, impl)
                if plan.catchup_bytes > 0:
                    res["catchup"] = catchup(plan, Path(tmp), progress, fio and i == 0, impl)
            out["impls"][impl] = res
    # Other work shares the machine: its load during the run says how much the figures owe to it.
    out["machine"]["loadavg_end"] = os.getloadavg()
    out["figures"] = figures(out)
    return out
