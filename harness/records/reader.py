"""Reading run records back: meta, events, metrics, faults, check; one error type for what cannot be read.

Readers are lenient where the bytes are unambiguous (an int64 ``queue_id`` is cast to int32 if it fits; a
file without an optional column gets the column's default) and strict where they are not (a missing required
column or a null is an error). ``validate_run`` (harness.records.validate) reports every deviation instead.
"""

# pyarrow ships no type information; its names are Any here.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.json as pajson
import pyarrow.parquet as pq

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
    METRICS_SCHEMA,
    PART_RE,
)


class RunRecordError(Exception):
    """A run directory, or one of its files, cannot be read as a run record."""


class NotARunDirError(RunRecordError):
    """The path is not a run directory at all."""


def require_run_dir(run_dir: str | os.PathLike[str]) -> Path:
    p = Path(run_dir)
    if not p.is_dir():
        raise NotARunDirError(f"{p}: not a run directory (no such directory)")
    if not (p / META_FILE).is_file():
        raise NotARunDirError(f"{p}: not a run directory: no {META_FILE} (a run record is runs/<run-id>/ with "
                              f"{META_FILE} and {EVENTS_DIR}/ or {EVENTS_JSONL})")
    return p


def read_json_object(path: Path) -> dict[str, Any]:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RunRecordError(f"{path}: cannot read JSON: {e}") from e
    if not isinstance(obj, dict):
        raise RunRecordError(f"{path}: expected a JSON object, got {type(obj).__name__}")
    return obj


def load_meta(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    return read_json_object(require_run_dir(run_dir) / META_FILE)


def load_check(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    path = require_run_dir(run_dir) / CHECK_FILE
    return read_json_object(path) if path.exists() else None


def load_faults(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    path = require_run_dir(run_dir) / FAULTS_FILE
    if not path.exists():
        return []
    faults = []
    with path.open("rb") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError as e:
                raise RunRecordError(f"{path}:{n}: {e}") from e
            if not isinstance(obj, dict):
                raise RunRecordError(f"{path}:{n}: expected a JSON object")
            faults.append(obj)
    return faults


def part_files(directory: Path) -> list[Path]:
    """``part-<name>-<n>.parquet`` files in (name, n) order, which is each writer's recording order."""
    if not directory.is_dir():
        return []
    found = [(m["name"], int(m["n"]), p) for p in directory.iterdir() if (m := PART_RE.fullmatch(p.name))]
    return [p for _, _, p in sorted(found, key=lambda t: (t[0], t[1]))]


def load_events(run_dir: str | os.PathLike[str], columns: list[str] | None = None) -> pa.Table:
    """All events of a run (Parquet parts, then events.jsonl), typed as ``EVENTS_FULL_SCHEMA``.

    ``columns`` restricts the read (cheaper for 10^7 rows). Row order: per worker in recording order.
    """
    root = require_run_dir(run_dir)
    parquet_dir, jsonl = root / EVENTS_DIR, root / EVENTS_JSONL
    if not parquet_dir.is_dir() and not jsonl.is_file():
        raise RunRecordError(f"{root}: no events ({EVENTS_DIR}/ or {EVENTS_JSONL})")
    return _load_table(parquet_dir, jsonl, EVENTS_FULL_SCHEMA, EVENTS_OPTIONAL_DEFAULTS, columns)


def load_metrics(run_dir: str | os.PathLike[str], columns: list[str] | None = None) -> pa.Table:
    """All metric samples of a run (empty when the run has none)."""
    root = require_run_dir(run_dir)
    return _load_table(root / METRICS_DIR, root / METRICS_JSONL, METRICS_SCHEMA, {}, columns)


def _load_table(parquet_dir: Path, jsonl: Path, schema: pa.Schema, defaults: dict[str, object],
                columns: list[str] | None) -> pa.Table:
    wanted = pa.schema([schema.field(c) for c in columns]) if columns is not None else schema
    tables = [_conform(_read_part(p, wanted), wanted, defaults, p) for p in part_files(parquet_dir)]
    if jsonl.is_file():
        tables.append(_conform(read_jsonl(jsonl, wanted), wanted, defaults, jsonl))
    if not tables:
        return wanted.empty_table()
    return pa.concat_tables(tables)


def _read_part(path: Path, wanted: pa.Schema) -> pa.Table:
    try:
        f = pq.ParquetFile(path)
        present = set(f.schema_arrow.names)
        return f.read(columns=[n for n in wanted.names if n in present])
    except (OSError, pa.ArrowException) as e:
        raise RunRecordError(f"{path}: cannot read Parquet: {e}") from e


def read_jsonl(path: Path, schema: pa.Schema) -> pa.Table:
    """A JSONL file parsed with ``schema`` (fields made nullable, so a missing field reads as null)."""
    if path.stat().st_size == 0:
        return schema.empty_table()
    opts = pajson.ParseOptions(explicit_schema=pa.schema([f.with_nullable(True) for f in schema]),
                               unexpected_field_behavior="ignore")
    try:
        return pajson.read_json(path, parse_options=opts).select(schema.names)
    except (OSError, pa.ArrowException) as e:
        raise RunRecordError(f"{path}: cannot read JSON lines: {e}") from e


def _conform(table: pa.Table, schema: pa.Schema, defaults: dict[str, object], where: Path) -> pa.Table:
    cols = []
    for field in schema:
        if field.name not in table.column_names:
            if field.name not in defaults:
                raise RunRecordError(f"{where}: required column {field.name!r} missing")
            cols.append(pa.repeat(pa.scalar(defaults[field.name], field.type), table.num_rows))
            continue
        col = table[field.name]
        if col.null_count:
            if field.name not in defaults:
                raise RunRecordError(f"{where}: column {field.name!r} has {col.null_count} null/missing values")
            col = col.fill_null(pa.scalar(defaults[field.name], field.type))
        try:
            cols.append(col.cast(field.type))
        except pa.ArrowException as e:
            raise RunRecordError(f"{where}: column {field.name!r} of type {col.type} is not {field.type}: {e}") from e
    return pa.Table.from_arrays(cols, schema=schema)
