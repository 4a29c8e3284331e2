"""Reading run records from `runs/<run-id>/` directories with Spark: meta, events, metrics, faults, check.

The schema is the harness contract (docs/design.md, Run records), defined once in ``harness.records.schema``: the
file names, the schema version, and the column names and types of events and metrics, which this module turns
into Spark types (``spark_type``). It reads files only: nothing here imports the harness's writer or the broker.
Columns a writer left out read as nulls (an optional column: its default); columns are cast to the contract's
types so Parquet written with wider or narrower integers still lines up.
"""

# pyarrow ships no type information; its names are Any here.
# mypy: disable-error-code="import-untyped"

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, DoubleType, IntegerType, LongType, StringType, StructField, StructType

from harness.records.schema import (
    CHECK_FILE,
    EVENTS_DIR,
    EVENTS_FULL_SCHEMA,
    EVENTS_JSONL,
    EVENTS_OPTIONAL_DEFAULTS,
    FAULTS_FILE,
    META_FILE,
    METRICS_DIR,
    METRICS_JSONL,
    SCHEMA_VERSION,
)
from harness.records.schema import METRICS_SCHEMA as ARROW_METRICS_SCHEMA
from spark_reports.run_source import STAGED_FILE

# The contract's Arrow types and the Spark types they read as; a type not here fails loudly at import.
_SPARK_TYPES: Final[Mapping[pa.DataType, DataType]] = {
    pa.string(): StringType(),
    pa.int32(): IntegerType(),
    pa.int64(): LongType(),
    pa.float64(): DoubleType(),
}


def spark_type(arrow_type: pa.DataType) -> DataType:
    """The Spark type of one of the contract's Arrow column types."""
    try:
        return _SPARK_TYPES[arrow_type]
    except KeyError:
        raise TypeError(f"run-record column type {arrow_type} has no Spark type here") from None


EVENT_COLUMNS: Final[Mapping[str, DataType]] = {f.name: spark_type(f.type) for f in EVENTS_FULL_SCHEMA}
"""Every event column (required, then optional) with its Spark type."""
EVENT_DEFAULTS: Final[Mapping[str, object]] = dict(EVENTS_OPTIONAL_DEFAULTS)
EVENTS_SCHEMA: Final = StructType([StructField(name, kind, True) for name, kind in EVENT_COLUMNS.items()])

REFERENCE: Final = "reference"
ROCKETMQ: Final = "rocketmq"
BROKERS: Final = (REFERENCE, ROCKETMQ)  # the order of the claims page's columns
# RocketMQ's brokerVersionDesc is MQVersion's name, "V4_9_8"; the reference broker's "reference_broker X.Y".
_ROCKETMQ_VERSION: Final = re.compile(r"V\d+_\d+_\d+")


PEER: Final = "peer"  # NATS / RabbitMQ runs (harness.peer_drivers): only the compare report reads them
_PEER_IMPLS: Final = ("nats-server", "rabbitmq-server")


def broker_of(broker_impl: object) -> str:
    """``rocketmq`` for a run whose meta.json ``broker_impl`` is a RocketMQ version, ``peer`` for a NATS or
    RabbitMQ server's, else ``reference`` (the reference broker, synthetic runs, and runs that did not say)."""
    if isinstance(broker_impl, str) and broker_impl.startswith(_PEER_IMPLS):
        return PEER
    return ROCKETMQ if isinstance(broker_impl, str) and _ROCKETMQ_VERSION.match(broker_impl) else REFERENCE


class RunRecordError(ValueError):
    """A run directory that does not follow schema v1."""


