"""Loss report: what each flush mode keeps under each fault, from check.json, faults.jsonl and meta.json.

Per run: the checker's counts (acknowledged, lost, lost bytes, duplicated, recovered, unexpected) next
to the unflushed window at the crash (power_loss params written_offset − flushed_offset: the bytes
the page cache held that the disk did not). Runs are then grouped by flush mode × fault × sysctl
profile in Spark, and the headline table shows, per flush mode and fault, how many acknowledged
messages survived.

The report also judges the seed's loss claims (``claims.py``) from the same per-run rows: SYNC_FLUSH loses
nothing on kill -9 or power loss, ASYNC_FLUSH loses nothing on kill -9 and only the unflushed tail on power
loss; and, from the disk-fill runs (``disk_fill_evidence``), that a disk above 90 % refuses writes while
reads go on and writes come back once space is freed; and, from the broker-group runs whose master lost its
disk (``replication_evidence``), that SYNC_MASTER loses no promised send and ASYNC_MASTER keeps about 99 %.
"""

from pathlib import Path
from typing import Any, Final

from pyspark.sql import SparkSession

from spark_reports.claims import ClaimId, Finding, Verdict, settle_each
from spark_reports.disk_fill_evidence import RESUME_DEADLINE_S, FillCycle, fill_cycles, is_disk_fill_run
from spark_reports.html_report import Page, ReportOutput, write_csv
from spark_reports.job_runner import Job, submit
from spark_reports.offset_math import COMMITLOG_RECORD_FIXED_BYTES
from spark_reports.plots import bar_plot
from spark_reports.replication_evidence import replication_master_loss
from spark_reports.report_io import csv_links, finish_report, make_report_dir, report_findings
from spark_reports.run_loss import (
    ASYNC_FLUSH,
    CRASHES,
    KILL9,
    MASTER_FAULTS,
    POWER_LOSS,
    POWER_LOSS_TORN,
    POWER_LOSSES,
    SYNC_FLUSH,
    RunLoss,
    crash_counts,
    grouped,
    headline_table,
    power_loss_windows,
    run_loss,
)
from spark_reports.run_records import REFERENCE, discover_runs, read_faults

NAME: Final = "loss"
KIB: Final = 1024
# The seed's "tens of KB" read as under 100 KiB: the size the seed expects the unflushed tail to have.
TENS_OF_KB_BYTES: Final = 100 * KIB


Faults = dict[str, list[dict[str, Any]]]  # faults.jsonl entries by run id
_CRASH_WORDS: Final = {KILL9: "kill -9", POWER_LOSS: "power-loss", POWER_LOSS_TORN: "torn power-loss"}


def _kinds(loss: RunLoss) -> set[str]:
    return set(loss.fault.split("+"))


def _flush_runs(losses: list[RunLoss]) -> list[RunLoss]:
    """The runs the flush-mode claims judge: not those that lost a group's master (their kill -9 cycles restart
    the master, but the run ends on the slave, whose loss is replication's, not the flush mode's)."""
    return [r for r in losses if not _kinds(r) & MASTER_FAULTS]


def _profiles(rows: list[RunLoss]) -> str:
    return "; ".join(sorted({r.profile for r in rows}))


def _crash_text(rows: list[RunLoss], faults: Faults) -> tuple[str, dict[str, int]]:
    total: dict[str, int] = {}
    for r in rows:
        for kind, n in crash_counts(faults.get(r.run_id, [])).items():
            total[kind] = total.get(kind, 0) + n
    text = ", ".join(f"{total[k]} {_CRASH_WORDS[k]} crash{'es' if total[k] != 1 else ''}"
                     for k in CRASHES if k in total)
    return text or "no crash recorded", total


def _no_loss_finding(claim: ClaimId, rows: list[RunLoss], faults: Faults, missing: str, rule: str) -> Finding:
    """Held when the runs lost none of the messages they acknowledged."""
    if not rows or sum(r.acknowledged for r in rows) == 0:
        return Finding(claim, Verdict.NOT_MEASURED, "no run", NAME, tuple(r.run_id for r in rows), missing)
    acked, lost, lost_bytes = (sum(getattr(r, f) for r in rows) for f in ("acknowledged", "lost", "lost_bytes"))
    crashes, per_kind = _crash_text(rows, faults)
    runs = f"{len(rows)} run{'s' if len(rows) != 1 else ''}"
    if lost == 0:
        verdict, measured = Verdict.HELD, f"0 of {acked:,} acknowledged lost ({runs}; {crashes})"
    else:
        bad = ", ".join(r.run_id for r in rows if r.lost)
        verdict = Verdict.NOT_HELD
        measured = f"{lost:,} of {acked:,} acknowledged lost, {lost_bytes:,} B ({runs}; {crashes}); in {bad}"
    invalid = [r.run_id for r in rows if not r.valid]
    detail = f"{rule} sysctl profile in force: {_profiles(rows)}."
    if invalid:
        detail += (f" The checker marked {len(invalid)} of these runs invalid (see the per-run table): "
                   f"{', '.join(invalid)}.")
    figures = {"runs": float(len(rows)), "acknowledged": float(acked), "lost": float(lost),
               "lost_bytes": float(lost_bytes), **{f"{k}_crashes": float(n) for k, n in per_kind.items()}}
    return Finding(claim, verdict, measured, NAME, tuple(r.run_id for r in rows), detail, figures)


