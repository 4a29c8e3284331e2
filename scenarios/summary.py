"""The one-screen summary of a run, computed from its record (never from locust's rounded statistics).

Latencies from the events' nanosecond times: send (end - start of acknowledged sends), publish delay
(start - intended: the coordinated-omission view of an open-loop run), end to end (a delivery's end - the
start of the send of the same key, first delivery per key). Percentiles are exact (nearest rank). Rates over
the window the sends (receives) actually span. Broker figures from the metrics; the scenario's own findings
(backlog build/drain, phases) from meta.json ``results``; the verdict from check.json.
"""

# pyarrow ships no type information; its names are Any here.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from harness.records import RunRecordError, load_events, load_meta, load_metrics

PERCENTILES: Final = (50.0, 90.0, 99.0, 99.9)
_COLUMNS: Final = ["op", "key", "topic", "intended_ns", "start_ns", "end_ns", "outcome", "bytes"]


def percentiles_ms(ns: npt.NDArray[np.int64]) -> dict[str, float] | None:
    """Nearest-rank percentiles and max of nanosecond durations, in ms; None without samples."""
    if len(ns) == 0:
        return None
    s = np.sort(ns)
    out: dict[str, float] = {"n": float(len(s))}
    for p in PERCENTILES:
        k = max(0, min(len(s) - 1, math.ceil(round(p * len(s) / 100, 9)) - 1))
        out[f"p{p:g}"] = float(s[k]) / 1e6
    out["max"] = float(s[-1]) / 1e6
    out["mean"] = float(s.mean()) / 1e6
    return out


def _np(col: pa.ChunkedArray) -> npt.NDArray[Any]:
    return np.asarray(col.to_numpy())


def _rate(n: int, first_ns: int, last_ns: int) -> float | None:
    span = (last_ns - first_ns) / 1e9
    return n / span if n and span > 0 else None


def _latency_block(sends: pa.Table, receives: pa.Table) -> dict[str, Any]:
    ok = sends.filter(pc.equal(sends["outcome"], "ok"))
    start = _np(ok["start_ns"])
    out: dict[str, Any] = {
        "send": percentiles_ms(_np(ok["end_ns"]) - start),
        "publish_delay": percentiles_ms(start - _np(ok["intended_ns"])),
        "end_to_end": None,
    }
    if receives.num_rows and sends.num_rows:
        first_send = sends.group_by("key").aggregate([("start_ns", "min")]).rename_columns(["key", "send_start"])
        first_rx = receives.group_by("key").aggregate([("end_ns", "min")]).rename_columns(["key", "rx_end"])
        joined = first_rx.join(first_send, "key", join_type="inner")
        out["end_to_end"] = percentiles_ms(_np(joined["rx_end"]) - _np(joined["send_start"]))
    return out


def _counts(sends: pa.Table, receives: pa.Table) -> dict[str, Any]:
    outcome = _np(sends["outcome"]) if sends.num_rows else np.array([], dtype=object)
    ok_mask = outcome == "ok"
    out: dict[str, Any] = {
        "attempted": int(sends.num_rows), "ok": int(ok_mask.sum()), "fail": int((outcome == "fail").sum()),
        "unknown": int((outcome == "unknown").sum()), "received": int(receives.num_rows),
        "send_rate": None, "consume_rate": None,
    }
    if ok_mask.any():
        start, end = _np(sends["start_ns"])[ok_mask], _np(sends["end_ns"])[ok_mask]
        out["send_rate"] = _rate(int(ok_mask.sum()), int(start.min()), int(end.max()))
        out["ok_bytes"] = int(_np(sends["bytes"])[ok_mask].sum())
    if receives.num_rows:
        end = _np(receives["end_ns"])
        out["consume_rate"] = _rate(receives.num_rows, int(end.min()), int(end.max()))
    return out


def _metrics_block(run_dir: Path) -> dict[str, Any]:
    try:
        m = load_metrics(run_dir)
    except (RunRecordError, OSError, pa.ArrowException):
        return {}
    if m.num_rows == 0:
        return {}
    metric, value, label = _np(m["metric"]), _np(m["value"]), _np(m["label"])

    def series(name: str, lab: str | None = None) -> npt.NDArray[np.float64]:
        mask = metric == name
        if lab is not None:
            mask &= label == lab
        return np.asarray(value[mask], dtype=np.float64)

    out: dict[str, Any] = {}
    cl_max, cl_flushed = series("commitlog_max_offset"), series("commitlog_flushed_offset")
    if len(cl_max):
        out["commitlog_written_bytes"] = float(cl_max.max() - cl_max.min())
    if len(cl_max) and len(cl_max) == len(cl_flushed):
        out["unflushed_max_bytes"] = float((cl_max - cl_flushed).max())
    for key, name in (("dispatch_lag_max_bytes", "dispatch_lag_bytes"), ("rss_max_bytes", "broker_rss_bytes"),
                      ("disk_used_max_ratio", "disk_used_ratio"), ("backlog_max_msgs", "backlog_msgs"),
                      ("send_tps_max", "send_tps"), ("consume_tps_max", "consume_tps")):
        s = series(name)
        if len(s):
            out[key] = float(s.max())
    pc_cl = series("page_cache_bytes", "commitlog")
    if len(pc_cl):
        out["commitlog_page_cache_max_bytes"] = float(pc_cl.max())
    return out