@dataclass(frozen=True)
class RunInfo:
    """One run directory and its meta.json."""

    run_id: str
    path: Path
    meta: Mapping[str, Any]
    # A run staged from a URL (run_source): where its events and metrics are, and which of them exist there.
    data_url: str | None = None
    remote_data: frozenset[str] = frozenset()

    @property
    def scenario(self) -> str:
        return str(self.meta.get("scenario", "?"))

    @property
    def flush_mode(self) -> str:
        broker = self.meta.get("broker") or {}
        return str(broker.get("flushDiskType", "unknown"))

    @property
    def replication_mode(self) -> str:
        """The broker's brokerRole (SYNC_MASTER, ASYNC_MASTER, SLAVE); ASYNC_MASTER, both brokers' default, when
        meta.json does not say."""
        broker = self.meta.get("broker") or {}
        return str(broker.get("brokerRole", "ASYNC_MASTER"))

    @property
    def broker_impl(self) -> str:
        return str(self.meta.get("broker_impl", "unknown"))

    @property
    def broker(self) -> str:
        """Which implementation ran (``broker_of``): ``rocketmq`` or ``reference``."""
        return broker_of(self.meta.get("broker_impl"))

    @property
    def started_at_ns(self) -> int | None:
        value = self.meta.get("started_at_ns")
        return int(value) if value is not None else None

    @property
    def sysctl_profile(self) -> str:
        """The profile in force: its name, "none", or the requested name with the reason it was not applied."""
        sysctl = self.meta.get("sysctl") or {}
        name = sysctl.get("profile")
        if name is None:
            return "none"
        if sysctl.get("applied"):
            return str(name)
        return f"{name} (not applied: {sysctl.get('reason') or 'no reason given'})"

    @property
    def sysctl_values(self) -> str:
        values = (self.meta.get("sysctl") or {}).get("values") or {}
        return ", ".join(f"{k}={v}" for k, v in sorted(values.items()))

    @property
    def host_summary(self) -> str:
        host = self.meta.get("host") or {}
        parts = []
        if host.get("cores") is not None:
            parts.append(f"{host['cores']} cores")
        if host.get("ram_bytes") is not None:
            parts.append(f"{int(host['ram_bytes']) / 2**30:.1f} GiB RAM")
        if host.get("kernel"):
            parts.append(f"kernel {host['kernel']}")
        if host.get("python"):
            parts.append(f"Python {host['python']}")
        disk = host.get("disk")
        if disk:
            parts.append("disk " + ", ".join(f"{k}={v}" for k, v in sorted(disk.items())))
        return "; ".join(parts) or "unknown"

    @property
    def events_source(self) -> tuple[str, bool] | None:
        """(location, is a Parquet directory) of the run's events, or None."""
        return data_source(self, EVENTS_DIR, EVENTS_JSONL)


def data_source(run: RunInfo, parquet_dir: str, jsonl: str) -> tuple[str, bool] | None:
    """Where a run's events or metrics are: its Parquet directory, else its JSONL file, else None. A run staged
    from a URL reads them from the URL."""
    if run.data_url is not None:
        for name, is_dir in ((parquet_dir, True), (jsonl, False)):
            if name in run.remote_data:
                return f"{run.data_url.rstrip('/')}/{name}", is_dir
        return None
    directory = run.path / parquet_dir
    if directory.is_dir() and any(directory.glob("*.parquet")):
        return str(directory), True
    return (str(run.path / jsonl), False) if (run.path / jsonl).is_file() else None


def read_run(path: Path) -> RunInfo:
    meta = json.loads((path / META_FILE).read_text(encoding="utf-8"))
    version = meta.get("schema_version")
    if version != SCHEMA_VERSION:
        raise RunRecordError(f"{path}: schema_version {version!r}, this reader knows {SCHEMA_VERSION}")
    run_id = str(meta.get("run_id") or path.name)
    staged = path / STAGED_FILE
    if staged.is_file():
        where = json.loads(staged.read_text(encoding="utf-8"))
        return RunInfo(run_id, path, meta, str(where["url"]), frozenset(str(d) for d in where["data"]))
    return RunInfo(run_id=run_id, path=path, meta=meta)


def discover_runs(runs_dir: Path, broker: str | None = None) -> list[RunInfo]:
    """Every run under ``runs_dir`` (or ``runs_dir`` itself if it is one run), sorted by run id; with
    ``broker``, only the runs of that implementation (``RunInfo.broker``)."""
    if (runs_dir / META_FILE).is_file():
        runs = [read_run(runs_dir)]
    elif not runs_dir.is_dir():
        raise RunRecordError(f"{runs_dir}: not a directory")
    else:
        runs = [read_run(p) for p in sorted(runs_dir.iterdir()) if (p / META_FILE).is_file()]
    return sorted((r for r in runs if broker is None or r.broker == broker), key=lambda r: r.run_id)


def read_faults(run: RunInfo) -> list[dict[str, Any]]:
    path = run.path / FAULTS_FILE
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def check_verdict(check: Mapping[str, Any] | None) -> str:
    """check.json's verdict for a table cell. "valid" alone would read the same for a run that lost nothing and
    for one whose loss its durability mode allows (ASYNC_FLUSH power loss), so the allowed loss is named."""
    if not check:
        return "no check"
    lost = int(check.get("lost") or 0)
    if not check.get("valid"):
        return "invalid"
    return f"valid ({lost} lost, allowed)" if lost and check.get("allow_loss") else "valid"


def read_passed_over(run: RunInfo) -> int:
    """chaos.json's ``passed_over.count`` (chaos.load Workload.passed_over): acknowledged messages the store
    kept that the live consumer group never delivered, its position being past them; 0 without chaos.json."""
    path = run.path / "chaos.json"
    if not path.is_file():
        return 0
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0
    passed = data.get("passed_over") if isinstance(data, dict) else None
    return int(passed.get("count") or 0) if isinstance(passed, dict) else 0


def read_check(run: RunInfo) -> dict[str, Any] | None:
    path = run.path / CHECK_FILE
    if not path.is_file():
        return None
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


