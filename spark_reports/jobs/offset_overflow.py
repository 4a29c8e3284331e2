"""Offset-overflow report: the seed's 15-row table recomputed in Spark, plus horizons at measured peak rates.

Seed (docs/claims.md, `offset-616-years`): years = Long.MAX_VALUE / (message size × messages a day) / 365, body
bytes only. Extension: the same horizon for the commit log at the highest ingest any run reached
(most acknowledged sends in any 1 s window × mean commit-log record size), and for the consume-queue
file offset, which grows by one 20-byte unit per message (worst case: every message in one queue).
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pyspark.sql import Column, SparkSession, Window
from pyspark.sql import functions as F

from spark_reports import offset_math as om
from spark_reports.claims import ClaimId, Finding, Verdict, write_findings
from spark_reports.html_report import Page, ReportOutput, write_csv
from spark_reports.job_runner import Job, submit
from spark_reports.plots import horizon_plot
from spark_reports.report_io import claims_sentence, finish_report, make_report_dir
from spark_reports.run_records import REFERENCE, RunInfo, discover_runs, load_events

NAME = "offset-overflow"
ONE_SECOND_NS = 1_000_000_000
BUCKET_NS = 10_000_000  # the peak's counting bucket: 10 ms
BUCKETS_PER_WINDOW = ONE_SECOND_NS // BUCKET_NS
HUNDRED_MILLION = 10**8  # the seed counts messages in 亿
CLAIM_YEARS = 616  # the claim: 4 KiB × 10^10 messages a day overflow only after 616 years (the seed: 616.9314558)
CLAIM_BYTES = 4096
CLAIM_PER_DAY = 10**10


@dataclass(frozen=True)
class SeedRow:
    message_bytes: int
    messages_per_day: int
    years: float
    consume_queue_years: float

    @property
    def seed_count(self) -> str:
        """Messages a day as the seed writes them (units of 亿 = 10^8)."""
        return str(self.messages_per_day // HUNDRED_MILLION)


@dataclass(frozen=True)
class MeasuredRow:
    run_id: str
    acknowledged: int
    peak_acks_per_s: int
    peak_window_start_ns: int
    mean_body_bytes: float
    mean_topic_bytes: float
    mean_properties_bytes: float
    record_bytes: float
    commitlog_years: float
    consume_queue_years: float

    @property
    def peak_bytes_per_s(self) -> float:
        return self.peak_acks_per_s * self.record_bytes

    @property
    def messages_per_day(self) -> int:
        return self.peak_acks_per_s * om.SECONDS_PER_DAY


def _years(bytes_per_message: Column, messages_per_day: Column) -> Column:
    # Spark's "/" is floating-point division, as the seed's spreadsheet arithmetic is.
    return F.lit(om.LONG_MAX) / (bytes_per_message * messages_per_day) / F.lit(om.DAYS_PER_YEAR)


def seed_table(spark: SparkSession) -> list[SeedRow]:
    """The seed's 15 rows in the seed's order (sizes vary fastest), computed in Spark."""
    grid = [(i, size, per_day) for i, (per_day, size) in
            enumerate((d, s) for d in om.SEED_MESSAGES_PER_DAY for s in om.SEED_MESSAGE_SIZES)]
    df = spark.createDataFrame(grid, "row int, size long, per_day long")
    df = df.select(
        "row", "size", "per_day",
        _years(F.col("size"), F.col("per_day")).alias("years"),
        _years(F.lit(om.CONSUME_QUEUE_UNIT_BYTES), F.col("per_day")).alias("cq_years"),
    ).orderBy("row")
    return [SeedRow(int(r["size"]), int(r["per_day"]), float(r["years"]), float(r["cq_years"]))
            for r in df.collect()]


def measured_rows(spark: SparkSession, runs: list[RunInfo]) -> list[MeasuredRow]:
    """Per run: the most acknowledged sends in any 1 s window (by ack time) and the horizons at that rate."""
    events = load_events(spark, runs, ["op", "key", "topic", "end_ns", "outcome", "bytes"])
    acks = events.where((F.col("op") == "send") & (F.col("outcome") == "ok"))
    # The peak, cheaply: acks counted per 10 ms bucket, then a sliding sum over 100 buckets (a 1 s window
    # aligned to 10 ms). A million acks become a few thousand buckets, so the window sorts little; the peak
    # differs from the exact one (any [t, t + 1 s)) by at most the acks of one 10 ms bucket.
    buckets = acks.groupBy("run_id", F.floor(F.col("end_ns") / F.lit(BUCKET_NS)).alias("bucket")).agg(
        F.count(F.lit(1)).alias("n"))
    frame = Window.partitionBy("run_id").orderBy("bucket").rangeBetween(0, BUCKETS_PER_WINDOW - 1)
    windows = buckets.select("run_id", "bucket", F.sum("n").over(frame).alias("in_window"))
    peaks = windows.groupBy("run_id").agg(
        F.max("in_window").alias("peak"),
        F.min_by("bucket", F.struct(-F.col("in_window"), F.col("bucket"))).alias("peak_bucket"))
    sizes = acks.groupBy("run_id").agg(
        F.count(F.lit(1)).alias("acknowledged"),
        F.avg("bytes").alias("body"),
        F.avg(F.octet_length("topic")).alias("topic"),
        F.avg(F.octet_length("key")).alias("key"),
    )
    per_run = sizes.join(peaks, "run_id").withColumn("peak_start", F.col("peak_bucket") * F.lit(BUCKET_NS))
    per_run = per_run.withColumn("properties", F.lit(om.PROPERTIES_FIXED_BYTES) + F.col("key"))
    per_run = per_run.withColumn(
        "record", F.lit(om.COMMITLOG_RECORD_FIXED_BYTES) + F.col("body") + F.col("topic") + F.col("properties"))
    per_day = F.col("peak") * F.lit(om.SECONDS_PER_DAY)
    per_run = per_run.select(
        "*",
        _years(F.col("record"), per_day).alias("cl_years"),
        _years(F.lit(om.CONSUME_QUEUE_UNIT_BYTES), per_day).alias("cq_years"),
    ).orderBy("run_id")
    return [MeasuredRow(r["run_id"], int(r["acknowledged"]), int(r["peak"]), int(r["peak_start"]),
                        float(r["body"]), float(r["topic"]), float(r["properties"]), float(r["record"]),
                        float(r["cl_years"]), float(r["cq_years"])) for r in per_run.collect()]


def overflow_finding(seed: list[SeedRow], measured: list[MeasuredRow]) -> Finding:
    """OFFSET_616_YEARS: held when the Spark-computed 4 KiB × 10^10/day row gives at least 616 years; the measured
    figure adds this machine's horizon at the highest peak ingest any run reached."""
    row = next(r for r in seed if r.message_bytes == CLAIM_BYTES and r.messages_per_day == CLAIM_PER_DAY)
    verdict = Verdict.HELD if row.years >= CLAIM_YEARS else Verdict.NOT_HELD
    measured_text = f"{om.format_seed(row.years)} years at 4 KiB × 10^10 messages a day (Spark)"
    figures = {"years_4k_1e10_per_day": row.years}
    peak = max((m for m in measured if m.peak_acks_per_s > 0), key=lambda m: m.peak_acks_per_s, default=None)
    if peak is not None:
        measured_text += (f"; at this machine's peak, {peak.peak_acks_per_s:,} msg/s of {peak.record_bytes:,.0f} B "
                          f"records ({peak.run_id}): {om.format_seed(peak.commitlog_years)} years (commit log), "
                          f"{om.format_seed(peak.consume_queue_years)} years (one consume queue)")
        figures.update(peak_acks_per_s=float(peak.peak_acks_per_s), peak_record_bytes=peak.record_bytes,
                       peak_commitlog_years=peak.commitlog_years, peak_consume_queue_years=peak.consume_queue_years)
    detail = (f"Held when Long.MAX_VALUE ÷ (4096 B × 10^10 a day) ÷ 365, computed in Spark as the seed does, is at "
              f"least {CLAIM_YEARS} years; the seed prints 616.9314558 and Spark gives {om.format_seed(row.years)}. "
              "This is arithmetic: the runs add only the horizon at the fastest ingest they measured (most acks in "
              "any 1 s, record size with assumed properties), which assumes that peak is sustained forever.")
    return Finding(ClaimId.OFFSET_616_YEARS, verdict, measured_text, NAME, tuple(m.run_id for m in measured), detail,
                   figures)


