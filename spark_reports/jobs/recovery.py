"""Recovery report: how long the broker takes to restart, against the commit log's size, per way of stopping.

Reads the runs of scenario "recovery" (``python -m chaos recovery-bench``): meta.json ``results.recovery`` is a
list of rows {log_bytes, case, unflushed_bytes, checkpoint, recovery_s}, four per log size, written in the
bench's order (clean, kill9-flushed, kill9-tail, kill9-no-checkpoint). A row's log_bytes is the log's end when
it was stopped (the tail case adds a burst), so rows are assigned to the log size they belong to by that
order, and named by the size asked for (meta params ``sizes_mib``) when the run states it.

Judges RECOVERY_CHECKPOINT (docs/claims.md): after kill -9 with the checkpoint, recovery scans only from the
checkpoint, so its time should not grow with the log; without the checkpoint it scans the whole log, which
grows with the log and is slower. The rule is in ``judge`` and its constants. A row that carries the store's
own timing of its start (``phases``, ``work_s``: reference_broker.common.start_phases) is judged on the recovery
work itself — scanning the log's tail and dispatching what the queues lack — rather than on process start to
boot line, which adds the interpreter's start and the files' loading (noise on a busy machine).
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_reports.claims import ClaimId, Finding, Verdict, settle
from spark_reports.html_report import Page, ReportOutput, write_csv
from spark_reports.job_runner import Job, submit
from spark_reports.report_io import finish_report, make_report_dir
from spark_reports.run_records import REFERENCE, RunInfo, discover_runs
from spark_reports.xy_plots import xy_plot

NAME: Final = "recovery"
SCENARIO: Final = "recovery"
MIB: Final = 1 << 20
CLEAN: Final = "clean"
KILL9_FLUSHED: Final = "kill9-flushed"
KILL9_TAIL: Final = "kill9-tail"
NO_CHECKPOINT: Final = "kill9-no-checkpoint"
CASES: Final = (CLEAN, KILL9_FLUSHED, KILL9_TAIL, NO_CHECKPOINT)
WITH_CHECKPOINT: Final = (KILL9_FLUSHED, KILL9_TAIL)
# A checkpointed kill -9 restart "does not grow with the log" when, at the largest log, it takes at most
# FLAT_RATIO × its time at the smallest, or at most FLAT_ABS_S outright (starting the broker's Python
# process and loading its files is a fixed cost of a few tenths of a second here, so small times jitter).
FLAT_RATIO: Final = 1.5
FLAT_ABS_S: Final = 1.0
# The restart without a checkpoint "grows with the log and is slower" when, at the largest log, it takes at
# least GROWTH_RATIO × its time at the smallest, and at least SLOWER_RATIO × the slowest checkpointed kill -9
# restart at the largest log: both margins sit above the run-to-run jitter of the fixed start-up cost.
GROWTH_RATIO: Final = 1.25
SLOWER_RATIO: Final = 1.25
# Growth with the log is visible only over a wide enough range of sizes.
MIN_SIZE_SPAN: Final = 2.0
# Judged on the store's recovery work, the fixed cost is gone: "does not grow" allows this much outright.
FLAT_ABS_WORK_S: Final = 0.25


@dataclass(frozen=True)
class Row:
    run_id: str
    size_mib: int  # the log size this row belongs to (asked for, or measured at the clean stop)
    case: str
    log_bytes: int
    unflushed_bytes: int
    checkpoint: bool
    recovery_s: float
    work_s: float | None = None  # the store's recovery work (None: the broker reports no phases)
    phases: tuple[tuple[str, float], ...] = ()


def rows_of(run: RunInfo) -> list[Row]:
    """The run's rows, each assigned to its log size by the bench's order (a new size starts at "clean" or
    when a case repeats)."""
    raw: list[dict[str, Any]] = list((run.meta.get("results") or {}).get("recovery") or [])
    blocks: list[list[dict[str, Any]]] = []
    for item in raw:
        if not blocks or item.get("case") == CLEAN or any(x.get("case") == item.get("case") for x in blocks[-1]):
            blocks.append([])
        blocks[-1].append(item)
    asked = (run.meta.get("params") or {}).get("sizes_mib")
    named = list(asked) if isinstance(asked, list) and len(asked) == len(blocks) else None
    out: list[Row] = []
    for i, block in enumerate(blocks):
        size = int(named[i]) if named else round(min(int(x["log_bytes"]) for x in block) / MIB)
        out.extend(Row(run.run_id, size, str(x["case"]), int(x["log_bytes"]), int(x.get("unflushed_bytes") or 0),
                       bool(x.get("checkpoint", True)), float(x["recovery_s"]),
                       float(x["work_s"]) if x.get("work_s") is not None else None,
                       tuple((str(k), float(v)) for k, v in (x.get("phases") or {}).items())) for x in block)
    return out


@dataclass(frozen=True)
class Cell:
    """One log size × case over the runs: medians of the restart time, mean log size."""

    size_mib: int
    case: str
    runs: int
    log_bytes: float
    unflushed_bytes: float
    median_s: float
    max_s: float
    work_median_s: float | None = None  # median of the store's recovery work; None when no row has it


def aggregate(spark: SparkSession, rows: list[Row]) -> list[Cell]:
    df = spark.createDataFrame(
        [(r.run_id, r.size_mib, r.case, r.log_bytes, r.unflushed_bytes, r.recovery_s, r.work_s) for r in rows],
        "run_id string, size_mib int, case string, log_bytes long, unflushed long, recovery_s double, work_s double")
    agg = df.groupBy("size_mib", "case").agg(
        F.countDistinct("run_id").alias("runs"), F.avg("log_bytes").alias("log_bytes"),
        F.avg("unflushed").alias("unflushed"), F.median("recovery_s").alias("median"),
        F.max("recovery_s").alias("max"), F.median("work_s").alias("work_median"))
    order = {c: i for i, c in enumerate(CASES)}
    cells = [Cell(int(r["size_mib"]), r["case"], int(r["runs"]), float(r["log_bytes"]), float(r["unflushed"]),
                  float(r["median"]), float(r["max"]),
                  None if r["work_median"] is None else float(r["work_median"])) for r in agg.collect()]
    return sorted(cells, key=lambda c: (c.size_mib, order.get(c.case, len(order)), c.case))


def judge(cells: list[Cell], run_ids: tuple[str, ...], clean_phases: dict[str, float] | None = None) -> Finding:
    """RECOVERY_CHECKPOINT from the medians at the smallest and the largest log size that have the cases: of
    the store's recovery work when every cell has it, else of the restart time. ``clean_phases``: the clean
    stop's start phases at the largest log, to name what in it grows."""
    claim = ClaimId.RECOVERY_CHECKPOINT
    by_work = bool(cells) and all(c.work_median_s is not None for c in cells)
    t = {(c.size_mib, c.case): (c.work_median_s if by_work and c.work_median_s is not None else c.median_s)
         for c in cells}
    flat_abs = FLAT_ABS_WORK_S if by_work else FLAT_ABS_S
    what = "recovery work" if by_work else "restart"
    sizes = sorted({c.size_mib for c in cells if (c.size_mib, NO_CHECKPOINT) in t
                    and any((c.size_mib, k) in t for k in WITH_CHECKPOINT)})
    if not cells:
        return Finding(claim, Verdict.NOT_MEASURED, "no run", NAME, run_ids,
                       "No recovery-bench run (python -m chaos recovery-bench).")
    if len(sizes) < 2:
        return Finding(claim, Verdict.NOT_MEASURED, f"one log size measured ({', '.join(map(str, sizes)) or '–'} MiB)",
                       NAME, run_ids, "Growth with the log size needs at least two log sizes with the kill -9 cases "
                       "(python -m chaos recovery-bench --sizes 64,256,1024).")
    small, large = sizes[0], sizes[-1]
    if large < MIN_SIZE_SPAN * small:
        return Finding(claim, Verdict.NOT_MEASURED, f"log sizes {small}–{large} MiB too close", NAME, run_ids,
                       f"The largest log must be at least {MIN_SIZE_SPAN:g} × the smallest to show growth.")
    cp = [k for k in WITH_CHECKPOINT if (small, k) in t and (large, k) in t]
    flat = {k: t[(large, k)] <= max(FLAT_RATIO * t[(small, k)], flat_abs) for k in cp}
    n_small, n_large = t[(small, NO_CHECKPOINT)], t[(large, NO_CHECKPOINT)]
    slowest_cp = max(t[(large, k)] for k in WITH_CHECKPOINT if (large, k) in t)
    grows = n_large >= GROWTH_RATIO * n_small
    slower = n_large >= SLOWER_RATIO * slowest_cp
    held = bool(cp) and all(flat.values()) and grows and slower
    cp_text = "; ".join(f"{k} {t[(small, k)]:.2f} → {t[(large, k)]:.2f} s"
                        + ("" if flat[k] else " (grows)") for k in cp)
    measured = (f"{what} from {small} to {large} MiB of log: with the checkpoint "
                f"{cp_text or 'no case at both sizes'}; without it {n_small:.2f} → {n_large:.2f} s "
                f"(×{n_large / max(n_small, 1e-9):.2f}, ×{n_large / max(slowest_cp, 1e-9):.2f} the slowest "
                f"checkpointed {what} at {large} MiB)")
    if (large, CLEAN) in t:
        measured += f"; clean stop {t[(large, CLEAN)]:.2f} s at {large} MiB"
        if clean_phases:
            top = max(clean_phases, key=lambda k: clean_phases[k])
            measured += (f" (its largest phase: {top} {clean_phases[top]:.2f} s"
                         + (", the normal recovery's re-read of the log's last three files, as 4.9.8's "
                            "recoverNormally does" if top == "recoverCommitLog" else "") + ")")
    failed = [f"{k} grows with the log" for k, ok in flat.items() if not ok]
    if not grows:
        failed.append(f"the restart without checkpoint grows less than ×{GROWTH_RATIO:g}")
    if not slower:
        failed.append(f"it is not ×{SLOWER_RATIO:g} slower than with the checkpoint")
    basis = ("Times are the store's own timing of its recovery work (scanning the log's tail and dispatching "
             "what the consume queues lack: reference_broker.common.start_phases), without the process's start."
             if by_work else "Times run from the broker process's start to its boot line, so they include a "
             "fixed start-up cost (the clean stop's restart shows it).")
    detail = (f"Medians over the runs at the smallest ({small} MiB) and largest ({large} MiB) log. Held when each "
              f"checkpointed kill -9 {what} at the largest log takes ≤ {FLAT_RATIO:g} × its time at the smallest "
              f"or ≤ {flat_abs:g} s (does not grow), and the {what} without checkpoint takes ≥ {GROWTH_RATIO:g} × "
              f"its time at the smallest (grows) and ≥ {SLOWER_RATIO:g} × the slowest checkpointed one at the "
              f"largest (slower). {basis}")
    if failed:
        detail += " Not shown: " + "; ".join(failed) + "."
    figures = {"small_mib": float(small), "large_mib": float(large), "no_checkpoint_small_s": n_small,
               "no_checkpoint_large_s": n_large, **{f"{k}_large_s": t[(large, k)] for k in cp},
               **{f"{k}_small_s": t[(small, k)] for k in cp},
               # What the verdict turns on first: how much the checkpointed recovery grows with the log.
               "checkpointed_growth": max((t[(large, k)] / max(t[(small, k)], 1e-9) for k in cp), default=0.0)}
    return Finding(claim, Verdict.HELD if held else Verdict.NOT_HELD, measured, NAME, run_ids, detail, figures)


