#!/usr/bin/env python3
"""The SYNC_FLUSH put path, old vs new revision, alternating in one sitting (issue 23).

1. ``bookkeeping``: what a SYNC_FLUSH send costs besides the append, the fdatasync and the request parsing, in
   one process with the real objects (FlushCondition, GroupCommitRequest and the group commit's completion,
   the PendingPut, SendMessageProcessor._reply, LoopHandoff, the server's answer callback) and a flush that
   returns at once: process CPU per put (the FlushDiskWatcher thread included), best and median of 5.
2. ``broker``: a real name server and SYNC_FLUSH broker of each revision (harness.launcher.Topology from that
   revision's tree), driven in turns by ``bench producer --lean`` (1 KiB, one process, 64 in flight): msg/s
   and the broker's CPU (utime + stime from /proc) per message, split by thread.

The old revision is checked out into a temporary worktree with this tree's compiled twins copied in (they are
built, not committed), so both sides run the same compiled leaf functions.

Usage: .venv/bin/python scripts/bench_sync_path.py [--old main] [--rounds 2] [--duration 8] [--part both]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# Runs in a child interpreter whose sys.path starts at one revision's tree.
_BOOKKEEPING = r"""
import asyncio, json, sys, time
from functools import partial
from reference_broker.broker import send_processor as sp
from reference_broker.remoting.command import RemotingCommand
from reference_broker.store import status as st
from reference_broker.store.durability import FlushCondition, submit_all
from reference_broker.store.flush import GroupCommitService

BATCH = 32  # puts per group commit


class Mfq:  # a flush that returns at once: the fdatasync is not what is measured
    flushed_where = 0
    store_timestamp = 0

    def flush(self, least):
        self.flushed_where = 1 << 60
        return True


class CommitLog:
    mapped_file_queue = Mfq()


class Checkpoint:
    physic_msg_timestamp = 0

    def note_physic_offset(self, offset):
        pass


class Config:
    sync_flush_timeout_ms = 5000
    flush_commit_log_timed = False


