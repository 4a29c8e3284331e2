#!/usr/bin/env python3
"""Pure vs compiled put path (reference_broker/common/compiled.py), alternating in one sitting.

1. Per function, in this process: CPU time per call (``time.thread_time``, best of 5 repeats: the machine may
   be busy) of each pure function and its compiled twin on a 1 KiB message with TAGS, UNIQ_KEY and the
   whole-record CRC.
2. End to end: a real name server and broker (harness.launcher.Topology) started with and without
   ``RMQ_PURE_PYTHON=1``, in turns, each driven by ``bench producer --lean`` (1 KiB, 64 in flight) with single
   sends and batches of 32; the broker's CPU (utime + stime from /proc) per message sent, and msg/s.

Usage: .venv/bin/python scripts/bench_compiled.py [--rounds 3] [--duration 8] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.launcher import Topology  # noqa: E402
from reference_broker.common import compiled  # noqa: E402
from reference_broker.common import java_hash as jh  # noqa: E402
from reference_broker.common import message as mc  # noqa: E402
from reference_broker.common import message_batch as mb  # noqa: E402
from reference_broker.common import record as rec  # noqa: E402
from reference_broker.store import index_file  # noqa: E402


def per_call(fn: Any, number: int) -> float:
    """µs of this thread's CPU per call, best of 5."""
    return min(timeit.Timer(fn, timer=time.thread_time).repeat(5, number)) / number * 1e6


def functions() -> list[dict[str, Any]]:
    props_d = {"TAGS": "TagA", "UNIQ_KEY": "7F0000010A2B18B4AAC27E8B5F3C0000", "WAIT": "true", "KEYS": "k1"}
    text = mc.properties_to_bytes(props_d).decode()
    pb = rec.reserve_prop_crc(mc.properties_to_bytes(props_d))
    body, ip = b"x" * 1024, bytes([127, 0, 0, 1])
    batch = mb.encode_batch([mb.BatchEntry(0, body, props_d)] * 32)
    r = rec.prepare_record(b"BenchmarkTest", body, pb, 1, 0, 0, 1, ip, 5555, ip, 10911)
    run = bytearray(r.size * 1000)
    for i in range(1000):
        rec.pure_write_record(run, i * r.size, r, i, i * r.size, 1_700_000_000_000 + i, True)
    view = memoryview(run)
    out = bytearray(1 << 16)
    rows = []
    impls = {"pure": {n: getattr(m, f"pure_{n}") for m, n in _NAMES},
             "compiled": {n: getattr(m, n) for m, n in _NAMES}}
    cases = [
        ("write_record (with the whole-record CRC)", 20000, lambda f: lambda: f(out, 64, r, 7, 9, 11, True)),
        ("string_to_properties", 20000, lambda f: lambda: f(text)),
        ("bytes_to_properties", 20000, lambda f: lambda: f(pb)),
        ("decode_batch_entries, per entry of 32", 500, lambda f: lambda: f(batch)),
        ("scan_records + CRC, per record of 1,000", 10, lambda f: lambda: f(view, 0, len(run), True, None, 1 << 30,
                                                                             True)),
    ]
    fn_of = {"write_record": "write_record", "string_to_properties":
             "string_to_properties", "bytes_to_properties": "bytes_to_properties", "decode_batch_entries":
             "decode_batch_entries", "scan_records": "scan_records"}
    for label, number, make in cases:
        name = fn_of[label.split()[0].rstrip(",")]
        per = {"decode_batch_entries": 32, "scan_records": 1000}.get(name, 1)
        us = {k: per_call(make(impls[k][name]), number) / per for k in ("pure", "compiled")}
        rows.append({"function": label, "pure_us": round(us["pure"], 3), "compiled_us": round(us["compiled"], 3),
                     "ratio": round(us["compiled"] / us["pure"], 2)})
    return rows + index_rows() + frame_rows()


def frame_rows() -> list[dict[str, Any]]:
    """The frame decoder's twin (common/_frame_c.pyx): ``FrameDecoder.next_frame`` per frame, on a stream of 64
    lean single sends (1 KiB; the frame ``bench producer --lean`` writes), pure and compiled."""
    from reference_broker.bench.lean_producer import build_template, fill_frame
    from reference_broker.remoting import codec

    twin = codec._compiled
    if twin is None:
        return []
    tpl = build_template("BenchmarkGroup", "BenchmarkTest", 1, b"x" * 1024, 1, None)
    stream = b"".join(fill_frame(tpl, 1_000_000_000 + i, 1_700_000_000_000, [f"7F0000010A2B18B4AAC27E8B5F3C{i:04X}"],
                                 1_700_000_000_000_000_000) for i in range(64))

    def drain() -> None:
        dec = codec.FrameDecoder()
        dec.feed(stream)
        while dec.next_frame() is not None:
            pass

    us = {}
    for path in ("pure", "compiled"):
        codec._compiled = twin if path == "compiled" else None
        try:
            us[path] = per_call(drain, 300) / 64
        finally:
            codec._compiled = twin
    return [{"function": "FrameDecoder.next_frame, per frame of 64 (1 KiB sends)", "pure_us": round(us["pure"], 3),
             "compiled_us": round(us["compiled"], 3), "ratio": round(us["compiled"] / us["pure"], 2)}]