def summarize(run_dir: str | Path, check: dict[str, Any] | None = None) -> dict[str, Any]:
    root = Path(run_dir)
    meta = load_meta(root)
    try:
        ev = load_events(root, columns=_COLUMNS)
    except (RunRecordError, OSError, pa.ArrowException):
        ev = pa.table({c: pa.array([], pa.int64() if c.endswith("_ns") or c == "bytes" else pa.string())
                       for c in _COLUMNS})
    sends = ev.filter(pc.equal(ev["op"], "send"))
    receives = ev.filter(pc.and_(pc.equal(ev["op"], "receive"), pc.equal(ev["outcome"], "ok")))
    params = meta.get("params", {})
    started, ended = meta.get("started_at_ns"), meta.get("ended_at_ns")
    out: dict[str, Any] = {
        "run_id": meta.get("run_id"), "run_dir": str(root), "scenario": meta.get("scenario"),
        "duration_s": (ended - started) / 1e9 if started and ended else None,
        "broker_impl": meta.get("broker_impl"), "broker": meta.get("broker", {}),
        "embedded": meta.get("topology", {}).get("embedded"),
        "sysctl": {k: meta.get("sysctl", {}).get(k) for k in ("profile", "applied", "reason")},
        "fio": meta.get("fio"), "params": params,
        "counts": _counts(sends, receives), "latency_ms": _latency_block(sends, receives),
        "metrics": _metrics_block(root), "results": meta.get("results", {}), "check": check,
        "recorded": bool(params.get("record", True)),
    }
    phases = meta.get("phases") or []
    if len(phases) > 1:
        rows = []
        for ph in phases:
            topics = pa.array([t for t, _q in ph["topics"]], pa.string())
            s = sends.filter(pc.is_in(sends["topic"], value_set=topics))
            r = receives.filter(pc.is_in(receives["topic"], value_set=topics))
            rows.append({"label": ph["label"], "queues": sum(q for _t, q in ph["topics"]),
                         "topics": len(ph["topics"]), "counts": _counts(s, r), "latency_ms": _latency_block(s, r)})
        out["phases"] = rows
    return out


# ---- text -------------------------------------------------------------------------------------------------


def _n(x: float | None, unit: str = "") -> str:
    return "-" if x is None else f"{x:,.0f}{unit}"


def _mib(x: float | None) -> str:
    return "-" if x is None else f"{x / 2**20:,.1f} MiB"


def _pct_row(name: str, p: dict[str, float] | None) -> str:
    if not p:
        return f"  {name:<15}{'-':>9}"
    cells = "".join(f"{p[f'p{q:g}']:>9.2f}" for q in PERCENTILES)
    return f"  {name:<15}{cells}{p['max']:>9.2f}{int(p['n']):>11,}"


