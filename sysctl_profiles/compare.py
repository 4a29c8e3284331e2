"""This module owns the profiles experiment (``python -m sysctl_profiles compare``): the same short workloads under
each vm.* profile, so a report can say what each profile changes.

Per profile, in order, each a real command run as a child process (what a user can run by hand):

    workload     command                                                              measures
    throughput   locust -f scenarios/throughput.py --rate 0 --sysctl-profile P        unbounded send rate
    latency      locust -f scenarios/latency.py --rate R --sysctl-profile P           p99/p99.9, stalls over time
    power_loss   python -m chaos power-loss --flush async --profile P --cycles N      acknowledged data a power
                                                                                      cut takes (ASYNC_FLUSH)

R, the half rate, is half the first profile's unbounded throughput (``--latency-rate`` sets it): every profile's
latency is measured at the same offered load, so the profiles differ only in their settings. Every run samples
/proc/meminfo and /proc/vmstat beside the broker's metrics (harness/vm_stats.py). Each child applies the profile
itself and restores it when it ends; the child's run record gets a ``profiles_experiment`` entry in meta.json
(experiment id, workload, profile) by which the ``profiles`` report finds it.

Restoring: before the first child the values of every key a shipped profile may change are read (the baseline).
After each child and at the end — also after a failure, Ctrl-C or SIGTERM — they are read again; a child killed
before its own restore leaves its state file, which is replayed, and anything still different from the baseline
is written back. Ctrl-C/SIGTERM/SIGHUP are forwarded to the running child (its own process group), the child is
waited for, no further child starts, and the exit code is 128 + N.
"""

from __future__ import annotations

import enum
import json
import os
import secrets
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from sysctl_profiles import procsys
from sysctl_profiles.catalog import load_profile
from sysctl_profiles.errors import LockedError, RestoreError
from sysctl_profiles.plan import PARTNER, mismatches
from sysctl_profiles.record import update_meta_key
from sysctl_profiles.runner import SignalForwarder, run_child
from sysctl_profiles.session import WATCH_PROFILE, _signals_deferred, restore_values
from sysctl_profiles.state_file import DEFAULT_STATE_FILE, ApplyLock, load_state, write_atomic

PROFILES: Final = ("default", "rocketmq-os", "seed-qa", "low-latency-async")
META_KEY: Final = "profiles_experiment"
MANIFEST_PREFIX: Final = "profiles-"  # <runs>/profiles-<experiment id>.json
ROOT: Final = Path(__file__).resolve().parents[1]

Say = Callable[[str], None]


class Workload(enum.StrEnum):
    THROUGHPUT = "throughput"
    LATENCY = "latency"
    POWER_LOSS = "power_loss"


WORKLOADS: Final = tuple(Workload)


@dataclass(frozen=True)
class CompareSpec:
    profiles: tuple[str, ...] = PROFILES
    runs_dir: Path = Path("runs")
    seconds: int = 15  # each locust workload
    cycles: int = 3  # power cuts per profile
    latency_rate: float = 0.0  # 0 = half the first profile's unbounded throughput
    work_dir: Path | None = None  # chaos scratch (store, disk images); default $TMPDIR
    workloads: tuple[Workload, ...] = WORKLOADS
    python: str = sys.executable


@dataclass
class StepResult:
    profile: str
    workload: Workload
    argv: list[str]
    exit_code: int
    run_dir: str | None
    seconds: float
    restore_problems: list[str] = field(default_factory=list)  # baseline keys a child left changed

    def to_json(self) -> dict[str, Any]:
        return {"profile": self.profile, "workload": self.workload.value, "argv": self.argv,
                "exit_code": self.exit_code, "run_dir": self.run_dir, "seconds": round(self.seconds, 1),
                "restore_problems": self.restore_problems}


# ---- pure parts ----------------------------------------------------------------------------------------


def watched_keys() -> list[str]:
    """Every key a shipped profile may change, with its coupled partner: the baseline that must come back."""
    keys = list(load_profile(WATCH_PROFILE).keys)
    for key in list(keys):
        if key in PARTNER and PARTNER[key] not in keys:
            keys.append(PARTNER[key])
    return keys