def sync_no_loss(losses: list[RunLoss], faults: Faults) -> Finding:
    rows = [r for r in _flush_runs(losses) if r.flush_mode == SYNC_FLUSH and _kinds(r) & set(CRASHES)]
    covered = sorted({k for r in rows for k in _kinds(r) & set(CRASHES)})
    rule = ("Held when SYNC_FLUSH runs crashed by kill -9 or power loss lost none of the sends the broker "
            "acknowledged (check.json: acknowledged but never delivered). Faults covered: "
            f"{', '.join(covered) if covered else 'none'}.")
    if not POWER_LOSSES & set(covered):
        rule += " Power loss is not covered: it needs root (loop-mounted disk images); an OS crash is not injected."
    return _no_loss_finding(ClaimId.SYNC_NO_LOSS, rows, faults,
                            "No SYNC_FLUSH run with a kill9 or power_loss fault (python -m chaos matrix --flush sync; "
                            "power loss needs root).", rule)


def async_kill9_no_loss(losses: list[RunLoss], faults: Faults) -> Finding:
    rows = [r for r in _flush_runs(losses)
            if r.flush_mode == ASYNC_FLUSH and KILL9 in _kinds(r) and not _kinds(r) & POWER_LOSSES]
    return _no_loss_finding(ClaimId.ASYNC_KILL9_NO_LOSS, rows, faults,
                            "No ASYNC_FLUSH run with kill -9 (and no power loss) faults "
                            "(python -m chaos matrix --flush async --faults kill9).",
                            "Held when ASYNC_FLUSH runs killed with kill -9 (no power loss in the same run) lost "
                            "none of the sends the broker acknowledged: the page cache outlives the process.")


def async_power_loss_tail(losses: list[RunLoss], faults: Faults) -> Finding:
    """Held when every async power-loss run lost no more than its unflushed window at the crashes."""
    claim = ClaimId.ASYNC_POWER_LOSS_TAIL
    rows = [r for r in _flush_runs(losses) if r.flush_mode == ASYNC_FLUSH and _kinds(r) & POWER_LOSSES]
    ids = tuple(r.run_id for r in rows)
    if not rows:
        return Finding(claim, Verdict.NOT_MEASURED, "no run", NAME, ids,
                       "No ASYNC_FLUSH run with a power_loss fault (python -m chaos matrix --flush async "
                       "--faults power_loss; needs root for the loop-mounted disk image).")
    known = [r for r in rows if r.unflushed_bytes is not None]
    if not known:
        return Finding(claim, Verdict.NOT_MEASURED, "unflushed window not recorded", NAME, ids,
                       "The power-loss faults carry no written/flushed offsets, so the unflushed window is unknown "
                       "(Apache RocketMQ 4.9.8's runtime info has no flushed offset).")
    # check.json gives lost body bytes; each lost record also had RocketMQ's fixed 91-byte header
    # (CommitLog.calMsgLength), so bodies + 91 B each is a lower bound of the commit-log bytes lost.
    lost_log = {r.run_id: r.lost_bytes + COMMITLOG_RECORD_FIXED_BYTES * r.lost for r in known}
    over = [r.run_id for r in known if lost_log[r.run_id] > (r.unflushed_bytes or 0)]
    windows = sorted(w for r in known for w in power_loss_windows(faults.get(r.run_id, [])))
    lost_bytes, lost, window = (sum(r.lost_bytes for r in known), sum(r.lost for r in known),
                                sum(r.unflushed_bytes or 0 for r in known))
    median = windows[(len(windows) - 1) // 2] if windows else 0
    largest = windows[-1] if windows else 0
    size_words = ("within" if largest <= TENS_OF_KB_BYTES else "far beyond" if largest > 10 * TENS_OF_KB_BYTES
                  else "beyond")
    measured = (f"{lost:,} messages lost, {lost_bytes / KIB:,.0f} KiB of bodies, against an unflushed window of "
                f"{window / KIB:,.0f} KiB over {len(windows)} crash{'es' if len(windows) != 1 else ''} "
                f"({len(known)} run{'s' if len(known) != 1 else ''}); the window per crash: median "
                f"{median / KIB:,.0f} KiB, max {largest / KIB:,.0f} KiB, {size_words} the seed's \"tens of KB\"")
    if over:
        measured += f"; more lost than the window in {', '.join(over)}"
    detail = ("Held when, in every ASYNC_FLUSH power-loss run, the commit-log bytes lost (at least the lost bodies "
              f"plus {COMMITLOG_RECORD_FIXED_BYTES} B of record header each) do not exceed the unflushed window "
              "(written − flushed commit-log bytes at the crashes). The seed's \"tens of KB\" is read as under "
              f"{TENS_OF_KB_BYTES // KIB} KiB per crash and is reported, not judged: the window's size follows the "
              "load, flushIntervalCommitLog (RocketMQ default 500 ms) and the kernel's writeback, i.e. the sysctl "
              f"profile in force: {_profiles(known)}.")
    if len(known) < len(rows):
        detail += f" {len(rows) - len(known)} run(s) without recorded offsets were left out."
    figures = {"runs": float(len(known)), "lost": float(lost), "lost_bytes": float(lost_bytes),
               "lost_log_bytes_min": float(sum(lost_log.values())), "unflushed_bytes": float(window),
               "crashes": float(len(windows)), "window_median_bytes": float(median),
               "window_max_bytes": float(largest)}
    return Finding(claim, Verdict.NOT_HELD if over else Verdict.HELD, measured, NAME,
                   tuple(r.run_id for r in known), detail, figures)


def _span(values: list[float], unit: str, digits: int = 2) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.{digits}f} {unit}" if lo == hi else f"{lo:.{digits}f}–{hi:.{digits}f} {unit}"


