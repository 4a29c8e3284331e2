"""validate_run: each kind of deviation from schema v1 is reported, and a good run has no problems."""

# pyarrow ships no type information.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness.records import EVENTS_SCHEMA, load_events, validate_run
from tests.harness.runs import write_run

ROWS = [dict(op="send", key="a", queue_offset=0), dict(op="receive", key="a", queue_offset=0, worker="c0")]


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return write_run(tmp_path, ROWS)


def edit_meta(run: Path, **changes: object) -> None:
    meta = json.loads((run / "meta.json").read_text())
    for k, v in changes.items():
        if v is KeyError:
            del meta[k]
        else:
            meta[k] = v
    (run / "meta.json").write_text(json.dumps(meta))


def replace_part(run: Path, table: pa.Table) -> None:
    parts = sorted((run / "events").glob("part-*.parquet"))
    for p in parts:
        p.unlink()
    pq.write_table(table, run / "events" / "part-w0-000000.parquet")


def test_a_written_run_is_valid(run: Path) -> None:
    assert validate_run(run) == []


def test_not_a_directory_and_no_meta(tmp_path: Path) -> None:
    assert validate_run(tmp_path / "nope") == [f"{tmp_path / 'nope'}: not a run directory (no such directory)"]
    assert validate_run(tmp_path) == [f"{tmp_path}: not a run directory: no meta.json"]


def test_missing_meta_key(run: Path) -> None:
    edit_meta(run, host=KeyError)
    assert validate_run(run) == ["meta.json: missing key 'host'"]


def test_wrong_schema_version(run: Path) -> None:
    edit_meta(run, schema_version=2)
    assert validate_run(run) == ["meta.json: schema_version 2, this reader knows 1"]


def test_meta_value_types(run: Path) -> None:
    edit_meta(run, started_at_ns="yesterday", git_rev=None, fio={"seqw": 1}, command=["ok", 3])
    assert validate_run(run) == ["meta.json: key 'started_at_ns' is str, expected int",
                                 "meta.json: command must be a list of strings"]


def test_bool_is_not_an_int_in_meta(run: Path) -> None:
    edit_meta(run, started_at_ns=True)
    assert validate_run(run) == ["meta.json: key 'started_at_ns' is bool, expected int"]


def test_nested_sysctl_and_host_keys(run: Path) -> None:
    edit_meta(run, sysctl={"profile": None, "applied": "yes", "values": {}}, host={"cores": 2})
    problems = validate_run(run)
    assert "meta.json sysctl: key 'applied' is str, expected bool" in problems
    assert "meta.json sysctl: missing key 'reason'" in problems
    assert "meta.json host: missing key 'ram_bytes'" in problems


def test_bad_run_id(run: Path) -> None:
    edit_meta(run, run_id="my-run")
    assert validate_run(run) == ["meta.json: run_id 'my-run' is not YYYYmmddTHHMMSS-<scenario>-<6 hex>"]


def test_meta_not_json(run: Path) -> None:
    (run / "meta.json").write_text("{nope")
    [problem] = validate_run(run)
    assert "meta.json: cannot read JSON" in problem


def test_wrong_column_type_in_parquet(run: Path) -> None:
    t = load_events(run)
    i = t.schema.get_field_index("queue_id")
    replace_part(run, t.set_column(i, "queue_id", t["queue_id"].cast(pa.int64())))
    assert validate_run(run) == ["events/part-w0-000000.parquet: column 'queue_id' is int64, expected int32"]
    # The reader still reads it: the values fit.
    assert load_events(run)["queue_id"].type == pa.int32()


def test_missing_required_column_but_not_optional(run: Path) -> None:
    t = load_events(run)
    replace_part(run, t.drop_columns(["session", "born_ns"]))
    assert validate_run(run) == ["events/part-w0-000000.parquet: missing column 'born_ns'"]


def test_nulls_in_parquet(run: Path) -> None:
    t = load_events(run)
    i = t.schema.get_field_index("key")
    replace_part(run, t.set_column(i, pa.field("key", pa.string()), pa.array(["a", None])))
    assert validate_run(run) == ["events/part-w0-000000.parquet: column 'key' has 1 nulls"]


