"""``validate_run``: every way a run directory deviates from schema v1, as a list of readable problems.

Parquet files are checked from their footers (column types, null counts) plus one read of the ``op`` and
``outcome`` columns for their vocabularies, so validating 10^7 events stays cheap.
"""

# pyarrow ships no type information; its names are Any here.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from harness.records.reader import RunRecordError, part_files, read_json_object, read_jsonl
from harness.records.schema import (
    CHECK_FILE,
    CHECK_KEYS,
    EVENTS_DIR,
    EVENTS_FULL_SCHEMA,
    EVENTS_JSONL,
    EVENTS_OPTIONAL_SCHEMA,
    FAULT_KEYS,
    FAULTS_FILE,
    HOST_KEYS,
    META_FILE,
    META_KEYS,
    METRICS_DIR,
    METRICS_JSONL,
    METRICS_SCHEMA,
    OPS,
    OUTCOMES,
    RUN_ID_RE,
    SCHEMA_VERSION,
    SYSCTL_KEYS,
)


def validate_run(run_dir: str | os.PathLike[str], *, include_check: bool = True) -> list[str]:
    """Problems found in ``run_dir``; an empty list means a valid v1 run record."""
    root = Path(run_dir)
    if not root.is_dir():
        return [f"{root}: not a run directory (no such directory)"]
    if not (root / META_FILE).is_file():
        return [f"{root}: not a run directory: no {META_FILE}"]
    problems = _check_meta(root / META_FILE)
    problems += _check_events(root)
    problems += _check_table_files(root / METRICS_DIR, root / METRICS_JSONL, METRICS_SCHEMA, frozenset(), None)
    if (root / FAULTS_FILE).exists():
        problems += _check_faults(root / FAULTS_FILE)
    if include_check and (root / CHECK_FILE).exists():
        problems += _check_check(root / CHECK_FILE)
    return problems


def _type_problems(obj: dict[str, Any], spec: dict[str, tuple[type | None, ...]], where: str) -> list[str]:
    out = []
    for key, allowed in spec.items():
        if key not in obj:
            out.append(f"{where}: missing key {key!r}")
            continue
        value = obj[key]
        ok = any(value is None if t is None else isinstance(value, t) and not (t is int and isinstance(value, bool))
                 for t in allowed)
        if not ok:
            names = ", ".join("null" if t is None else t.__name__ for t in allowed)
            out.append(f"{where}: key {key!r} is {type(value).__name__}, expected {names}")
    return out


def _check_meta(path: Path) -> list[str]:
    try:
        meta = read_json_object(path)
    except RunRecordError as e:
        return [str(e)]
    out = _type_problems(meta, META_KEYS, META_FILE)
    version = meta.get("schema_version")
    if isinstance(version, int) and version != SCHEMA_VERSION:
        out.append(f"{META_FILE}: schema_version {version}, this reader knows {SCHEMA_VERSION}")
    if isinstance(meta.get("run_id"), str) and not RUN_ID_RE.fullmatch(meta["run_id"]):
        out.append(f"{META_FILE}: run_id {meta['run_id']!r} is not YYYYmmddTHHMMSS-<scenario>-<6 hex>")
    if isinstance(meta.get("command"), list) and not all(isinstance(a, str) for a in meta["command"]):
        out.append(f"{META_FILE}: command must be a list of strings")
    if isinstance(meta.get("sysctl"), dict):
        out += _type_problems(meta["sysctl"], SYSCTL_KEYS, f"{META_FILE} sysctl")
    if isinstance(meta.get("host"), dict):
        out += _type_problems(meta["host"], HOST_KEYS, f"{META_FILE} host")
    return out


def _check_events(root: Path) -> list[str]:
    parquet_dir, jsonl = root / EVENTS_DIR, root / EVENTS_JSONL
    if not parquet_dir.is_dir() and not jsonl.is_file():
        return [f"no events: neither {EVENTS_DIR}/ nor {EVENTS_JSONL}"]
    out = []
    if parquet_dir.is_dir() and jsonl.is_file():
        out.append(f"both {EVENTS_DIR}/ and {EVENTS_JSONL} present (readers load both)")
    vocab = {"op": OPS, "outcome": OUTCOMES}
    return out + _check_table_files(parquet_dir, jsonl, EVENTS_FULL_SCHEMA, frozenset(EVENTS_OPTIONAL_SCHEMA.names),
                                    vocab)