def disk_full_protection(cycles: list[FillCycle], losses: list[RunLoss]) -> Finding:
    """Held when every fill cycle refused writes, served reads and took writes again, and nothing was lost."""
    claim = ClaimId.DISK_FULL_PROTECTION
    ids = tuple(sorted({c.run_id for c in cycles}))
    if not cycles:
        return Finding(claim, Verdict.NOT_MEASURED, "no run", NAME, (),
                       "No disk-fill run with a fill cycle (python -m chaos disk-fill; needs root for the "
                       "loop-mounted filesystem).")
    by_run = {r.run_id: r for r in losses if r.run_id in ids}
    lost, acked = sum(r.lost for r in by_run.values()), sum(r.acknowledged for r in by_run.values())
    problems = [f"{c.run_id} cycle {c.cycle}: {p}" for c in cycles for p in c.problems()]
    if lost:
        problems.append(f"{lost:,} acknowledged messages lost")
    ratios = [c.used_ratio for c in cycles if c.used_ratio is not None]
    refusals = [c.first_refusal_s for c in cycles if c.first_refusal_s is not None]
    resumed = [c.resumed_s for c in cycles if c.resumed_s is not None]
    parts = [f"{len(cycles)} fill cycle{'s' if len(cycles) != 1 else ''}"
             + (f" at {_span([100 * r for r in ratios], '%', 1)} disk use" if ratios else ""),
             f"{sum(c.refused for c in cycles):,} sends refused with SERVICE_NOT_AVAILABLE"
             + (f", the first {_span(refusals, 's')} after the fill" if refusals else ""),
             f"pulls served in {sum(c.reads_ok for c in cycles)} of {len(cycles)}",
             (f"writes back {_span(resumed, 's')} after the space was freed" if resumed
              else "no write acknowledged after the space was freed"),
             f"{lost:,} of {acked:,} acknowledged lost" if by_run else "loss not checked (no check.json)"]
    measured = "; ".join(parts)
    if problems:
        measured += ". Not shown: " + "; ".join(problems)
    detail = ("Held when every fill cycle took disk use above 90 % (RocketMQ's diskSpaceWarningLevelRatio), the "
              "broker refused sends with SERVICE_NOT_AVAILABLE and a disk-full remark, a probe consumer's pulls "
              "of every queue were served while the disk was full (chaos.json; without it: deliveries inside the "
              f"interval), a send was acknowledged within {RESUME_DEADLINE_S:.0f} s of the space being freed, and "
              "no acknowledged message was lost. Sends are still accepted until the broker's periodic disk check "
              "(cleanResourceInterval) marks the disk full, hence the delay before the first refusal.")
    figures = {"cycles": float(len(cycles)), "refused": float(sum(c.refused for c in cycles)),
               "lost": float(lost), "acknowledged": float(acked)}
    if resumed:
        figures["resumed_max_s"] = max(resumed)
    return Finding(claim, Verdict.NOT_HELD if problems else Verdict.HELD, measured, NAME, ids, detail, figures)