def test_unknown_op_and_outcome_values(run: Path) -> None:
    t = load_events(run)
    t = t.set_column(0, "op", pa.array(["send", "poll"]))
    t = t.set_column(t.schema.get_field_index("outcome"), "outcome", pa.array(["ok", "timeout"]))
    replace_part(run, t)
    assert validate_run(run) == [
        "events/part-w0-000000.parquet: column 'op' has values ['poll'], expected one of ['ack', 'read', 'receive', "
        "'send', 'tx']",
        "events/part-w0-000000.parquet: column 'outcome' has values ['timeout'], expected one of "
        "['fail', 'ok', 'unknown']",
    ]


def test_stray_and_unreadable_parquet_files(run: Path) -> None:
    (run / "events" / "data.parquet").write_bytes(b"x")
    (run / "events" / "part-w9-000000.parquet").write_bytes(b"not parquet")
    problems = validate_run(run)
    assert problems[0] == "events/data.parquet: not named part-<name>-<n>.parquet (ignored by readers)"
    assert problems[1].startswith("events/part-w9-000000.parquet: unreadable Parquet")
    assert len(problems) == 2


def test_no_events_and_both_event_forms(tmp_path: Path, run: Path) -> None:
    for p in (run / "events").iterdir():
        p.unlink()
    (run / "events").rmdir()
    assert validate_run(run) == ["no events: neither events/ nor events.jsonl"]
    both = write_run(tmp_path / "both", ROWS)
    (both / "events.jsonl").write_text("")
    assert validate_run(both) == ["both events/ and events.jsonl present (readers load both)"]


def test_jsonl_problems(tmp_path: Path) -> None:
    run = write_run(tmp_path, ROWS, fmt="jsonl")
    assert validate_run(run) == []
    lines = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    del lines[0]["store_ns"]
    (run / "events.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert validate_run(run) == ["events.jsonl: field 'store_ns' missing or null in 1 of 2 lines"]
    lines[0]["store_ns"] = "later"
    (run / "events.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    [problem] = validate_run(run)
    assert problem.startswith("events.jsonl: cannot read JSON lines")


def test_jsonl_without_a_column_at_all(tmp_path: Path) -> None:
    run = write_run(tmp_path, ROWS, fmt="jsonl")
    lines = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    for x in lines:
        del x["worker"], x["session"]
    (run / "events.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert validate_run(run) == ["events.jsonl: missing field 'worker'"]


def test_metrics_type_problem(run: Path) -> None:
    (run / "metrics").mkdir()
    pq.write_table(pa.table({"ts_ns": pa.array([1], pa.int64()), "metric": ["x"], "value": pa.array([1], pa.int64()),
                             "label": [""]}), run / "metrics" / "part-main-000000.parquet")
    assert validate_run(run) == ["metrics/part-main-000000.parquet: column 'value' is int64, expected double"]


def test_fault_lines(run: Path) -> None:
    (run / "faults.jsonl").write_text('{"ts_ns": 1, "kind": "kill9", "target": "b", "params": {}}\n'
                                      "\n"
                                      "not json\n"
                                      '{"ts_ns": 1.5, "kind": "kill9", "target": "b"}\n')
    problems = validate_run(run)
    assert problems[0].startswith("faults.jsonl:3: not JSON")
    assert problems[1:] == ["faults.jsonl:4: key 'ts_ns' is float, expected int",
                            "faults.jsonl:4: missing key 'params'"]


def test_check_json(run: Path) -> None:
    (run / "check.json").write_text(json.dumps({"schema_version": 1, "lost": 0}))
    problems = validate_run(run)
    assert "check.json: missing key 'attempted'" in problems
    assert validate_run(run, include_check=False) == []


def test_events_schema_is_the_v1_contract() -> None:
    assert [(f.name, str(f.type)) for f in EVENTS_SCHEMA] == [
        ("op", "string"), ("key", "string"), ("topic", "string"), ("queue_id", "int32"), ("queue_offset", "int64"),
        ("intended_ns", "int64"), ("start_ns", "int64"), ("end_ns", "int64"), ("outcome", "string"),
        ("code", "int32"), ("bytes", "int32"), ("worker", "string"), ("born_ns", "int64"), ("store_ns", "int64")]