def index_rows() -> list[dict[str, Any]]:
    """The index twin (common/_index_c.pyx): key hashes, and ``IndexFile.put_keys`` on runs of UNIQ_KEYs (14
    keys: a run under single sends, put key by key on the pure path; 32: the numpy path), per key."""
    keys = [f"BenchmarkTest#7F0000010A2B18B4AAC27E8B{i:012X}" for i in range(32)]
    rows = []
    twin = index_file._link_write
    if twin is None:
        return rows
    us = {"pure": per_call(lambda: jh.pure_hash_codes(keys), 2000) / 32,
          "compiled": per_call(lambda: jh.hash_codes(keys), 2000) / 32}
    rows.append({"function": "hash_codes, per key of 32", "pure_us": round(us["pure"], 3),
                 "compiled_us": round(us["compiled"], 3), "ratio": round(us["compiled"] / us["pure"], 2)})
    codes = jh.pure_hash_codes(keys)
    with tempfile.TemporaryDirectory(prefix="bench-index-") as tmp:
        for m in (14, 32):
            us = {}
            for path in ("pure", "compiled"):
                f = index_file.IndexFile(Path(tmp) / f"{m}{int(path == 'compiled')}", 5_000_000, 5 * 400 * m + 10)
                phys, stamps = list(range(1000, 1000 + m)), [1_700_000_000_000 + i for i in range(m)]
                index_file._link_write = twin if path == "compiled" else None
                try:
                    f.put_keys(keys[:1], codes[:1], phys[:1], stamps[:1])  # the file's first entry sets its begin
                    run = (keys[:m], codes[:m], phys, stamps)
                    us[path] = per_call(lambda f=f, run=run: f.put_keys(*run), 400) / m
                finally:
                    index_file._link_write = twin
                    f.shutdown(0)
            rows.append({"function": f"IndexFile.put_keys, per key of a run of {m}", "pure_us": round(us["pure"], 3),
                         "compiled_us": round(us["compiled"], 3), "ratio": round(us["compiled"] / us["pure"], 2)})
    return rows


_NAMES = [(rec, "write_record"), (rec, "scan_records"), (mc, "string_to_properties"),
          (mc, "bytes_to_properties"), (mb, "decode_batch_entries")]


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def end_to_end(path: str, batch: int, duration: float, root: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != compiled.ENV_PURE}
    if path == "pure":
        env[compiled.ENV_PURE] = "1"
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)  # the launcher passes this process's environment on
    try:
        with Topology(root) as topo:
            pid = topo.brokers[0].pid
            time.sleep(1.0)
            c0 = _cpu_s(pid)
            res = subprocess.run([sys.executable, "-m", "reference_broker", "bench", "producer", "-n",
                                  topo.namesrv_addr, "--lean", "-s", "1024", "-b", str(batch), "--in-flight", "64",
                                  "-d", str(duration), "--json"], capture_output=True, text=True, check=True,
                                 cwd=ROOT, timeout=duration + 120)
            c1 = _cpu_s(pid)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    summary = json.loads(res.stdout)
    n = summary["messages"]
    return {"path": path, "batch": batch, "messages": n, "msgs_per_s": round(summary["send_tps"]),
            "broker_cpu_us_per_msg": round((c1 - c0) / n * 1e6, 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if compiled.runtime_info()["path"] != "compiled":
        print(f"the compiled twins are not loaded ({compiled.runtime_info()}): build them with "
              "scripts/build_compiled.py and unset RMQ_PURE_PYTHON", file=sys.stderr)
        return 1
    report: dict[str, Any] = {"loadavg_before": os.getloadavg(), "functions": functions(), "sends": []}
    for row in report["functions"]:
        print(f"{row['function']:45s} pure {row['pure_us']:8.3f} µs  compiled {row['compiled_us']:8.3f} µs  "
              f"x{row['ratio']}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="bench-compiled-") as tmp:
        for i in range(args.rounds):
            for batch in (1, 32):
                for path in (("compiled", "pure") if i % 2 == 0 else ("pure", "compiled")):
                    row = end_to_end(path, batch, args.duration, Path(tmp) / f"{path}-{batch}-{i}")
                    row["round"] = i + 1
                    report["sends"].append(row)
                    print(f"round {i + 1} batch {batch:2d} {path:8s} {row['msgs_per_s']:7d} msg/s  "
                          f"{row['broker_cpu_us_per_msg']:6.2f} µs broker CPU/msg", file=sys.stderr)
    report["loadavg_after"] = os.getloadavg()
    for batch in (1, 32):
        cpu = {p: [r["broker_cpu_us_per_msg"] for r in report["sends"] if r["batch"] == batch and r["path"] == p]
               for p in ("pure", "compiled")}
        med = {p: statistics.median(v) for p, v in cpu.items()}
        report[f"batch_{batch}_cpu_ratio"] = round(med["compiled"] / med["pure"], 3)
        print(f"batch {batch:2d}: broker CPU per message, median compiled / pure = {med['compiled']:.2f} / "
              f"{med['pure']:.2f} µs = {report[f'batch_{batch}_cpu_ratio']}", file=sys.stderr)
    print(f"load average before / after: {report['loadavg_before']} / {report['loadavg_after']}", file=sys.stderr)
    if args.json:
        print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