def findings(losses: list[RunLoss], faults: Faults, cycles: list[FillCycle]) -> list[Finding]:
    return [sync_no_loss(losses, faults), async_kill9_no_loss(losses, faults), async_power_loss_tail(losses, faults),
            disk_full_protection(cycles, losses), replication_master_loss(losses, NAME)]


def _disk_fill_section(page: Page, cycles: list[FillCycle]) -> list[tuple[object, ...]]:
    rows: list[tuple[object, ...]] = [
        (c.run_id, c.flush_mode, str(c.cycle), None if c.used_ratio is None else f"{100 * c.used_ratio:.1f} %",
         c.seconds, c.refused, c.first_refusal_s, c.acked_in_window, c.delivered_in_window,
         "–" if c.remark_disk_full is None else c.remark_disk_full,
         ("served" if c.pull_problem is None else c.pull_problem) if c.pull_probed else "not probed",
         c.resumed_s, "; ".join(c.problems()) or "shown") for c in cycles]
    page.heading("Disk fill: writes refused above 90 %, reads go on, writes come back")
    page.paragraph(
        "One row per fill cycle of the disk-fill runs (faults.jsonl disk_fill … disk_free). Counted from the events "
        "whose end falls inside the fill interval: sends refused with SERVICE_NOT_AVAILABLE (14), sends still "
        "acknowledged (before the broker's periodic disk check noticed), deliveries. The remark and the pull probe "
        "(a separate consumer pulling every queue while the disk was full) come from the run's chaos.json. "
        "Writes back = from the space freed to the next acknowledged send.")
    if rows:
        page.table(["run", "flush mode", "cycle", "disk use", "interval (s)", "refused", "first refusal (s)",
                    "acked inside", "delivered inside", "disk-full remark", "pulls", "writes back (s)", "verdict"],
                   rows, text_columns=3)
    else:
        page.paragraph("No disk-fill run with a fill cycle.", note=True)
    return rows


def loss_sentence(losses: list[RunLoss]) -> str:
    """The page's one sentence: acknowledged messages lost per flush mode, over how many runs and which faults."""
    if not losses:
        return "No run has a check.json: nothing to count."
    parts = []
    for mode in sorted({x.flush_mode for x in losses}):
        rows = [x for x in losses if x.flush_mode == mode]
        faults = sorted({x.fault for x in rows})
        parts.append(f"{mode} lost {sum(x.lost for x in rows):,} of {sum(x.acknowledged for x in rows):,} "
                     f"acknowledged messages in {len(rows)} run{'s' if len(rows) != 1 else ''} "
                     f"({', '.join(faults)})")
    return "; ".join(parts) + "."