def run(spark: SparkSession, runs_dir: Path, out_dir: Path, broker: str = REFERENCE) -> ReportOutput:
    runs = discover_runs(runs_dir, broker)
    report_dir = make_report_dir(out_dir, NAME)
    seed = seed_table(spark)
    measured = measured_rows(spark, runs)

    finding = overflow_finding(seed, measured)
    files = [
        write_findings(report_dir, [finding]),
        write_csv(report_dir / "seed_table.csv",
                  ["message_bytes", "messages_per_day", "seed_count_1e8", "years", "years_seed_format",
                   "consume_queue_years"],
                  [(r.message_bytes, r.messages_per_day, r.seed_count, repr(r.years), om.format_seed(r.years),
                    repr(r.consume_queue_years)) for r in seed]),
        write_csv(report_dir / "measured.csv",
                  ["run_id", "acknowledged", "peak_acks_per_s", "peak_window_start_ns", "mean_body_bytes",
                   "mean_topic_bytes", "assumed_properties_bytes", "record_bytes", "peak_bytes_per_s",
                   "commitlog_years", "consume_queue_years"],
                  [(m.run_id, m.acknowledged, m.peak_acks_per_s, m.peak_window_start_ns, m.mean_body_bytes,
                    m.mean_topic_bytes, m.mean_properties_bytes, m.record_bytes, m.peak_bytes_per_s,
                    m.commitlog_years, m.consume_queue_years) for m in measured]),
    ]
    lines = {f"{size} B body (seed)": [(r.messages_per_day, r.years) for r in seed if r.message_bytes == size]
             for size in om.SEED_MESSAGE_SIZES}
    lines["consume queue, 20 B/message"] = [(r.messages_per_day, r.consume_queue_years)
                                            for r in seed if r.message_bytes == om.SEED_MESSAGE_SIZES[0]]
    points = {f"{m.run_id} peak (commit log)": (float(m.messages_per_day), m.commitlog_years)
              for m in measured if m.peak_acks_per_s > 0}
    files.append(horizon_plot(report_dir / "horizon.png", "Offset overflow horizon", lines, points))

    page = Page("Offset overflow: how long a 64-bit offset lasts")
    page.finding(claims_sentence([finding]) or "Nothing measured.")
    page.paragraph(
        "Commit-log and consume-queue offsets are Java longs. The seed's table (RocketMQ design Q&A 14) divides "
        "Long.MAX_VALUE = 2^63 − 1 by (message size × messages a day) and by 365 days, counting body bytes only. "
        "The table below recomputes it in Spark and prints it with the seed's 10 significant digits.")
    page.heading("The seed's table, recomputed")
    page.table(["message size (B)", "messages a day (亿 = 10^8)", "years (seed's digits)",
                "consume-queue offset, years (20 B/message)"],
               [(str(r.message_bytes), r.seed_count, om.format_seed(r.years), om.format_seed(r.consume_queue_years))
                for r in seed], text_columns=2)
    four_k = next(r for r in seed if r.message_bytes == 4096 and r.messages_per_day == 10**10)
    page.paragraph(f"4 KiB at 10^10 messages a day: {om.format_seed(four_k.years)} years (the seed: 616.9314558).")
    page.heading("At the measured peak ingest rate")
    page.paragraph(
        "Peak rate: the most acknowledged sends whose ack time (end_ns) falls in any 1-second window, from counts "
        "per 10 ms and a sliding sum of 100 of them (within one 10 ms bucket's acks of the exact peak). Record "
        "size: RocketMQ 4.9.8's commit-log record is 91 + body + topic "
        f"+ properties bytes (IPv4 hosts). Run records do not carry properties, so they are assumed to be "
        f"KEYS=<key>, UNIQ_KEY=<32 hex digits>, WAIT=true ({om.PROPERTIES_FIXED_BYTES} bytes + the key), the set a "
        "RocketMQ 4.x producer writes for a keyed message without tags. The horizon assumes the peak is sustained "
        "forever. The consume-queue file offset grows 20 bytes per message; its horizon assumes every message "
        "goes to one queue (the worst case).")
    if measured:
        page.table(["run", "acknowledged", "peak acks/s", "mean body B", "record B", "peak MB/s",
                    "commit log, years", "consume queue, years"],
                   [(m.run_id, m.acknowledged, m.peak_acks_per_s, f"{m.mean_body_bytes:,.1f}",
                     f"{m.record_bytes:,.1f}", f"{m.peak_bytes_per_s / 1e6:,.3f}",
                     om.format_seed(m.commitlog_years), om.format_seed(m.consume_queue_years)) for m in measured])
    else:
        page.paragraph("No acknowledged sends in the runs: no measured horizon.", note=True)
    page.figure("horizon.png", "years until overflow against messages a day")
    page.links([("seed_table.csv", "seed_table.csv"), ("measured.csv", "measured.csv")])
    return finish_report(page, report_dir, NAME, runs, files)


JOB: Final = Job(NAME, run)

if __name__ == "__main__":
    submit(JOB)
