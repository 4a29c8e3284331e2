"""Host facts for benchmark results, and the plain-text table of a store benchmark result.

This module owns how a result is shown to a person; the figures themselves come from
``store_bench`` as a dict (the ``--json`` output), so the table can be rebuilt from saved JSON.
"""

from __future__ import annotations

import os
import platform
import resource
from pathlib import Path
from typing import Any


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _cpu_model() -> str | None:
    text = _read(Path("/proc/cpuinfo")) or ""
    for line in text.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or None


def _mem_total_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None


def mount_of(path: Path) -> dict[str, str] | None:
    """The /proc/self/mounts entry (device, mount point, fs type) holding ``path``."""
    text = _read(Path("/proc/self/mounts"))
    if text is None:
        return None
    real = os.path.realpath(path)
    best: dict[str, str] | None = None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        mnt = parts[1].replace("\\040", " ")
        inside = real == mnt or real.startswith(mnt.rstrip("/") + "/")
        if inside and (best is None or len(mnt) >= len(best["mount_point"])):
            best = {"device": parts[0], "mount_point": mnt, "fs_type": parts[2]}
    return best


def read_ahead_kb(device: str) -> int | None:
    """The block device's read-ahead (it decides how much a first touch of an mmap'd file reads)."""
    if not device.startswith("/dev/"):
        return None
    node = Path("/sys/class/block") / Path(os.path.realpath(device)).name
    for cand in (node / "queue" / "read_ahead_kb", node.resolve().parent / "queue" / "read_ahead_kb"):
        text = _read(cand)
        if text is not None and text.isdigit():
            return int(text)
    return None


def host_info(directory: Path) -> dict[str, Any]:
    mount = mount_of(directory) or {}
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return {
        "python_version": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "machine": {
            "arch": platform.machine(),
            "system": platform.system(),
            "kernel": platform.release(),
            "python_implementation": platform.python_implementation(),
            "cpu_model": _cpu_model(),
            "mem_total_bytes": _mem_total_bytes(),
            "store_dir": str(directory),
            "fs_type": mount.get("fs_type"),
            "device": mount.get("device"),
            "read_ahead_kb": read_ahead_kb(mount.get("device", "")),
            "nofile_limit": None if soft == resource.RLIM_INFINITY else soft,
            "nofile_hard_limit": None if hard == resource.RLIM_INFINITY else hard,
        },
    }


# ---- the table -----------------------------------------------------------------------------------

def _num(v: float | None, unit: str = "", digits: int = 0) -> str:
    return "n/a" if v is None else f"{v:,.{digits}f}{unit}"


def _mbps(v: float | None) -> str:
    return "n/a" if v is None else f"{v / 1e6:,.1f} MB/s"


def _metric(name: str, v: float | None) -> str:
    if v is None:
        return "not measured"
    if name.endswith("bytes_per_s"):
        return _mbps(v)
    if name.endswith("msgs_per_s"):
        return _num(v, " msg/s")
    if name.endswith("_s"):
        return _num(v, " s", 3)
    return _num(v, "", 3)


def _row(label: str, value: str, note: str = "") -> str:
    return f"  {label:<44} {value:>16}  {note}".rstrip()