def workload_argv(spec: CompareSpec, workload: Workload, profile: str, rate: float | None) -> list[str]:
    runs = str(spec.runs_dir)
    if workload is Workload.POWER_LOSS:
        argv = [spec.python, "-m", "chaos", "power-loss", "--flush", "async", "--profile", profile,
                "--cycles", str(spec.cycles), "--runs-dir", runs]
        return argv + (["--work-dir", str(spec.work_dir)] if spec.work_dir is not None else [])
    scenario = "throughput" if workload is Workload.THROUGHPUT else "latency"
    offered = 0.0 if workload is Workload.THROUGHPUT else rate
    if offered is None:
        raise ValueError("the latency workload needs its rate")
    return [spec.python, "-m", "locust", "-f", str(ROOT / "scenarios" / f"{scenario}.py"), "--headless",
            "--only-summary", "-L", "WARNING", "-t", f"{spec.seconds}s", "--run-dir", runs,
            "--flush", "ASYNC_FLUSH", "--rate", f"{offered:g}", "--sysctl-profile", profile,
            "--drain-timeout", "30", "--final-read", "30"]


def half_rate(summary: Mapping[str, Any]) -> float | None:
    """Half the acknowledged send rate of a throughput run's summary.json (``counts.send_rate``), whole msg/s."""
    rate = (summary.get("counts") or {}).get("send_rate")
    if not isinstance(rate, int | float) or rate <= 0:
        return None
    return float(max(1, round(rate / 2)))


def new_run_dirs(before: Iterable[str], after: Iterable[str]) -> list[str]:
    """Run directories that appeared (names in listing order)."""
    seen = set(before)
    return sorted(n for n in after if n not in seen)


def experiment_tag(experiment_id: str, profile: str, workload: Workload, rate: float | None) -> dict[str, Any]:
    return {"id": experiment_id, "profile": profile, "workload": workload.value, "latency_rate": rate}


# ---- the shell -----------------------------------------------------------------------------------------


def _run_names(runs_dir: Path) -> list[str]:
    if not runs_dir.is_dir():
        return []
    return [p.name for p in runs_dir.iterdir() if p.is_dir() and (p / "meta.json").exists()]


def baseline_problems(baseline: Mapping[str, str]) -> list[str]:
    return mismatches(baseline, procsys.probe(baseline))


def put_back(baseline: Mapping[str, str], say: Say) -> list[str]:
    """Replay a leftover state file, then write back whatever still differs from the baseline; returns what was
    wrong (empty: nothing to do). Under the apply lock: while another apply holds it (another experiment on this
    machine), nothing is touched and that is reported instead. Raises RestoreError if the baseline cannot be
    reached."""
    lock = ApplyLock()
    try:
        lock.acquire()
    except LockedError as e:
        say(f"not checking the baseline now: {e}")
        return [str(e)]
    try:
        left = DEFAULT_STATE_FILE.exists()
        if left:
            say(f"a child left {DEFAULT_STATE_FILE}: restoring from it")
            saved = load_state(DEFAULT_STATE_FILE).saved
            restore_values(saved)
            DEFAULT_STATE_FILE.unlink()
        problems = baseline_problems(baseline)
        if problems:
            say("values differ from the baseline, writing it back: " + "; ".join(problems))
            restore_values(dict(baseline))
        return ([f"state file {DEFAULT_STATE_FILE} left"] if left else []) + problems
    finally:
        lock.release()


