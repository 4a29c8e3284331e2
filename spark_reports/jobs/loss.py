"""Loss report: what each flush mode keeps under each fault, from check.json, faults.jsonl and meta.json.

Per run: the checker's counts (acknowledged, lost, lost bytes, duplicated, recovered, unexpected) next
to the unflushed window at the crash (power_loss params written_offset − flushed_offset: the bytes
the page cache held that the disk did not). Runs are then grouped by flush mode × fault × sysctl
profile in Spark, and the headline table shows, per flush mode and fault, how many acknowledged
messages survived.
"""

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

from spark_reports.html_report import Page, ReportOutput, runs_section, write_csv
from spark_reports.plots import bar_plot
from spark_reports.run_records import RunInfo, discover_runs, read_check, read_faults

NAME: Final = "loss"
NO_FAULT: Final = "none"
POWER_LOSS: Final = "power_loss"


@dataclass(frozen=True)
class RunLoss:
    run_id: str
    flush_mode: str
    fault: str
    profile: str
    attempted: int
    acknowledged: int
    lost: int
    lost_bytes: int
    unflushed_bytes: int | None
    duplicated: int
    recovered: int
    unexpected: int
    valid: bool


_SCHEMA = StructType([
    StructField("run_id", StringType(), False),
    StructField("flush_mode", StringType(), False),
    StructField("fault", StringType(), False),
    StructField("profile", StringType(), False),
    *(StructField(name, LongType(), name == "unflushed_bytes")
      for name in ("attempted", "acknowledged", "lost", "lost_bytes", "unflushed_bytes", "duplicated",
                   "recovered", "unexpected")),
    StructField("valid", BooleanType(), False),
])


def fault_label(faults: list[dict[str, Any]]) -> str:
    """The run's fault kinds, sorted and joined with "+" ("none" for a run without faults)."""
    kinds = sorted({str(f.get("kind", "?")) for f in faults})
    return "+".join(kinds) if kinds else NO_FAULT


def unflushed_bytes(faults: list[dict[str, Any]]) -> int | None:
    """Sum over power-loss faults of written_offset − flushed_offset; None when no power loss was injected."""
    windows = []
    for fault in faults:
        params = fault.get("params") or {}
        if fault.get("kind") == POWER_LOSS and "written_offset" in params and "flushed_offset" in params:
            windows.append(int(params["written_offset"]) - int(params["flushed_offset"]))
    return sum(windows) if windows else None


def run_loss(run: RunInfo) -> RunLoss | None:
    check = read_check(run)
    if check is None:
        return None
    faults = read_faults(run)

    def count(key: str) -> int:
        return int(check.get(key) or 0)

    return RunLoss(
        run_id=run.run_id, flush_mode=run.flush_mode, fault=fault_label(faults), profile=run.sysctl_profile,
        attempted=count("attempted"), acknowledged=count("acknowledged"), lost=count("lost"),
        lost_bytes=count("lost_bytes"), unflushed_bytes=unflushed_bytes(faults), duplicated=count("duplicated"),
        recovered=count("recovered"), unexpected=count("unexpected"), valid=bool(check.get("valid", False)),
    )


@dataclass(frozen=True)
class GroupLoss:
    flush_mode: str
    fault: str
    profile: str
    runs: int
    acknowledged: int
    lost: int
    lost_bytes: int
    unflushed_bytes: int | None
    duplicated: int
    recovered: int
    unexpected: int
    invalid_runs: int


def grouped(spark: SparkSession, losses: list[RunLoss], keys: tuple[str, ...]) -> list[GroupLoss]:
    """Sum the per-run counts over ``keys`` (a subset of flush_mode, fault, profile) in Spark."""
    df = spark.createDataFrame([asdict(x) for x in losses], _SCHEMA)
    sums = [F.sum(c).alias(c) for c in ("acknowledged", "lost", "lost_bytes", "unflushed_bytes", "duplicated",
                                         "recovered", "unexpected")]
    agg = df.groupBy(*keys).agg(F.count(F.lit(1)).alias("runs"), *sums,
                                F.sum(F.when(F.col("valid"), 0).otherwise(1)).alias("invalid_runs"))
    rows = agg.orderBy(*keys).collect()
    return [GroupLoss(
        flush_mode=r["flush_mode"], fault=r["fault"], profile=r["profile"] if "profile" in keys else "(all)",
        runs=int(r["runs"]), acknowledged=int(r["acknowledged"]), lost=int(r["lost"]), lost_bytes=int(r["lost_bytes"]),
        unflushed_bytes=None if r["unflushed_bytes"] is None else int(r["unflushed_bytes"]),
        duplicated=int(r["duplicated"]), recovered=int(r["recovered"]), unexpected=int(r["unexpected"]),
        invalid_runs=int(r["invalid_runs"])) for r in rows]


