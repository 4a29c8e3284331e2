"""Profiles report: what each vm.* sysctl profile trades, measured by ``python -m sysctl_profiles compare``.

The runs of one experiment carry ``meta.profiles_experiment`` = {id, profile, workload, latency_rate}; the page
shows the latest experiment in the runs (the newest id). Per profile:

- throughput = acknowledged sends ÷ the load window of its unbounded (closed-loop) run;
- send latency (end − start of acknowledged sends) p50 / p99 / p99.9 / max of its half-rate (open-loop) run, by
  percentile_approx over the raw events, and its stalls over time: per 0.5 s window the slowest send; a window
  whose slowest send took STALL_MS or more is a stall;
- writeback, from the host samples of both runs (harness/vm_stats.py): peak and mean Dirty, peak Writeback,
  direct reclaims (allocstall) and major faults during the runs (differences of the cumulative counters);
- the power-loss window, from its ASYNC_FLUSH power-loss cell (chaos.json verdict.per_crash): the commit-log bytes
  of acknowledged messages each power cut took (median and max over the cuts), and the unflushed window at the cut.

One sentence per profile states its trade from these numbers against the ``default`` profile (the machine's own
values) — never written by hand.
"""

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_reports.html_report import Page, ReportOutput, write_csv
from spark_reports.job_runner import Job, submit
from spark_reports.report_io import finish_report, fixed, make_report_dir
from spark_reports.run_records import REFERENCE, RunInfo, discover_runs, load_events, load_metrics

NAME: Final = "profiles"
META_KEY: Final = "profiles_experiment"  # written by sysctl_profiles/compare.py
BASE_PROFILE: Final = "default"
WINDOW_NS: Final = 500_000_000
STALL_MS: Final = 100.0  # a send this slow is a stall a producer notices (RocketMQ's client times out at 3 s)
MIB: Final = 1 << 20


@dataclass(frozen=True)
class ProfileRow:
    """The measurements of one profile (None: that workload did not run or gave nothing)."""

    profile: str
    throughput: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    p999_ms: float | None = None
    max_ms: float | None = None
    stall_windows: int | None = None
    windows: int | None = None
    dirty_peak: float | None = None
    dirty_mean: float | None = None
    writeback_peak: float | None = None
    allocstalls: float | None = None
    majfaults: float | None = None
    cut_median: float | None = None  # bytes of acknowledged data one power cut took (median over cuts)
    cut_max: float | None = None
    window_median: float | None = None  # unflushed bytes at the cut
    cuts: int = 0


# ---- pure parts ----------------------------------------------------------------------------------------


def experiment_runs(runs: Sequence[RunInfo]) -> tuple[str | None, dict[tuple[str, str], RunInfo]]:
    """The newest experiment's id and its runs by (profile, workload) (a rerun of a step: the later run)."""
    tagged = [(r.meta[META_KEY], r) for r in runs if isinstance(r.meta.get(META_KEY), Mapping)]
    if not tagged:
        return None, {}
    latest = max(str(t["id"]) for t, _ in tagged)
    out: dict[tuple[str, str], RunInfo] = {}
    for tag, run in sorted(tagged, key=lambda tr: tr[1].run_id):
        if str(tag["id"]) == latest:
            out[(str(tag["profile"]), str(tag["workload"]))] = run
    return latest, out


def power_cuts(chaos: Mapping[str, Any]) -> tuple[list[int], list[int]]:
    """(bytes lost, unflushed window) per power cut, from chaos.json's verdict.per_crash."""
    per_crash = (chaos.get("verdict") or {}).get("per_crash") or []
    lost = [int(c.get("lost_log_bytes") or 0) for c in per_crash]
    windows = [int(c["window_bytes"]) for c in per_crash if int(c.get("window_bytes", -1)) >= 0]
    return lost, windows


CUT_FLOOR_BYTES: Final = 0.005 * MIB  # a power cut's loss is shown to 0.01 MiB


def ratio(value: float | None, base: float | None, floor: float = 0.0) -> str:
    """``value`` as a multiple of ``base``: "1.8×"; "n/a" when either is missing or base is 0 — or below
    ``floor``, the resolution the figure is shown at (a multiple of a base that rounds to 0 says nothing)."""
    if value is None or base is None:
        return "n/a"
    if base == 0 or abs(base) < floor:
        if abs(value) <= floor:
            return "same"
        return "n/a (default 0)" if base == 0 else "n/a (default ≈ 0)"
    return f"{value / base:.2g}×"


