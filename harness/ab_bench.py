"""Two revisions of the reference broker side by side (``python -m harness ab-bench OLD NEW``): is a change
within noise?

Run one after the other, two broker benchmarks on this 2-core machine differ by 10-15 % with no change at all
(the page cache, the files' growth, other tenants). So both revisions run at once: each is checked out into a
temporary git worktree, each gets its own name server and broker (started from its own tree), both are warmed
up, and then the same lean-generator run goes to one and then the other, the order swapped every round. Drift
then hits both alike, and the paired difference, with the spread of the runs, says whether a change costs.
The broker that is not under load idles (its background threads take ~3 % of a core).

The load generator is the one in this checkout for both sides (``generator="here"``): it shares the two cores
with the broker, so a generator that changed between the revisions would move both figures by itself. With
``generator="own"`` each side is driven by its own revision's generator (a change to the generator is then
part of what is compared).

Each side's name server and broker run on this interpreter unless ``pythons`` names one per side (a Python with
the project's dependencies, e.g. another virtualenv's): the same revision on two interpreters is then what is
compared (``ab-bench HEAD HEAD --old-python ... --new-python ...``). Likewise ``confs`` gives each side's broker
more broker.conf keys: the same revision with a key off and on (``ab-bench HEAD HEAD --new-conf
dispatchInSeparateProcess=true``). The CPU of the broker's child processes (the dispatch process) is read too,
beside the broker's own: it runs on the same two cores.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from harness.broker_bench import cpu_seconds

Progress = Callable[[str], None]
REPO: Final = Path(__file__).resolve().parents[1]

# The figures: (name, extra lean-generator options). 64 in flight over 2 processes, as broker-bench's.
LOADS: Final = {
    "single_64": ["--in-flight", "32"],
    "batch_32": ["-b", "32", "--in-flight", "4"],
}

# Run in a child interpreter whose sys.path starts at one revision's tree: that revision's launcher starts
# that revision's name server and broker; it prints their addresses and waits for stdin to close.
_TOPOLOGY_CHILD: Final = """
import json, sys
from pathlib import Path
from harness.launcher import Topology
topo = Topology(Path(sys.argv[1]), broker_conf={"flushDiskType": sys.argv[2], **json.loads(sys.argv[3])}).start()
try:
    print(json.dumps({"namesrv": topo.namesrv_addr, "pid": topo.brokers[0].pid}), flush=True)
    sys.stdin.read()
finally:
    topo.cleanup()
"""


class AbError(RuntimeError):
    """A revision could not be checked out or its topology did not start."""


@dataclass
class Side:
    label: str
    rev: str
    tree: Path
    python: str = sys.executable  # runs this side's topology (name server and broker)
    conf: dict[str, str] = field(default_factory=dict)  # more broker.conf keys for this side's broker
    namesrv: str = ""
    pid: int = 0
    runs: list[dict[str, float]] = field(default_factory=list)


def _git(*args: str) -> str:
    p = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)
    if p.returncode != 0:
        raise AbError(f"git {' '.join(args)}: {p.stderr.strip()}")
    return p.stdout.strip()


def build_compiled(tree: Path) -> None:
    """A revision's compiled twins, built in its tree as scripts/setup.sh builds them here: a checkout has
    only the .pyx (the built modules are not in git), and without them its broker would run the pure path
    while this checkout's runs the compiled one. A revision from before the twins has no build script."""
    script = tree / "scripts" / "build_compiled.py"
    if script.exists():
        done = subprocess.run([sys.executable, str(script)], cwd=tree, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise AbError(f"building the compiled twins in {tree} failed: {done.stdout[-400:]}{done.stderr[-400:]}")


@contextmanager
def worktree(rev: str, where: Path) -> Iterator[Path]:
    """``rev`` checked out at ``where`` (a detached worktree), removed afterwards."""
    commit = _git("rev-parse", "--verify", f"{rev}^{{commit}}")
    _git("worktree", "add", "--detach", "-f", str(where), commit)
    try:
        build_compiled(where)
        yield where
    finally:
        _git("worktree", "remove", "--force", str(where))


@contextmanager
def running(side: Side, root: Path, mode: str) -> Iterator[Side]:
    env = {**os.environ, "PYTHONPATH": str(side.tree)}
    proc = subprocess.Popen([side.python, "-c", _TOPOLOGY_CHILD, str(root), mode, json.dumps(side.conf)],
                            stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=env, text=True, cwd=side.tree)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise AbError(f"{side.label} ({side.rev}): its topology did not start (see {root}/*.log)")
        info = json.loads(line)
        side.namesrv, side.pid = info["namesrv"], info["pid"]
        yield side
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(90)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


def children_cpu_seconds(pid: int) -> float:
    """CPU seconds of ``pid``'s child processes now (0 for one that is gone)."""
    total = 0.0
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return 0.0
    for task in tasks:
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in children:
            try:
                total += cpu_seconds(int(child))
            except ProcessLookupError:
                pass
    return total


def _produce(side: Side, args: list[str], generator: Path | None = None) -> dict[str, float]:
    """One ``bench producer`` run against ``side``'s broker, from ``generator`` (a tree; default the side's
    own), with the broker's CPU per message."""
    tree = generator or side.tree
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-m", "reference_broker", "bench", "producer", "-n", side.namesrv, "--json", "-i", "1000",
           *args]
    cpu0, child0 = cpu_seconds(side.pid), children_cpu_seconds(side.pid)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tree, timeout=300)
    if p.returncode != 0:
        raise AbError(f"{side.label}: bench producer failed: {p.stderr[-1000:]}")
    r = json.loads(p.stdout)
    n = r.get("messages") or 0
    return {"send_tps": float(r["send_tps"]), "p50_ms": float(r.get("p50_ms") or 0.0),
            "broker_cpu_us_per_msg": (cpu_seconds(side.pid) - cpu0) / n * 1e6 if n else 0.0,
            "children_cpu_us_per_msg": (children_cpu_seconds(side.pid) - child0) / n * 1e6 if n else 0.0}


