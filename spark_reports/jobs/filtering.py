"""Filtering report: tag vs SQL92 vs FilterServer at the same selectivity.

Reads the runs of scenario "filtering" (``locust -f scenarios/filtering.py``): meta.json ``results.filtering``
holds the workload (messages, selectivity, message size) and one row per mode {mode, expected, delivered,
unexpected, seconds, msgs_per_s, broker_cpu_s, wire_bytes, ...} or {mode, skipped: why}. The figures were
measured by the scenario's controller (the broker's CPU from /proc, the consumer's bytes read from its
connections); this report compares them — per mode: broker CPU µs per delivered message, bytes on the wire per
delivered message, and deliveries/s at the consumer — as a table, a CSV and two bar charts. It judges no seed
claim; no Spark computation is needed (the rows are in meta.json), the session is taken for the common job
interface.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pyspark.sql import SparkSession

from spark_reports.html_report import Page, ReportOutput, write_csv
from spark_reports.job_runner import Job, submit
from spark_reports.percentiles import DEFAULT_ACCURACY
from spark_reports.plots import bar_plot
from spark_reports.report_io import finish_report, make_report_dir
from spark_reports.run_records import REFERENCE, RunInfo, discover_runs

NAME: Final = "filtering"
SCENARIO: Final = "filtering"


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class ModeRow:
    run_id: str
    mode: str
    selectivity: float | None
    messages: int | None
    skipped: str | None
    expected: int | None
    delivered: int | None
    unexpected: int | None
    seconds: float | None
    msgs_per_s: float | None
    broker_cpu_s: float | None
    wire_bytes: float | None

    @property
    def cpu_us_per_msg(self) -> float | None:
        if self.broker_cpu_s is None or not self.delivered:
            return None
        return self.broker_cpu_s / self.delivered * 1e6

    @property
    def wire_bytes_per_msg(self) -> float | None:
        if self.wire_bytes is None or not self.delivered:
            return None
        return self.wire_bytes / self.delivered

    @property
    def complete(self) -> bool | None:
        if self.skipped is not None or self.expected is None:
            return None
        return self.delivered == self.expected and not self.unexpected


def rows_of(run: RunInfo) -> list[ModeRow]:
    """The run's rows (none for a run that is not a filtering run or got no further than its setup)."""
    f = (run.meta.get("results") or {}).get("filtering") or {}
    out = []
    for m in f.get("modes") or []:
        if not isinstance(m, dict) or "mode" not in m:
            continue
        delivered, expected, unexpected = (_num(m.get(k)) for k in ("delivered", "expected", "unexpected"))
        out.append(ModeRow(
            run.run_id, str(m["mode"]), _num(f.get("selectivity")),
            None if _num(f.get("messages")) is None else int(f["messages"]),
            None if m.get("skipped") is None else str(m["skipped"]),
            None if expected is None else int(expected), None if delivered is None else int(delivered),
            None if unexpected is None else int(unexpected), _num(m.get("seconds")), _num(m.get("msgs_per_s")),
            _num(m.get("broker_cpu_s")), _num(m.get("wire_bytes"))))
    return out


def run(spark: SparkSession, runs_dir: Path, out_dir: Path, accuracy: int = DEFAULT_ACCURACY,
        broker: str = REFERENCE) -> ReportOutput:
    del spark, accuracy  # the rows are the controller's measurements (see the module docstring)
    runs = [r for r in discover_runs(runs_dir, broker) if r.scenario == SCENARIO]
    report_dir = make_report_dir(out_dir, NAME)
    rows = [row for r in runs for row in rows_of(r)]
    page = Page("Filtering: tag, SQL92 and FilterServer at the same selectivity")
    page.paragraph(
        "The same messages consumed once per filter mode by a push consumer of a fresh group, each mode's filter "
        "matching the same messages (the tag 'hit', the selector sel < P, the class filter sel < P). Broker CPU = "
        "user + system time of the broker process and its children (filter servers) during the mode's drain, "
        "from /proc; bytes on the wire = what the consumer read from its connections to the broker (and filter "
        "servers), frames and headers included (heartbeats and rebalancing too, a few KiB); deliveries/s = "
        "expected messages ÷ the time from the consumer's start to its last expected delivery. CPU is counted "
        "in clock ticks (10 ms): short runs give coarse figures.")
    header = ["run", "mode", "selectivity", "messages", "expected", "delivered", "unexpected", "seconds",
              "deliveries/s", "broker CPU s", "broker CPU µs/msg", "wire bytes", "wire bytes/msg", "note"]
    table = [(r.run_id, r.mode, r.selectivity, r.messages, r.expected, r.delivered, r.unexpected, r.seconds,
              r.msgs_per_s, r.broker_cpu_s, r.cpu_us_per_msg, r.wire_bytes, r.wire_bytes_per_msg,
              r.skipped or ("" if r.complete else "incomplete drain")) for r in rows]
    page.heading("Per mode")
    if table:
        page.table(header, table, text_columns=2)
    else:
        page.paragraph("No filtering run with results.filtering.", note=True)
    files = [write_csv(report_dir / "filtering_modes.csv",
                       ["run_id", "mode", "selectivity", "messages", "expected", "delivered", "unexpected",
                        "seconds", "msgs_per_s", "broker_cpu_s", "broker_cpu_us_per_msg", "wire_bytes",
                        "wire_bytes_per_msg", "note"], table)]
    measured = [r for r in rows if r.skipped is None]
    costs = [r for r in measured if r.cpu_us_per_msg is not None]
    if costs:
        costs.sort(key=lambda r: r.cpu_us_per_msg or 0.0)
        cheap, dear = costs[0], costs[-1]
        page.finding(f"Broker CPU per delivered message ran from {cheap.cpu_us_per_msg:,.1f} µs ({cheap.mode}) to "
                     f"{dear.cpu_us_per_msg:,.1f} µs ({dear.mode}) at the same selectivity.")
    multi = len({r.run_id for r in measured}) > 1
    categories = [f"{r.run_id} {r.mode}" if multi else r.mode for r in measured]
    files.append(bar_plot(report_dir / "cpu_per_message.png", "Broker CPU per delivered message", categories,
                          {"µs/msg": [r.cpu_us_per_msg or 0.0 for r in measured]}, "µs"))
    page.figure("cpu_per_message.png", "broker CPU microseconds per delivered message, per mode")
    files.append(bar_plot(report_dir / "wire_per_message.png", "Bytes on the wire per delivered message",
                          categories, {"bytes/msg": [r.wire_bytes_per_msg or 0.0 for r in measured]}, "bytes"))
    page.figure("wire_per_message.png", "bytes the consumer read per delivered message, per mode")
    skipped = [r for r in rows if r.skipped is not None]
    for r in skipped:
        page.paragraph(f"{r.run_id}: mode {r.mode} skipped — {r.skipped}", note=True)
    return finish_report(page, report_dir, NAME, runs, files, link_csvs=True)


JOB: Final = Job(NAME, run)

if __name__ == "__main__":
    submit(JOB)