def _mib(value: float | None) -> float | None:
    return None if value is None else value / MIB


def _num(value: float | None, unit: str, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f} {unit}"


def trade_sentence(row: ProfileRow, base: ProfileRow | None) -> str:
    """One sentence: the profile's latency, throughput, writeback and power-loss window against the base."""
    b = base if base is not None and base.profile != row.profile else None

    def vs(value: float | None, base_value: float | None, floor: float = 0.0) -> str:
        return f" ({ratio(value, base_value, floor)} {BASE_PROFILE})" if b is not None else ""

    parts = [
        f"p99 send latency {_num(row.p99_ms, 'ms', 2)}{vs(row.p99_ms, b.p99_ms if b else None)}",
        f"p99.9 {_num(row.p999_ms, 'ms', 2)}{vs(row.p999_ms, b.p999_ms if b else None)}",
        f"{row.stall_windows if row.stall_windows is not None else 'n/a'} of "
        f"{row.windows if row.windows is not None else 'n/a'} half-seconds with a send ≥ {STALL_MS:g} ms",
        f"throughput {_num(row.throughput, 'msg/s', 0)}{vs(row.throughput, b.throughput if b else None)}",
        f"Dirty peaking at {_num(_mib(row.dirty_peak), 'MiB')}{vs(row.dirty_peak, b.dirty_peak if b else None)}",
        f"a power cut took {_num(_mib(row.cut_median), 'MiB', 2)} of acknowledged data (median of {row.cuts})"
        f"{vs(row.cut_median, b.cut_median if b else None, CUT_FLOOR_BYTES)}",
    ]
    return f"{row.profile}: " + ", ".join(parts) + "."


def stall_counts(window_max_ms: Sequence[float]) -> tuple[int, int]:
    """(windows whose slowest send took STALL_MS or more, windows)."""
    return sum(1 for v in window_max_ms if v >= STALL_MS), len(window_max_ms)


def counter_delta(values: Sequence[float]) -> float | None:
    """Increase of a cumulative counter over the run (samples in time order); None without two samples."""
    return values[-1] - values[0] if len(values) >= 2 else None


# ---- Spark and files -----------------------------------------------------------------------------------


def _send_latency(spark: SparkSession, run: RunInfo) -> tuple[list[float] | None, list[tuple[float, float]]]:
    """([p50, p99, p99.9, max] ms, [(window start s, slowest send ms)]) of one run's acknowledged sends."""
    ev = load_events(spark, [run], ["op", "start_ns", "end_ns", "outcome"])
    sends = ev.where((F.col("op") == "send") & (F.col("outcome") == "ok")).select(
        "start_ns", ((F.col("end_ns") - F.col("start_ns")) / 1e6).alias("ms"))
    start = run.meta.get("started_at_ns")
    first = sends.agg(F.min("start_ns")).first()
    t0 = int(start) if isinstance(start, int) else int(first[0] or 0) if first else 0
    whole = sends.agg(F.percentile_approx("ms", [0.5, 0.99, 0.999], 10_000).alias("q"), F.max("ms").alias("mx"),
                      F.count("*").alias("n")).first()
    if whole is None or not whole["n"]:
        return None, []
    q = [float(v) for v in whole["q"]] + [float(whole["mx"])]
    win = (sends.groupBy(F.floor((F.col("start_ns") - F.lit(t0)) / F.lit(WINDOW_NS)).alias("w"))
           .agg(F.max("ms").alias("mx")).orderBy("w").collect())
    return q, [(int(r["w"]) * WINDOW_NS / 1e9, float(r["mx"])) for r in win]


def _throughput(spark: SparkSession, run: RunInfo) -> float | None:
    ev = load_events(spark, [run], ["op", "start_ns", "end_ns", "outcome"])
    r = ev.where((F.col("op") == "send") & (F.col("outcome") == "ok")).agg(
        F.count("*").alias("n"), F.min("start_ns").alias("a"), F.max("end_ns").alias("b")).first()
    if r is None or not r["n"] or r["b"] <= r["a"]:
        return None
    return float(r["n"]) / (float(r["b"] - r["a"]) / 1e9)