def run(spark: SparkSession, runs_dir: Path, out_dir: Path, broker: str = REFERENCE) -> ReportOutput:
    runs = [r for r in discover_runs(runs_dir, broker) if r.scenario == SCENARIO]
    report_dir = make_report_dir(out_dir, NAME)
    rows = [row for r in runs for row in rows_of(r)]
    cells = aggregate(spark, rows) if rows else []
    used = tuple(sorted({r.run_id for r in rows}))
    finding = judge(cells, used, _clean_phases(rows))
    by_run: dict[str, list[Row]] = {}
    for row in rows:
        by_run.setdefault(row.run_id, []).append(row)
    if len(by_run) > 1:  # each run judged alone too: runs that disagree make the claim unsettled
        finding = settle(finding, {rid: judge(aggregate(spark, rr), (rid,)) for rid, rr in by_run.items()})

    page = Page("Recovery: restart time against the commit log's size")
    page.paragraph(
        "From python -m chaos recovery-bench: for each log size, a fresh ASYNC_FLUSH store is filled and the broker "
        "restarted four ways: after a clean stop, after kill -9 with the flush caught up, after kill -9 right after "
        "a burst (an unflushed tail), and after kill -9 with the checkpoint file removed. Restart time runs from "
        "the process start to the broker's boot line; the recovery work is the store's own timing of its tail scan and "
        "dispatch (the claim is judged on it when the broker reports it). Medians over the runs per log size and case.")
    cell_rows = [(str(c.size_mib), c.case, c.runs, c.log_bytes / MIB, c.unflushed_bytes / 1024, c.median_s, c.max_s,
                  "–" if c.work_median_s is None else f"{c.work_median_s:.3f}") for c in cells]
    page.heading("Restart time per log size and case")
    if cell_rows:
        page.table(["log size (MiB, asked)", "case", "runs", "log at the stop (MiB)", "unflushed (KiB)",
                    "median restart (s)", "max (s)", "median recovery work (s)"], cell_rows, text_columns=2)
    else:
        page.paragraph("No recovery-bench run with results.recovery rows.", note=True)
    files = [write_csv(report_dir / "recovery_cells.csv", ["size_mib", "case", "runs", "log_mib", "unflushed_kib",
                                                             "median_s", "max_s", "work_median_s"], cell_rows)]
    series = {case: [(c.log_bytes / MIB, c.median_s) for c in cells if c.case == case]
              for case in dict.fromkeys(c.case for c in cells)}
    files.append(xy_plot(report_dir / "recovery_vs_log.png", "Restart time against log size (median per case)",
                         series, "commit log at the stop (MiB)", "restart time (s)"))
    page.figure("recovery_vs_log.png", "restart time against log size, one line per case")
    row_rows = [(r.run_id, str(r.size_mib), r.case, r.log_bytes / MIB, r.unflushed_bytes / 1024, r.checkpoint,
                 r.recovery_s) for r in rows]
    page.heading("Every restart")
    page.table(["run", "log size (MiB, asked)", "case", "log at the stop (MiB)", "unflushed (KiB)", "checkpoint",
                "restart (s)"], row_rows, text_columns=3)
    files.append(write_csv(report_dir / "recovery_rows.csv", ["run_id", "size_mib", "case", "log_mib",
                                                              "unflushed_kib", "checkpoint", "recovery_s"], row_rows))
    return finish_report(page, report_dir, NAME, runs, files, link_csvs=True, findings=[finding])


def _clean_phases(rows: list[Row]) -> dict[str, float] | None:
    """The clean stop's start phases at the largest log size, medians over the runs."""
    clean = [r for r in rows if r.case == CLEAN and r.phases]
    if not clean:
        return None
    largest = max(r.size_mib for r in clean)
    per: dict[str, list[float]] = {}
    for r in clean:
        if r.size_mib == largest:
            for k, v in r.phases:
                per.setdefault(k, []).append(v)
    return {k: sorted(v)[len(v) // 2] for k, v in per.items()}


JOB: Final = Job(NAME, run)

if __name__ == "__main__":
    submit(JOB)