def run_compare(spec: CompareSpec, say: Say) -> tuple[dict[str, Any], int]:
    """Run the experiment; returns (manifest, exit code). The manifest also goes to <runs>/profiles-<id>.json."""
    for name in spec.profiles:
        load_profile(name)  # an unknown profile fails before anything runs
    if DEFAULT_STATE_FILE.exists():
        raise RestoreError(f"{DEFAULT_STATE_FILE} exists: an earlier apply did not restore; run "
                           "`python -m sysctl_profiles restore` first")
    spec.runs_dir.mkdir(parents=True, exist_ok=True)
    experiment_id = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)
    baseline = procsys.read_values(watched_keys())
    manifest: dict[str, Any] = {
        "experiment_id": experiment_id, "profiles": list(spec.profiles), "seconds": spec.seconds,
        "cycles": spec.cycles, "euid": os.geteuid(), "loadavg_before": list(os.getloadavg()),
        "baseline": baseline, "steps": [], "latency_rate": spec.latency_rate or None,
    }
    rate: float | None = spec.latency_rate or None
    code = 0
    signal_code: int | None = None
    steps: list[StepResult] = []
    try:
        with SignalForwarder() as forwarder:
            for profile in spec.profiles:
                for workload in spec.workloads:
                    if forwarder.received:
                        break
                    if workload is Workload.LATENCY and rate is None:
                        say(f"{profile}: latency skipped: no throughput measured yet for its half rate")
                        continue
                    step = _run_step(spec, experiment_id, profile, workload, rate, forwarder, say)
                    steps.append(step)
                    step.restore_problems = put_back(baseline, say)
                    if step.exit_code != 0:
                        code = 1
                    if workload is Workload.THROUGHPUT and rate is None and step.run_dir is not None:
                        rate = _half_rate_of(Path(step.run_dir))
                        manifest["latency_rate"] = rate
                        if rate is not None:
                            say(f"latency workloads at {rate:,.0f} msg/s: half of {profile}'s throughput")
            signal_code = forwarder.exit_code()
    finally:
        with _signals_deferred():  # a second Ctrl-C must not cut the last restore in half
            final_problems = put_back(baseline, say)
        manifest["steps"] = [s.to_json() for s in steps]
        manifest["loadavg_after"] = list(os.getloadavg())
        manifest["restore"] = {"problems_at_end": final_problems,
                               "restored": not baseline_problems(baseline),
                               "values_after": procsys.read_values(baseline)}
        write_atomic(spec.runs_dir / f"{MANIFEST_PREFIX}{experiment_id}.json",
                     (json.dumps(manifest, indent=2) + "\n").encode())
    if signal_code is not None:
        return manifest, signal_code
    return manifest, code


def _half_rate_of(run_dir: Path) -> float | None:
    try:
        return half_rate(json.loads((run_dir / "summary.json").read_text()))
    except (OSError, ValueError):
        return None


def _run_step(spec: CompareSpec, experiment_id: str, profile: str, workload: Workload, rate: float | None,
              forwarder: SignalForwarder, say: Say) -> StepResult:
    argv = workload_argv(spec, workload, profile, rate)
    say(f"{profile}: {workload.value}: {' '.join(argv[1:])}")
    before = _run_names(spec.runs_dir)
    began = time.monotonic()
    try:
        exit_code = run_child(argv, forwarder)
    except OSError as e:
        say(f"{profile}: {workload.value}: cannot start: {e}")
        exit_code = 127
    created = new_run_dirs(before, _run_names(spec.runs_dir))
    run_dir = str((spec.runs_dir / created[-1]).resolve()) if created else None
    if run_dir is not None:
        update_meta_key(Path(run_dir), META_KEY, experiment_tag(experiment_id, profile, workload, rate))
    seconds = time.monotonic() - began
    say(f"{profile}: {workload.value}: exit {exit_code}, {seconds:.0f} s, run {run_dir}")
    return StepResult(profile, workload, argv, exit_code, run_dir, seconds)


def summary_lines(manifest: Mapping[str, Any]) -> Sequence[str]:
    """The end-of-run screen: one line per step, then the restore verdict."""
    out = [f"profiles experiment {manifest['experiment_id']}"]
    for s in manifest["steps"]:
        out.append(f"  {s['profile']:<18} {s['workload']:<11} exit {s['exit_code']:<4} {s['seconds']:>6} s  "
                   f"{s['run_dir'] or '(no run record)'}")
    restore = manifest.get("restore") or {}
    out.append("sysctl values restored to the baseline" if restore.get("restored")
               else "SYSCTL VALUES NOT RESTORED: " + "; ".join(restore.get("problems_at_end") or []))
    return out