def _check_table_files(parquet_dir: Path, jsonl: Path, schema: pa.Schema, optional: frozenset[str],
                       vocab: dict[str, frozenset[str]] | None) -> list[str]:
    out = []
    if parquet_dir.is_dir():
        parts = part_files(parquet_dir)
        stray = sorted(p.name for p in set(parquet_dir.glob("*.parquet")) - set(parts) if not p.name.startswith("."))
        out += [f"{parquet_dir.name}/{name}: not named part-<name>-<n>.parquet (ignored by readers)" for name in stray]
        for path in parts:
            out += _check_parquet(path, schema, optional, vocab, f"{parquet_dir.name}/{path.name}")
    if jsonl.is_file():
        out += _check_jsonl(jsonl, schema, optional, vocab)
    return out


def _check_parquet(path: Path, schema: pa.Schema, optional: frozenset[str], vocab: dict[str, frozenset[str]] | None,
                   where: str) -> list[str]:
    try:
        f = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as e:
        return [f"{where}: unreadable Parquet: {e}"]
    file_schema = f.schema_arrow
    out = []
    for field in schema:
        if field.name not in file_schema.names:
            if field.name not in optional:
                out.append(f"{where}: missing column {field.name!r}")
            continue
        actual = file_schema.field(field.name).type
        if actual != field.type:
            out.append(f"{where}: column {field.name!r} is {actual}, expected {field.type}")
    meta = f.metadata
    for i in range(meta.num_columns):
        name = meta.schema.column(i).name
        nulls = sum((meta.row_group(g).column(i).statistics.null_count or 0)
                    for g in range(meta.num_row_groups) if meta.row_group(g).column(i).statistics is not None)
        if nulls and name in schema.names:
            out.append(f"{where}: column {name!r} has {nulls} nulls")
    if vocab:
        present = [c for c in vocab if c in file_schema.names and file_schema.field(c).type == pa.string()]
        if present:
            out += _vocab_problems(f.read(columns=present), vocab, where)
    return out


def _check_jsonl(path: Path, schema: pa.Schema, optional: frozenset[str], vocab: dict[str, frozenset[str]] | None
                 ) -> list[str]:
    try:
        table = read_jsonl(path, schema)
    except RunRecordError as e:
        return [str(e).replace(str(path.parent) + os.sep, "")]
    out = []
    for name in schema.names:
        nulls = table[name].null_count
        if nulls == table.num_rows and table.num_rows and name not in optional:
            out.append(f"{path.name}: missing field {name!r}")
        elif nulls and name not in optional:
            out.append(f"{path.name}: field {name!r} missing or null in {nulls} of {table.num_rows} lines")
    if vocab:
        out += _vocab_problems(table, vocab, path.name)
    return out


def _vocab_problems(table: pa.Table, vocab: dict[str, frozenset[str]], where: str) -> list[str]:
    out = []
    for column, allowed in vocab.items():
        if column not in table.column_names:
            continue
        values = pc.unique(table[column].drop_null()).to_pylist()
        bad = sorted(str(v) for v in values if v not in allowed)
        if bad:
            out.append(f"{where}: column {column!r} has values {bad[:5]}, expected one of {sorted(allowed)}")
    return out


def _check_faults(path: Path) -> list[str]:
    out = []
    with path.open("rb") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError as e:
                out.append(f"{FAULTS_FILE}:{n}: not JSON: {e}")
                continue
            if not isinstance(obj, dict):
                out.append(f"{FAULTS_FILE}:{n}: expected a JSON object")
                continue
            out += _type_problems(obj, FAULT_KEYS, f"{FAULTS_FILE}:{n}")
    return out


def _check_check(path: Path) -> list[str]:
    try:
        check = read_json_object(path)
    except RunRecordError as e:
        return [str(e)]
    out = [f"{CHECK_FILE}: missing key {k!r}" for k in CHECK_KEYS if k not in check]
    if "schema_version" in check and check["schema_version"] != SCHEMA_VERSION:
        out.append(f"{CHECK_FILE}: schema_version {check['schema_version']}, this reader knows {SCHEMA_VERSION}")
    return out