def _vm_series(spark: SparkSession, runs: Sequence[RunInfo]) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """Per run id: metric -> [(ts_ns, value)] of the host samples, in time order."""
    wanted = ("host_dirty_bytes", "host_writeback_bytes", "vm_allocstall", "vm_pgmajfault")
    m = load_metrics(spark, runs).where(F.col("metric").isin(*wanted)).select("run_id", "ts_ns", "metric", "value")
    out: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for r in m.orderBy("run_id", "metric", "ts_ns").collect():
        out.setdefault(r["run_id"], {}).setdefault(r["metric"], []).append((int(r["ts_ns"]), float(r["value"])))
    return out


def _read_chaos(run: RunInfo) -> dict[str, Any]:
    path = run.path / "chaos.json"
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    return data


def stall_plot(path: Path, latency: Mapping[str, Sequence[tuple[float, float]]],
               dirty: Mapping[str, Sequence[tuple[float, float]]],
               writeback: Mapping[str, Sequence[tuple[float, float]]]) -> Path:
    """Top: the slowest send per 0.5 s per profile; bottom: Dirty (solid) and Writeback (dashed), MiB."""
    fig = Figure(figsize=(10, 7))
    top, bottom = fig.subplots(2, 1, sharex=True)
    for i, (profile, pts) in enumerate(latency.items()):
        color = f"C{i}"
        top.plot([x for x, _ in pts], [y for _, y in pts], color=color, label=profile, linewidth=1.2)
        d = dirty.get(profile, [])
        w = writeback.get(profile, [])
        bottom.plot([x for x, _ in d], [y / MIB for _, y in d], color=color, label=f"{profile} Dirty", linewidth=1.2)
        bottom.plot([x for x, _ in w], [y / MIB for _, y in w], color=color, linestyle="--",
                    label=f"{profile} Writeback", linewidth=1)
    top.axhline(STALL_MS, color="grey", linestyle=":", linewidth=1)
    top.set_yscale("log")
    top.set_ylabel("slowest send per 0.5 s (ms)")
    top.set_title("Half-rate latency run: stalls over time, and the host's dirty page cache")
    bottom.set_ylabel("MiB")
    bottom.set_xlabel("seconds since the run started")
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
        if ax.lines:
            ax.legend(fontsize="small", ncol=2)
    FigureCanvasAgg(fig)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)
    return path