# Parquet is read with every integer column as 64-bit: Spark widens int32 files to long, but fails on
# int64 files read as int; the contract's int32 columns are narrowed afterwards.
def _read_schema(columns: Mapping[str, DataType]) -> StructType:
    return StructType([StructField(name, LongType() if isinstance(kind, IntegerType) else kind, True)
                       for name, kind in columns.items()])


def _typed(columns: Mapping[str, DataType], defaults: Mapping[str, object],
           names: Sequence[str]) -> Callable[[DataFrame], DataFrame]:
    """``run_id`` and ``names`` cast to the contract's types; a null in a column with a default reads as it."""
    def cast(name: str) -> Column:
        col = F.col(name).cast(columns[name])
        return (F.coalesce(col, F.lit(defaults[name])) if name in defaults else col).alias(name)

    return lambda df: df.select("run_id", *[cast(name) for name in names])


def _load(spark: SparkSession, sources: Iterable[tuple[RunInfo, tuple[str, bool] | None]],
          columns: Mapping[str, DataType], typed: Callable[[DataFrame], DataFrame]) -> list[DataFrame]:
    """One frame per JSONL run and one for every Parquet run together, each with a ``run_id`` column.

    Parquet runs are read in one scan (Spark packs the small per-worker files of many runs into a few tasks) and
    each row gets its run id from the directory its file sits in; JSONL runs are read one by one."""
    parquet_runs: dict[str, str] = {}
    parquet_paths: list[str] = []
    frames = []
    for run, source in sources:
        if source is None:
            continue
        location, is_dir = source
        if is_dir:
            parquet_runs[run.path.name] = run.run_id
            parquet_paths.append(f"{location}/*.parquet")
            continue
        schema = StructType([StructField(name, kind, True) for name, kind in columns.items()])
        frames.append(typed(spark.read.schema(schema).json(location).withColumn("run_id", F.lit(run.run_id))))
    if parquet_runs:
        raw = spark.read.schema(_read_schema(columns)).parquet(*parquet_paths)
        # .../<run dir>/<events|metrics>/<file>: the third path segment from the end (cheaper per row than a regex).
        run_dir = F.substring_index(F.substring_index(F.col("_metadata.file_path"), "/", -3), "/", 1)
        mapping = F.create_map(*[F.lit(x) for item in parquet_runs.items() for x in item])
        frames.append(typed(raw.withColumn("run_id", mapping[run_dir])))
    return frames


def _union(spark: SparkSession, frames: list[DataFrame], columns: Mapping[str, DataType],
           names: Sequence[str]) -> DataFrame:
    if not frames:
        fields = [StructField("run_id", StringType())] + [StructField(c, columns[c], True) for c in names]
        return spark.createDataFrame([], StructType(fields))
    return reduce(DataFrame.unionByName, frames)


def load_events(spark: SparkSession, runs: Iterable[RunInfo],
                columns: Sequence[str] = tuple(EVENT_COLUMNS)) -> DataFrame:
    """All runs' events as one DataFrame: ``run_id`` plus ``columns`` with the contract's types (an optional
    column a run lacks reads as its default)."""
    unknown = [c for c in columns if c not in EVENT_COLUMNS]
    if unknown:
        raise ValueError(f"not event columns: {unknown}")
    typed = _typed(EVENT_COLUMNS, EVENT_DEFAULTS, columns)
    frames = _load(spark, ((run, run.events_source) for run in runs), EVENT_COLUMNS, typed)
    return _union(spark, frames, EVENT_COLUMNS, columns)


# Metrics (long format): one row per sample.
METRIC_COLUMNS: Final[Mapping[str, DataType]] = {f.name: spark_type(f.type) for f in ARROW_METRICS_SCHEMA}
METRIC_DEFAULTS: Final[Mapping[str, object]] = {"label": ""}  # the schema's "no label"
METRICS_SCHEMA: Final = StructType([StructField(name, kind, True) for name, kind in METRIC_COLUMNS.items()])


def metrics_source(run: RunInfo) -> tuple[str, bool] | None:
    """(location, is a Parquet directory) of the run's metrics, or None."""
    return data_source(run, METRICS_DIR, METRICS_JSONL)


def load_metrics(spark: SparkSession, runs: Iterable[RunInfo]) -> DataFrame:
    """All runs' metric samples as one DataFrame: run_id, ts_ns, metric, value, label.

    Parquet runs are read in one scan, as `load_events` does; a missing label reads as "" (the schema's
    "no label") so filters on label need no null handling.
    """
    typed = _typed(METRIC_COLUMNS, METRIC_DEFAULTS, tuple(METRIC_COLUMNS))
    frames = _load(spark, ((run, metrics_source(run)) for run in runs), METRIC_COLUMNS, typed)
    return _union(spark, frames, METRIC_COLUMNS, tuple(METRIC_COLUMNS))