def run(spark: SparkSession, runs_dir: Path, out_dir: Path, broker: str = REFERENCE) -> ReportOutput:
    runs = discover_runs(runs_dir, broker)
    report_dir = make_report_dir(out_dir, NAME)
    losses = [loss for loss in (run_loss(r) for r in runs) if loss is not None]
    unchecked = [r.run_id for r in runs if not (r.path / "check.json").is_file()]
    by_group = grouped(spark, losses, ("flush_mode", "replication", "fault", "profile")) if losses else []
    by_mode_fault = grouped(spark, losses, ("flush_mode", "fault")) if losses else []
    cycles = fill_cycles(spark, [r for r in runs if is_disk_fill_run(r)])
    faults_of = {r.run_id: read_faults(r) for r in runs}
    # Each claim judged from each run alone too: runs that disagree read "unsettled" (claims.settle).
    judged = settle_each(findings(losses, faults_of, cycles), lambda rid: findings(
        [x for x in losses if x.run_id == rid], {rid: faults_of.get(rid, [])}, [c for c in cycles if c.run_id == rid]))

    run_header = ["run_id", "flush_mode", "replication", "fault", "sysctl_profile", "attempted", "acknowledged",
                  "acked_master_only", "lost", "lost_promised", "lost_bytes", "unread", "passed_over",
                  "unflushed_bytes", "replication_lag_bytes", "duplicated", "recovered", "unexpected", "valid"]
    run_rows = [(x.run_id, x.flush_mode, x.replication, x.fault, x.profile, x.attempted, x.acknowledged,
                 x.acked_master_only, x.lost, x.lost_promised, x.lost_bytes, x.unread, x.passed_over,
                 x.unflushed_bytes, x.replication_lag_bytes, x.duplicated, x.recovered, x.unexpected, x.valid)
                for x in losses]
    group_header = ["flush_mode", "replication", "fault", "sysctl_profile", "runs", "acknowledged",
                    "acked_master_only", "lost", "lost_promised", "lost_bytes", "unread", "passed_over",
                    "unflushed_bytes", "duplicated", "recovered", "unexpected", "invalid_runs"]
    group_rows = [(g.flush_mode, g.replication, g.fault, g.profile, g.runs, g.acknowledged, g.acked_master_only,
                   g.lost, g.lost_promised, g.lost_bytes, g.unread, g.passed_over, g.unflushed_bytes, g.duplicated,
                   g.recovered, g.unexpected, g.invalid_runs) for g in by_group]
    faults, headline_rows = headline_table(by_mode_fault)

    files = [
        write_csv(report_dir / "loss_runs.csv", run_header, run_rows),
        write_csv(report_dir / "loss_by_group.csv", group_header, group_rows),
        write_csv(report_dir / "loss_headline.csv", ["flush_mode", *faults], headline_rows),
    ]
    page = Page("Loss: what each flush mode keeps under each fault")
    page.finding(loss_sentence(losses))
    page.paragraph(
        "Counts from each run's check.json (acknowledged = sends the broker confirmed; lost = acknowledged, "
        "never delivered and not found by the run's final read; lost bytes = their body bytes; unread = "
        "acknowledged and never delivered, but still served by the broker when the run's final read asked for "
        "it by position (the consumers fell behind; not a loss); passed over = acknowledged and kept by the "
        "store, but never delivered to the live consumer group, whose position was past them after a power cut "
        "(it had read records the cut took: docs/findings.md F14; not a loss to the store, a loss to that "
        "group); recovered = outcome unknown at the client but "
        "delivered; duplicated = extra deliveries; "
        "unexpected = delivered but never sent). Unflushed window = written_offset − flushed_offset of the "
        "power-loss fault: the commit-log bytes that were in the page cache but not on disk at the crash. "
        "Replication = the master's brokerRole; master-only = acknowledged only with FLUSH_SLAVE_TIMEOUT or "
        "SLAVE_NOT_AVAILABLE (stored on the master, promised on no slave); lost promised = lost keys that had a "
        "plain SEND_OK, which a SYNC_MASTER's slave must hold; lag = the master's commit-log end minus the "
        "slave's, sampled just before the master was killed or lost its disk.")
    page.heading("Headline")
    if headline_rows:
        page.table(["flush mode", *faults], headline_rows, text_columns=1 + len(faults))
    else:
        page.paragraph("No run has a check.json.", note=True)
    page.heading("By flush mode × replication × fault × sysctl profile")
    page.table(["flush mode", "replication", "fault", "sysctl profile", "runs", "acknowledged", "master-only",
                "lost", "lost promised", "lost bytes", "unread", "passed over", "unflushed window (B)", "duplicated",
                "recovered", "unexpected", "invalid runs"], group_rows, text_columns=4)
    page.heading("Per run")
    page.table(["run", "flush mode", "replication", "fault", "sysctl profile", "attempted", "acknowledged",
                "master-only", "lost", "lost promised", "lost bytes", "unread", "passed over", "unflushed window (B)",
                "lag at the master's loss (B)", "duplicated", "recovered", "unexpected", "valid"], run_rows,
               text_columns=5)
    if unchecked:
        page.paragraph("Runs without check.json (left out): " + ", ".join(unchecked), note=True)
    disk_rows = _disk_fill_section(page, cycles)
    if disk_rows:
        files.append(write_csv(report_dir / "disk_fill_cycles.csv",
                               ["run_id", "flush_mode", "cycle", "used_ratio", "interval_s", "refused",
                                "first_refusal_s", "acked_inside", "delivered_inside", "disk_full_remark", "pulls",
                                "writes_back_s", "verdict"], disk_rows))
    report_findings(page, report_dir, judged)
    if losses:
        files.append(bar_plot(report_dir / "lost_vs_unflushed.png", "Lost bytes against the unflushed window",
                              [x.run_id for x in losses],
                              {"lost bytes (message bodies)": [float(x.lost_bytes) for x in losses],
                               "unflushed window at the crash (commit-log bytes)": [float(x.unflushed_bytes or 0)
                                                                       for x in losses]},
                              "bytes"))
        page.figure("lost_vs_unflushed.png", "lost bytes and unflushed window per run")
    csv_links(page, files)
    return finish_report(page, report_dir, NAME, runs, files)


JOB: Final = Job(NAME, run)

if __name__ == "__main__":
    submit(JOB)