async def run(n):
    gc = GroupCommitService(CommitLog(), Checkpoint())
    gc.watcher.start()  # its thread polls as in the broker
    cond = FlushCondition(Config(), gc, None)
    proc = sp.SendMessageProcessor.__new__(sp.SendMessageProcessor)
    proc._ok = sp.OkFrame({"MSG_REGION": "DefaultRegion", "TRACE_ON": "true"})
    proc._fields, proc._max_body = {}, 4 << 20
    cmd = RemotingCommand(0)
    answered = 0
    tasks = {}

    def respond(cmd, response):
        nonlocal answered
        answered += 1

    def future_done(cmd, fut):  # the server's answer to a future (before LaterReply)
        tasks.pop(fut, None)
        respond(cmd, fut.result())

    def later_done(cmd, ok, value):  # the server's answer to a LaterReply
        respond(cmd, value)

    prefix = b"\x7f\x00\x00\x01\x00\x00\x27\x11"
    t0 = time.process_time()
    off = 0
    for _ in range(n // BATCH):
        for i in range(BATCH):
            append = st.AppendMessageResult(st.AppendMessageStatus.PUT_OK, off, 1200, "", 0, i, 1, prefix)
            off += 1200
            put = submit_all([cond], st.PutMessageResult(st.PutMessageStatus.PUT_OK, append), True)
            reply = proc._reply(cmd, put, 0)
            if isinstance(reply, asyncio.Future):
                tasks[reply] = None
                reply.add_done_callback(partial(future_done, cmd))
            else:
                reply.bind(partial(later_done, cmd))
        with gc._lock:
            reqs, gc._requests_write = gc._requests_write, []
        gc._do_commit(reqs)
        await asyncio.sleep(0)  # the hand-off's drain
        await asyncio.sleep(0)  # callbacks the drain scheduled
    dt = time.process_time() - t0
    gc.watcher.shutdown()
    assert answered == n // BATCH * BATCH, answered
    return dt / answered * 1e6


runs = sorted(asyncio.run(run(int(sys.argv[1]))) for _ in range(5))
print(json.dumps({"best_us": round(runs[0], 2), "median_us": round(runs[2], 2)}))
"""

# One SYNC_FLUSH topology of the tree on sys.path, warmed up, then one measured lean run.
_BROKER = r"""
import json, os, subprocess, sys, tempfile
from pathlib import Path
from harness.launcher import Topology

seconds, tree = sys.argv[1], sys.argv[2]


def threads(pid):
    out = {}
    for t in os.listdir(f"/proc/{pid}/task"):
        f = open(f"/proc/{pid}/task/{t}/stat").read().rsplit(")", 1)[1].split()
        out[t] = int(f[11]) + int(f[12])
    return out


def names(pid):  # thread id -> Python thread name, from py-spy when it is installed
    spy = Path(sys.executable).with_name("py-spy")
    if not spy.exists():
        return {}
    dump = subprocess.run([str(spy), "dump", "-p", str(pid)], capture_output=True, text=True).stdout
    lines = [line for line in dump.splitlines() if line.startswith("Thread ") and '"' in line]
    return {line.split()[1]: line.split('"')[1] for line in lines}


def produce(ns, args):
    p = subprocess.run([sys.executable, "-m", "reference_broker", "bench", "producer", "-n", ns, "--json", "-i", "1000",
                        *args], capture_output=True, text=True, cwd=tree, timeout=300)
    if p.returncode != 0:
        raise SystemExit(p.stderr[-2000:])
    return json.loads(p.stdout)


with tempfile.TemporaryDirectory(prefix="rmq-lab-syncpath-") as tmp:
    topo = Topology(Path(tmp), broker_conf={"flushDiskType": "SYNC_FLUSH"}).start()
    try:
        ns, pid = topo.namesrv_addr, topo.brokers[0].pid
        lean = ["--lean", "-p", "1", "-s", "1024", "--in-flight", "64", "-t", "SyncPath"]
        produce(ns, ["-t", "Warm", "-q", "200", "-w", "4", "-s", "1024"])
        produce(ns, [*lean, "-d", "2"])
        named = names(pid)
        load = os.getloadavg()[0]
        before = threads(pid)
        r = produce(ns, [*lean, "-d", seconds])
        after = threads(pid)
        n = r["messages"]
        per = {}
        for t, ticks in after.items():
            us = (ticks - before.get(t, 0)) / os.sysconf("SC_CLK_TCK") / n * 1e6
            if us >= 0.5:
                name = named.get(t, "other")
                per[name] = round(per.get(name, 0.0) + us, 1)
        print(json.dumps({"msgs_per_s": round(r["send_tps"]), "cpu_us_per_msg": round(sum(per.values()), 1),
                          "load1": round(load, 1), "threads": per}))
    finally:
        topo.cleanup()
"""


def child(tree: Path, code: str, *args: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=tree,
                       timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"{tree}: {p.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(p.stdout.strip().splitlines()[-1])
    return result


def old_tree(rev: str, where: Path) -> Path:
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(where), rev], check=True,
                   capture_output=True)
    for so in (ROOT / "reference_broker").rglob("*.so"):  # the compiled twins: built, not committed
        shutil.copy2(so, where / so.relative_to(ROOT))
    return where


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", default="main", help="the revision to compare this tree with")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--puts", type=int, default=64_000, help="puts per bookkeeping run")
    ap.add_argument("--part", choices=("bookkeeping", "broker", "both"), default="both")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out: dict[str, Any] = {"old": args.old, "rounds": []}
    with tempfile.TemporaryDirectory(prefix="rmq-lab-syncpath-old-") as tmp:
        trees = {"old": old_tree(args.old, Path(tmp) / "old"), "new": ROOT}
        try:
            for n in range(args.rounds):
                for side in ("old", "new") if n % 2 == 0 else ("new", "old"):
                    row: dict[str, Any] = {"round": n + 1, "side": side}
                    if args.part in ("bookkeeping", "both"):
                        row["bookkeeping"] = child(trees[side], _BOOKKEEPING, str(args.puts))
                    if args.part in ("broker", "both"):
                        row["broker"] = child(trees[side], _BROKER, str(args.duration), str(trees[side]))
                    out["rounds"].append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(trees["old"])],
                           capture_output=True)
    for side in ("old", "new"):
        rows = [r for r in out["rounds"] if r["side"] == side]
        summary: dict[str, float] = {}
        if rows and "bookkeeping" in rows[0]:
            summary["bookkeeping_us_median"] = statistics.median(r["bookkeeping"]["median_us"] for r in rows)
        if rows and "broker" in rows[0]:
            summary["broker_cpu_us_median"] = statistics.median(r["broker"]["cpu_us_per_msg"] for r in rows)
            summary["msgs_per_s_median"] = statistics.median(r["broker"]["msgs_per_s"] for r in rows)
        out[side] = summary
    print(json.dumps(out, indent=1) if args.json else
          "\n".join(f"{side}: {json.dumps(out[side])}" for side in ("old", "new")))


if __name__ == "__main__":
    main()