def headline_cell(group: GroupLoss) -> str:
    kept = group.acknowledged - group.lost
    share = f"{100 * kept / group.acknowledged:.4g} %" if group.acknowledged else "–"
    runs = f"{group.runs} run{'s' if group.runs != 1 else ''}"
    if group.lost == 0:
        return f"all {group.acknowledged:,} acknowledged kept ({runs})"
    return f"{kept:,} of {group.acknowledged:,} kept ({share}); {group.lost:,} lost, {group.lost_bytes:,} B ({runs})"


def run(spark: SparkSession, runs_dir: Path, out_dir: Path) -> ReportOutput:
    runs = discover_runs(runs_dir)
    report_dir = out_dir / NAME
    report_dir.mkdir(parents=True, exist_ok=True)
    losses = [loss for loss in (run_loss(r) for r in runs) if loss is not None]
    unchecked = [r.run_id for r in runs if not (r.path / "check.json").is_file()]
    by_group = grouped(spark, losses, ("flush_mode", "fault", "profile")) if losses else []
    by_mode_fault = grouped(spark, losses, ("flush_mode", "fault")) if losses else []

    run_header = ["run_id", "flush_mode", "fault", "sysctl_profile", "attempted", "acknowledged", "lost", "lost_bytes",
                  "unflushed_bytes", "duplicated", "recovered", "unexpected", "valid"]
    run_rows = [(x.run_id, x.flush_mode, x.fault, x.profile, x.attempted, x.acknowledged, x.lost, x.lost_bytes,
                 x.unflushed_bytes, x.duplicated, x.recovered, x.unexpected, x.valid) for x in losses]
    group_header = ["flush_mode", "fault", "sysctl_profile", "runs", "acknowledged", "lost", "lost_bytes",
                    "unflushed_bytes", "duplicated", "recovered", "unexpected", "invalid_runs"]
    group_rows = [(g.flush_mode, g.fault, g.profile, g.runs, g.acknowledged, g.lost, g.lost_bytes, g.unflushed_bytes,
                   g.duplicated, g.recovered, g.unexpected, g.invalid_runs) for g in by_group]
    modes = sorted({g.flush_mode for g in by_mode_fault})
    faults = sorted({g.fault for g in by_mode_fault})
    cells = {(g.flush_mode, g.fault): headline_cell(g) for g in by_mode_fault}
    headline_rows = [(mode, *(cells.get((mode, fault), "no runs") for fault in faults)) for mode in modes]

    files = [
        write_csv(report_dir / "loss_runs.csv", run_header, run_rows),
        write_csv(report_dir / "loss_by_group.csv", group_header, group_rows),
        write_csv(report_dir / "loss_headline.csv", ["flush_mode", *faults], headline_rows),
    ]
    page = Page("Loss: what each flush mode keeps under each fault")
    page.paragraph(
        "Counts from each run's check.json (acknowledged = sends the broker confirmed; lost = acknowledged but "
        "never delivered; lost bytes = their body bytes; recovered = outcome unknown at the client but delivered; "
        "duplicated = extra deliveries; "
        "unexpected = delivered but never sent). Unflushed window = written_offset − flushed_offset of the "
        "power-loss fault: the commit-log bytes that were in the page cache but not on disk at the crash.")
    page.heading("Headline")
    if headline_rows:
        page.table(["flush mode", *faults], headline_rows, text_columns=1 + len(faults))
    else:
        page.paragraph("No run has a check.json.", note=True)
    page.heading("By flush mode × fault × sysctl profile")
    page.table(["flush mode", "fault", "sysctl profile", "runs", "acknowledged", "lost", "lost bytes",
                "unflushed window (B)", "duplicated", "recovered", "unexpected", "invalid runs"], group_rows,
               text_columns=3)
    page.heading("Per run")
    page.table(["run", "flush mode", "fault", "sysctl profile", "attempted", "acknowledged", "lost", "lost bytes",
                "unflushed window (B)", "duplicated", "recovered", "unexpected", "valid"], run_rows, text_columns=4)
    if unchecked:
        page.paragraph("Runs without check.json (left out): " + ", ".join(unchecked), note=True)
    if losses:
        files.append(bar_plot(report_dir / "lost_vs_unflushed.png", "Lost bytes against the unflushed window",
                              [x.run_id for x in losses],
                              {"lost bytes (message bodies)": [float(x.lost_bytes) for x in losses],
                               "unflushed window at the crash (commit-log bytes)": [float(x.unflushed_bytes or 0)
                                                                       for x in losses]},
                              "bytes"))
        page.figure("lost_vs_unflushed.png", "lost bytes and unflushed window per run")
    page.links([(p.name, p.name) for p in files if p.suffix == ".csv"])
    runs_section(page, runs)
    index = report_dir / "index.html"
    page.write(index)
    return ReportOutput(NAME, index, tuple(files))


if __name__ == "__main__":
    from spark_reports.cli import job_main

    job_main(NAME)
