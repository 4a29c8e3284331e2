"""This module owns the main job (``python -m harness pipeline``): on the embedded default — local broker
processes, local Spark — the shortest run of each experiment that tests a seed claim (backlog hot and cold,
queue counts, SYNC vs ASYNC throughput, a sync-vs-async crash comparison with power loss when root with loop
devices and kill -9 otherwise, a master that loses its disk under SYNC_MASTER and ASYNC_MASTER, recovery time,
disk fill), then the Spark reports over the run records, ending with the path of ``reports/index.html`` (the
claims front page).

Each stage is a real command (locust, ``python -m chaos``, ``python -m spark_reports``) run as a subprocess,
so what the pipeline does is exactly what a user can run by hand; its progress goes to stderr.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.rocketmq import BrokerImpl

Progress = Callable[[str], None]

# Every claim judged from a timing is judged over repeated runs, each run alone too, and runs that disagree read
# "unsettled" (spark_reports.claims.settle): the recovery bench, the cold backlog read and the queue counts run
# REPEATS times. The rest run once, for reasons the claims page states beside each verdict
# (spark_reports.claims.ONE_RUN_SUFFICES): the loss claims (crash comparison, replication, disk fill) count every
# acknowledged message of every cycle, one run holding thousands of trials that any single loss decides; the
# page-cache capacity comes from the store's bytes per message, which follow its record format, not the load;
# the flush comparison and hazards judge no seed claim.
REPEATS = 3
RECOVERY_RUNS = REPEATS
# The repeats of the cold backlog and the queue counts are shorter than the first run: a 16 MiB backlog builds
# and drains in about 10 s, and the queues claim needs only the phase with the fewest queues and the 10,000 one.
REPEAT_BACKLOG_S = 15
REPEAT_QUEUES_S = 16


@dataclass(frozen=True)
class Stage:
    name: str
    argv: list[str]
    required: bool = True  # a failed optional stage is reported and the pipeline goes on


class PipelineError(RuntimeError):
    pass


def can_power_loss() -> str | None:
    """Why the experiments that need root and loop devices cannot run here, or None when they can."""
    if os.geteuid() != 0:
        return "not root"
    if not Path("/dev/loop-control").exists():
        return "no /dev/loop-control"
    return None


def stages(runs: Path, reports: Path, backlog_s: int, cycles: int, why_not_root: str | None,
           impls: Sequence[BrokerImpl] = ("reference",)) -> list[Stage]:
    """The experiments, shortest settings that still test each seed claim, for each broker in ``impls``, then
    the reports (once, over every run: they judge each implementation's runs apart).

    ``why_not_root``: why the experiments that need root (power loss, a cold page cache, disk fill on a
    loop-mounted filesystem) cannot run here, or None when they can; those stages are then left out. Only the
    reference broker's first stage is required: Apache RocketMQ's stages are reported and skipped if they fail.
    """
    py = sys.executable
    root = Path(__file__).resolve().parents[1]
    faults = "kill9,power_loss" if why_not_root is None else "kill9"
    def locust(scenario: str, seconds: int, *extra: str) -> list[str]:
        return [py, "-m", "locust", "-f", str(root / "scenarios" / f"{scenario}.py"), "--headless", "-t",
                f"{seconds}s", "--run-dir", str(runs), "--only-summary", *extra]

    todo: list[Stage] = [Stage("machine noise before: load average and a quick fio baseline",
                               [py, "-m", "harness.machine_noise", str(runs), "--label", "before"], required=False)]
    for impl in impls:
        other = impl != "reference"
        tag = f" [{impl}]" if other else ""
        with_impl = ["--broker-impl", impl] if other else []

        todo.append(Stage(f"backlog workload, page cache hot (locust, embedded broker){tag}",
                          locust("backlog", backlog_s, *with_impl), required=not other))
        if why_not_root is None:
            todo += [Stage(f"backlog workload, page cache dropped first (--cold, run {k} of {REPEATS}){tag}",
                           locust("backlog", backlog_s if k == 1 else min(backlog_s, REPEAT_BACKLOG_S), "--cold",
                                  *with_impl), required=False) for k in range(1, REPEATS + 1)]
        # The drain waits while deliveries go on (it stops after 5 s without one): with 10,000 queues
        # RocketMQ's consumers end about a minute behind, and an unfinished final read would count the
        # messages still stored as lost.
        todo.append(Stage(f"queues: 1, 1,000 and 10,000 queues at one rate (run 1 of {REPEATS}){tag}",
                          locust("queues", 24, "--queue-counts", "1,1000,10000", "--drain-timeout", "120",
                                 *with_impl), required=False))
        todo += [Stage(f"queues: 1 and 10,000 queues at one rate (run {k} of {REPEATS}){tag}",
                       locust("queues", REPEAT_QUEUES_S, "--queue-counts", "1,10000", "--drain-timeout", "120",
                              *with_impl), required=False) for k in range(2, REPEATS + 1)]
        todo += [
            Stage(f"flush comparison: maximum send rate, ASYNC_FLUSH{tag}",
                  locust("throughput", 15, "--rate", "0", "--flush", "ASYNC_FLUSH", *with_impl), required=False),
            Stage(f"flush comparison: maximum send rate, SYNC_FLUSH{tag}",
                  locust("throughput", 15, "--rate", "0", "--flush", "SYNC_FLUSH", *with_impl), required=False),
            Stage(f"crash comparison, SYNC vs ASYNC flush ({faults}, {cycles} cycles){tag}",
                  [py, "-m", "chaos", "matrix", "--flush", "sync,async", "--faults", faults, "--profiles",
                   "default", "--cycles", str(cycles), "--runs-dir", str(runs), *with_impl], required=False),
            # A master and its slave; the master's store is deleted in the last cycle and the topic read from the
            # slave: SYNC_MASTER against ASYNC_MASTER (docs/claims.md, replication-master-loss). The restart
            # waits for a plain SEND_OK (the slave back), then 1-2 s of load: the final window holds the
            # promised sends the claim needs (spark_reports/replication_evidence.PROMISED_MIN). About 35 s
            # on the reference broker, 75-110 s on RocketMQ (its group takes longer to start and restart).
            Stage(f"replication: SYNC vs ASYNC master, the master's disk destroyed (2 cycles){tag}",
                  [py, "-m", "chaos", "replication", "--replication", "sync,async", "--faults",
                   "master_disk_destroyed", "--cycles", "2", "--gap", "1,2", "--runs-dir", str(runs), *with_impl],
                  required=False),
        ]
        # 512 MiB: with dispatch by runs a full scan of 128 MiB hides inside the broker's start-up time.
        # Repeated: the recovery claim is judged run by run too, and runs that disagree read "unsettled"
        # (spark_reports.claims.settle) instead of one noisy run flipping the verdict.
        todo += [Stage(f"recovery time: 32 and 512 MiB logs, with and without the checkpoint "
                       f"(run {k} of {RECOVERY_RUNS}){tag}",
                       [py, "-m", "chaos", "recovery-bench", "--sizes", "32,512", "--file-size", "64", "--runs-dir",
                        str(runs), *with_impl], required=False) for k in range(1, RECOVERY_RUNS + 1)]
        # Hostile requests, then whether the broker still dispatches (docs/findings.md F1): RocketMQ's
        # failures become findings in runs/findings.jsonl, for the findings page.
        todo.append(Stage(f"hazards: hostile requests, then a message that must still be pullable{tag}",
                          [py, "-m", "harness", "hazards", "--runs", str(runs), *with_impl], required=False))
        if why_not_root is None:
            todo.append(Stage(f"disk fill past 90 % (loop-mounted filesystem){tag}",
                              [py, "-m", "chaos", "disk-fill", "--cycles", "2", "--no-clean-phase", "--runs-dir",
                               str(runs), *with_impl], required=False))
    todo.append(Stage("machine noise after: load average and a quick fio baseline",
                      [py, "-m", "harness.machine_noise", str(runs), "--label", "after"], required=False))
    todo.append(Stage("Spark reports", [py, "-m", "spark_reports", "all", "--runs", str(runs), "--out",
                                        str(reports)]))
    return todo


def run(runs: Path, reports: Path, backlog_s: int = 30, cycles: int = 3, progress: Progress = print,
        impls: Sequence[BrokerImpl] = ("reference",)) -> Path:
    runs.mkdir(parents=True, exist_ok=True)
    reports.mkdir(parents=True, exist_ok=True)
    why = can_power_loss()
    if why is not None:
        progress(f"power loss, the cold backlog and disk fill are skipped ({why}); the crash comparison uses "
                 "kill -9 only")
    todo = stages(runs, reports, backlog_s, cycles, why, impls)
    t0 = time.monotonic()
    for i, stage in enumerate(todo, 1):
        progress(f"[{i}/{len(todo)}] {stage.name}: {' '.join(stage.argv[1:])}")
        started = time.monotonic()
        done = subprocess.run(stage.argv, cwd=Path(__file__).resolve().parents[1])
        took = time.monotonic() - started
        if done.returncode != 0:
            msg = f"[{i}/{len(todo)}] {stage.name} exited with {done.returncode} after {took:.0f} s"
            if stage.required:
                raise PipelineError(msg)
            progress(msg + " (reported in its run records; going on)")
        else:
            progress(f"[{i}/{len(todo)}] {stage.name}: done in {took:.0f} s")
    index = reports / "index.html"
    progress(f"pipeline finished in {time.monotonic() - t0:.0f} s")
    return index