def run(spark: SparkSession, runs_dir: Path, out_dir: Path, broker: str = REFERENCE) -> ReportOutput:
    all_runs = discover_runs(runs_dir, broker)
    experiment, chosen = experiment_runs(all_runs)
    report_dir = make_report_dir(out_dir, NAME)
    page = Page("vm.* sysctl profiles compared")
    used = sorted(chosen.values(), key=lambda r: r.run_id)
    if experiment is None:
        page.paragraph("No run of a profiles experiment (python -m sysctl_profiles compare) in these runs.",
                       note=True)
        return finish_report(page, report_dir, NAME, [], [])
    profiles = list(dict.fromkeys(p for p, _ in sorted(chosen, key=lambda k: chosen[k].run_id)))
    vm = _vm_series(spark, [r for (_p, w), r in chosen.items() if w in ("throughput", "latency")])
    rows: dict[str, ProfileRow] = {}
    lat_windows: dict[str, list[tuple[float, float]]] = {}
    dirty: dict[str, list[tuple[float, float]]] = {}
    writeback: dict[str, list[tuple[float, float]]] = {}
    for profile in profiles:
        values: dict[str, Any] = {}
        tput = chosen.get((profile, "throughput"))
        if tput is not None:
            values["throughput"] = _throughput(spark, tput)
        lat = chosen.get((profile, "latency"))
        if lat is not None:
            q, wins = _send_latency(spark, lat)
            if q is not None:
                values.update(p50_ms=q[0], p99_ms=q[1], p999_ms=q[2], max_ms=q[3])
                values["stall_windows"], values["windows"] = stall_counts([v for _, v in wins])
                lat_windows[profile] = wins
            t0 = lat.meta.get("started_at_ns")
            series = vm.get(lat.run_id, {})
            if isinstance(t0, int):
                dirty[profile] = [((t - t0) / 1e9, v) for t, v in series.get("host_dirty_bytes", [])]
                writeback[profile] = [((t - t0) / 1e9, v) for t, v in series.get("host_writeback_bytes", [])]
        host = [vm.get(r.run_id, {}) for r in (tput, lat) if r is not None]
        d = [v for s in host for _, v in s.get("host_dirty_bytes", [])]
        wb = [v for s in host for _, v in s.get("host_writeback_bytes", [])]
        if d:
            values.update(dirty_peak=max(d), dirty_mean=statistics.fmean(d))
        if wb:
            values["writeback_peak"] = max(wb)
        for key, metric in (("allocstalls", "vm_allocstall"), ("majfaults", "vm_pgmajfault")):
            deltas = [counter_delta([v for _, v in s.get(metric, [])]) for s in host]
            known = [x for x in deltas if x is not None]
            values[key] = sum(known) if known else None
        cell = chosen.get((profile, "power_loss"))
        if cell is not None:
            lost, windows = power_cuts(_read_chaos(cell))
            if lost:
                values.update(cut_median=statistics.median(lost), cut_max=max(lost), cuts=len(lost))
            if windows:
                values["window_median"] = statistics.median(windows)
        rows[profile] = ProfileRow(profile, **values)
    base = rows.get(BASE_PROFILE)
    rate = next((r.meta[META_KEY].get("latency_rate") for (_p, w), r in chosen.items() if w == "latency"), None)
    page.paragraph(f"Experiment {experiment}: each profile applied in turn (python -m sysctl_profiles compare), "
                   f"the same workloads under each: unbounded throughput, latency at "
                   f"{fixed(rate) if rate else '?'} msg/s (half the first profile's throughput) and an "
                   "ASYNC_FLUSH power-loss cell. Ratios are against the default profile (the machine's values). Dirty "
                   "and Writeback are the whole host's (/proc/meminfo): other writers on the machine count too, "
                   "so read them beside the load average the runs recorded.")
    page.heading("The trade each profile makes")
    for profile in profiles:
        page.paragraph(trade_sentence(rows[profile], base))
    figure = stall_plot(report_dir / "stalls.png", lat_windows, dirty, writeback)
    page.figure(figure.name, "slowest send per half second and the host's Dirty/Writeback, per profile")
    header = ["profile", "throughput (msg/s)", "p50 (ms)", "p99 (ms)", "p99.9 (ms)", "max (ms)",
              f"stall half-seconds (≥ {STALL_MS:g} ms)", "Dirty peak (MiB)", "Dirty mean (MiB)",
              "Writeback peak (MiB)", "direct reclaims", "major faults", "power cuts",
              "taken per cut, median (MiB)", "max (MiB)", "unflushed at cut, median (MiB)"]

    def mib(v: float | None) -> str | None:
        return fixed(_mib(v), 2)

    table = [(r.profile, fixed(r.throughput), fixed(r.p50_ms, 2), fixed(r.p99_ms, 2), fixed(r.p999_ms, 2),
              fixed(r.max_ms, 1), None if r.windows is None else f"{r.stall_windows} of {r.windows}",
              mib(r.dirty_peak), mib(r.dirty_mean), mib(r.writeback_peak), fixed(r.allocstalls),
              fixed(r.majfaults), r.cuts, mib(r.cut_median), mib(r.cut_max), mib(r.window_median))
             for r in rows.values()]
    page.heading("Measurements")
    page.table(header, table, text_columns=1)
    settings = sorted({k for r in used for k in ((r.meta.get("sysctl") or {}).get("values") or {})})
    by_profile = {p: next(((r.meta.get("sysctl") or {}) for (pp, _w), r in chosen.items() if pp == p), {})
                  for p in profiles}
    page.heading("Values in force")
    page.table(["key", *profiles],
               [(k, *(str((by_profile[p].get("values") or {}).get(k, "")) for p in profiles)) for k in settings],
               text_columns=len(profiles) + 1)
    files = [write_csv(report_dir / "profiles.csv", header, table)]
    return finish_report(page, report_dir, NAME, used, files, link_csvs=True)


JOB: Final = Job(NAME, run)

if __name__ == "__main__":
    submit(JOB)