def format_table(r: dict[str, Any]) -> str:
    """The result as a plain-text report (no third-party dependency)."""
    m = r.get("machine", {})
    lines = [
        f"RocketMQ store benchmark ({'quick' if r.get('quick') else 'full'}"
        f"{'' if r.get('scale', 1) == 1 else ', scale ' + str(r['scale'])}) — "
        f"{r.get('cpu_count')} CPUs, Python {r.get('python_version')}, {m.get('fs_type')} on {m.get('store_dir')}, "
        f"{r.get('wall_s')} s",
        "",
        "Device baseline (fio)",
    ]
    fio = r.get("fio")
    if r.get("fio_skipped_reason"):
        lines.append(f"  skipped: {r['fio_skipped_reason']}")
    else:
        p50 = fio.get("fdatasync_4k_p50_us") if fio else None
        lines += [
            _row("sequential write 1M, buffered + end_fsync", _mbps(r.get("fio_seq_write_bytes_per_s"))),
            _row("4 KiB write + fdatasync", _num(r.get("fio_fdatasync_4k_iops"), " IOPS"),
                 f"p50 {p50:,.0f} µs" if p50 is not None else ""),
            _row("4 KiB random read, direct", _num(r.get("fio_randread_4k_iops"), " IOPS"),
                 fio.get("randread_ioengine", "") if fio else ""),
        ]
        for err in (fio or {}).get("errors", []):
            lines.append(f"  error: {err}")
    a = r.get("append_async", {}).get("keyed", {})
    lines += [
        "",
        f"Append, ASYNC_FLUSH, one writer, {r.get('message_body_bytes')} B body ({a.get('messages', 0):,} messages, "
        f"median of {len(a.get('rounds', []))} rounds)",
        _row("TAGS + UNIQ_KEY: put", _num(r.get("append_async_msgs_per_s"), " msg/s")),
        _row("TAGS + UNIQ_KEY: until dispatched", _num(r.get("append_async_dispatched_msgs_per_s"), " msg/s")),
        _row("TAGS only: put", _num(r.get("append_async_nokey_msgs_per_s"), " msg/s")),
        _row("TAGS only: until dispatched", _num(r.get("append_async_nokey_dispatched_msgs_per_s"), " msg/s")),
        _row("TAGS + UNIQ_KEY, no whole-record CRC: put", _num(r.get("append_async_no_prop_crc_msgs_per_s"), " msg/s"),
             f"with CRC / without: {r['prop_crc_vs_none_ratio']:.2f}" if r.get("prop_crc_vs_none_ratio") else ""),
        _row("TAGS + UNIQ_KEY, dispatch in its own process: put",
             _num(r.get("append_async_process_msgs_per_s"), " msg/s")),
        _row("TAGS + UNIQ_KEY, dispatch in its own process: until dispatched",
             _num(r.get("append_async_process_dispatched_msgs_per_s"), " msg/s")),
        "",
        "Append, SYNC_FLUSH (group commit), TAGS + UNIQ_KEY",
    ]
    for threads, s in r.get("append_sync", {}).items():
        note = f"{s['flush_timeouts']} flush timeouts" if s.get("flush_timeouts") else ""
        lines.append(_row(f"{threads} writer thread(s)", _num(s.get("msgs_per_s"), " msg/s"), note))
    lines.append(_row("64 writers / async", _num(r.get("sync64_vs_async_ratio"), "", 3)))
    many = r.get("queues_many", 10_000)
    lines += ["", "Dispatch fan-out, ASYNC_FLUSH, TAGS only (put until dispatched)"]
    for count, q in r.get("queues", {}).items():
        label = f"{int(count):,} queue(s)"
        if q.get("skipped_reason"):
            lines.append(_row(label, "skipped", q["skipped_reason"]))
        else:
            note = f"warm-up creating the queues: {q['create_s']:.2f} s" if int(count) > 1 else ""
            lines.append(_row(label, _num(q.get("msgs_per_s"), " msg/s"), note))
    lines.append(_row(f"{many:,} queues / 1 queue", _num(r.get(f"queues_{many}_vs_1_ratio"), "", 3)))
    lines += ["", "Recovery, load() + start(), 1 GiB commit-log files, warm page cache",
              "  crash = killed 32 MiB past the last checkpoint; 'ckpt offset' restarts at the checkpoint's",
              "  recorded offset (ours), '4.9.8 rule' at the newest file older than the checkpoint's time",
              f"  {'log':>6} {'messages':>11} {'normal':>9} {'ckpt offset':>12} {'(re-disp.)':>11} "
              f"{'4.9.8 rule':>11} {'(re-disp.)':>11} {'full scan':>10} {'scan rate':>11}"]
    for label, rec in r.get("recovery", {}).items():
        lines.append(f"  {label:>6} {rec['messages']:>11,} {rec['normal_s']:>8.3f}s "
                     f"{rec['abnormal_checkpoint_s']:>11.3f}s {rec['abnormal_checkpoint_redispatched_msgs']:>11,} "
                     f"{rec['abnormal_checkpoint_rocketmq_rule_s']:>10.3f}s "
                     f"{rec['abnormal_checkpoint_rocketmq_rule_redispatched_msgs']:>11,} "
                     f"{rec['full_scan_s']:>9.3f}s "
                     f"{_mbps(rec['full_scan_bytes_per_s']):>11}")
    lines += ["", "Targets"]
    for t in r.get("targets", {}).values():
        mark = {True: "MET ", False: "MISS", None: " -- "}[t["met"]]
        lines.append(f"  [{mark}] {t['description']}: {_metric(t['metric'], t['value'])}")
    return "\n".join(lines)