def format_summary(s: dict[str, Any]) -> str:
    p, c, m, res = s["params"], s["counts"], s["metrics"], s["results"]
    broker = s["broker"]
    mode = (f"open loop {p.get('rate', 0):,.0f} msg/s" if p.get("rate") else "max rate (closed loop)")
    sysctl = s["sysctl"]
    sysctl_text = sysctl.get("profile") or "unchanged"
    if sysctl.get("profile"):
        sysctl_text += " (applied)" if sysctl.get("applied") else f" (NOT applied: {sysctl.get('reason')})"
    lines = [
        f"== {s['scenario']} run {s['run_id']} -> {s['run_dir']}",
        f"broker  {s.get('broker_impl') or '?'}, {broker.get('flushDiskType', '?')}, "
        f"{'embedded' if s.get('embedded') else 'name server ' + str(p.get('namesrv'))}; sysctl {sysctl_text}"
        + _fio_text(s.get("fio")),
        f"load    {mode}, {p.get('message_size')} B messages, batch {p.get('batch')}, "
        f"{'sync' if p.get('sync') else 'async'} sends, {res.get('load', {}).get('processes') or 1} process(es), "
        f"{p.get('users')} user(s), {s['duration_s'] or 0:.1f} s",
    ]
    if not s["recorded"]:
        load = res.get("load", {})
        lines.append(f"sends   {load.get('ok', 0):,} ok at {_n(load.get('send_rate'))} msg/s (events not recorded: "
                     f"--no-record), {load.get('received', 0):,} deliveries")
        lines.append("check   skipped (nothing recorded)")
        return "\n".join(lines)
    lines += [
        f"sends   {c['attempted']:,} attempted: {c['ok']:,} ok, {c['fail']:,} fail, {c['unknown']:,} unknown; "
        f"{c['received']:,} deliveries",
        f"rates   send {_n(c['send_rate'])} msg/s acknowledged, consume {_n(c['consume_rate'])} msg/s",
        "latency ms       " + "".join(f"{'p' + format(q, 'g'):>9}" for q in PERCENTILES) + f"{'max':>9}{'n':>11}",
        _pct_row("send", s["latency_ms"]["send"]),
        _pct_row("publish delay", s["latency_ms"]["publish_delay"]),
        _pct_row("end to end", s["latency_ms"]["end_to_end"]),
    ]
    for ph in s.get("phases", []):
        pc_, pl = ph["counts"], ph["latency_ms"]
        send_p99 = (pl["send"] or {}).get("p99", float("nan"))
        e2e_p99 = (pl["end_to_end"] or {}).get("p99", float("nan"))
        lines.append(f"  phase {ph['label']:<10} {ph['queues']:>6,} queues: send {_n(pc_['send_rate'])} msg/s, "
                     f"p99 send {send_p99:.2f} ms, p99 e2e {e2e_p99:.2f} ms")
    if "backlog" in res:
        lines += _backlog_text(res["backlog"])
    if m:
        lines.append(f"broker  commit log +{_mib(m.get('commitlog_written_bytes'))}, unflushed max "
                     f"{_mib(m.get('unflushed_max_bytes'))}, dispatch lag max {_mib(m.get('dispatch_lag_max_bytes'))},"
                     f" RSS max {_mib(m.get('rss_max_bytes'))}, backlog max {_n(m.get('backlog_max_msgs'))} msgs")
    drain = res.get("drain_at_end")
    if drain:
        lines.append(f"end     drained in {drain['waited_s']:.1f} s ({drain['reason']})")
    read = res.get("final_read")
    if read and read.get("wanted"):
        lines.append(f"end     final read: {read['found']:,} of {read['wanted']:,} acknowledged, unreceived messages "
                     f"still served by the broker ({read['pulls']:,} pulls, {read['seconds']:.1f} s"
                     + ("" if read.get("complete", True) else "; incomplete: " + "; ".join(read["problems"][:2]))
                     + ")")
    lines.append(_check_text(s.get("check"), p))
    for key in ("controller_error", "end_error", "load_errors", "finish_error", "check_error"):
        if res.get(key):
            lines.append(f"ERROR   {key}: {res[key]}")
    return "\n".join(lines)


def _fio_text(fio: dict[str, Any] | None) -> str:
    if not fio:
        return ""
    if "skipped" in fio:
        return f"; fio skipped ({fio['skipped']})"
    seq = fio.get("seq_write_bytes_per_s")
    return (f"; fio: seq write {_mib(seq)}/s, 4k fdatasync {_n(fio.get('fdatasync_4k_iops'))} IOPS, "
            f"4k randread {_n(fio.get('randread_4k_iops'))} IOPS")


def _backlog_text(b: dict[str, Any]) -> list[str]:
    if "build_s" not in b:
        return [f"backlog not built: {b.get('note', 'the run ended first')}"]
    out = [f"backlog built {_mib(b.get('backlog_bytes'))} ({b.get('backlog_msgs', 0):,} msgs, broker) in "
           f"{b['build_s']:.2f} s (target {_mib(b.get('target_bytes'))}; "
           f"{b.get('client_backlog_at_pause_msgs', 0):,} msgs behind at the pause)"]
    if "drain_s" in b:
        out.append(f"        drained in {b['drain_s']:.2f} s: {_n(b.get('drain_rate_msgs'))} msg/s net, "
                   f"{_n(b.get('consume_rate_msgs'))} msg/s consumed; read from {b.get('read_from', '?')}")
    else:
        out.append(f"        not drained: {b.get('note', 'the run ended first')}")
    cold = b.get("cold")
    if cold:
        if not cold.get("dropped"):
            out.append(f"        cold: page cache NOT dropped ({cold.get('reason')})")
        else:
            after = (cold.get("page_cache_after_drop") or {}).get("ratio")
            share = "?" if after is None else f"{after:.0%}"
            note = f" ({cold['reason']})" if cold.get("reason") else ""
            out.append(f"        cold: broker's store mappings paged out and page cache dropped; {share} of the "
                       f"backlog's commit-log bytes still resident{note}")
    return out


def _check_text(check: dict[str, Any] | None, params: dict[str, Any]) -> str:
    if check is None:
        if params.get("consumers") == 0:
            return "check   skipped (no consumers: --consumers 0)"
        return "check   not run"
    verdict = "VALID" if check.get("valid") else "INVALID"
    unread = f" ({check['unread']:,} unread: served at the end, never delivered)" if check.get("unread") else ""
    return (f"check   {verdict}: {check.get('acknowledged', 0):,} acknowledged, {check.get('lost', 0):,} lost{unread}, "
            f"{check.get('unexpected', 0):,} unexpected, {check.get('duplicated', 0):,} duplicated, "
            f"{check.get('unknown', 0):,} unknown ({check.get('recovered', 0):,} recovered)")