def compare(old: str, new: str, rounds: int = 8, load: str = "single_64", mode: str = "ASYNC_FLUSH",
            seconds: float = 4.0, progress: Progress = print, generator: str = "here",
            pythons: tuple[str, str] | None = None,
            confs: tuple[dict[str, str], dict[str, str]] | None = None) -> dict[str, Any]:
    """Paired runs of revisions ``old`` and ``new`` (see the module's docstring)."""
    if rounds < 2:
        raise ValueError("at least 2 rounds: one spread needs two runs")
    if generator not in ("here", "own"):
        raise ValueError(f"generator is 'here' or 'own', not {generator!r}")
    gen = REPO if generator == "here" else None
    lean = ["--lean", "-p", "2", "-s", "1024", *LOADS[load]]
    with tempfile.TemporaryDirectory(prefix="rmq-lab-ab-") as tmp:
        base = Path(tmp)
        with worktree(old, base / "old") as t_old, worktree(new, base / "new") as t_new:
            # Absolute, not resolved: each side's topology starts in its own tree, and a virtualenv's python is a
            # symlink whose target would not see the virtualenv's packages.
            py_old, py_new = (os.path.abspath(p) for p in pythons or (sys.executable, sys.executable))
            conf_old, conf_new = confs or ({}, {})
            sides = [Side("old", old, t_old, py_old, dict(conf_old)), Side("new", new, t_new, py_new, dict(conf_new))]
            with running(sides[0], base / "topo-old", mode), running(sides[1], base / "topo-new", mode):
                for s in sides:
                    _produce(s, ["-t", "Warm", "-q", "200", "-w", "4", "-s", "1024"], gen)
                    _produce(s, ["-t", "Ab", *lean, "-d", "2"], gen)
                for n in range(rounds):
                    for s in sides if n % 2 == 0 else sides[::-1]:
                        s.runs.append(_produce(s, ["-t", "Ab", *lean, "-d", str(seconds)], gen))
                        progress(f"round {n + 1}/{rounds} {s.label}: {s.runs[-1]['send_tps']:,.0f} msg/s, "
                                 f"{s.runs[-1]['broker_cpu_us_per_msg']:.1f} us/msg")
    return summarize(sides, {"old": old, "new": new, "rounds": rounds, "load": load, "mode": mode,
                             "seconds": seconds, "generator": generator,
                             "pythons": [s.python for s in sides], "confs": [s.conf for s in sides]})


def summarize(sides: list[Side], plan: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"plan": plan}
    for s in sides:
        tps = [r["send_tps"] for r in s.runs]
        cpu = [r["broker_cpu_us_per_msg"] for r in s.runs]
        children = [r.get("children_cpu_us_per_msg", 0.0) for r in s.runs]
        out[s.label] = {"rev": s.rev, "runs": s.runs, "tps_mean": statistics.fmean(tps),
                        "tps_sd": statistics.stdev(tps), "cpu_mean": statistics.fmean(cpu),
                        "cpu_sd": statistics.stdev(cpu), "children_cpu_mean": statistics.fmean(children)}
    o, n = sides[0].runs, sides[1].runs
    # Paired by round: the runs of one round met the same machine.
    ratios = [b["send_tps"] / a["send_tps"] for a, b in zip(o, n, strict=True) if a["send_tps"]]
    out["tps_ratio_mean"] = statistics.fmean(ratios)
    out["tps_ratio_sd"] = statistics.stdev(ratios)
    return out


def format_result(r: dict[str, Any]) -> str:
    p = r["plan"]
    gen = "each side's own generator" if p.get("generator") == "own" else "this checkout's generator"
    lines = [f"{p['load']} under {p['mode']}, {p['rounds']} paired rounds of {p['seconds']:g} s, {gen}"]
    pythons = p.get("pythons") or []
    confs = p.get("confs") or [{}, {}]
    for i, label in enumerate(("old", "new")):
        s = r[label]
        on = f" on {pythons[i]}" if len(set(pythons)) > 1 else ""
        with_conf = "".join(f", {k}={v}" for k, v in confs[i].items())
        kids = f" + its children {s['children_cpu_mean']:.1f}" if s.get("children_cpu_mean") else ""
        lines.append(f"  {label} {s['rev']:>12}: {s['tps_mean']:9,.0f} msg/s (sd {s['tps_sd']:,.0f}), "
                     f"broker {s['cpu_mean']:.1f} us/msg (sd {s['cpu_sd']:.1f}){kids}{on}{with_conf}")
    lines.append(f"  new / old, paired by round: {r['tps_ratio_mean']:.3f} (sd {r['tps_ratio_sd']:.3f})")
    return "\n".join(lines)
