"""harness/records/findings.py: findings appended as JSON lines, read back whole, a bad line reported, not fatal."""

from __future__ import annotations

import json
from pathlib import Path

from harness.records.findings import FINDINGS_FILE, Finding, FindingKind, read, record


def _finding(key: str = "chaos/kill9/sync/default: loss") -> Finding:
    return Finding(key=key, kind=FindingKind.LOSS, broker="V4_9_8", title="lost 3", detail="3 absent",
                   reproduce="python -m chaos kill9 --broker-impl rocketmq", source="chaos matrix", run_dir="/r/1")


def test_recorded_findings_read_back_in_order_with_a_time(tmp_path: Path) -> None:
    path = record(tmp_path / "runs", _finding("a"))
    record(tmp_path / "runs", _finding("b"))
    assert path == tmp_path / "runs" / FINDINGS_FILE
    found, problems = read(tmp_path / "runs")
    assert problems == [] and [f.key for f in found] == ["a", "b"]
    assert found[0].kind is FindingKind.LOSS and found[0].seen_at.endswith("Z")
    assert found[0] == Finding.from_json(found[0].to_json())


def test_a_line_that_is_not_a_finding_is_reported_and_skipped(tmp_path: Path) -> None:
    record(tmp_path, _finding("good"))
    with (tmp_path / FINDINGS_FILE).open("a", encoding="utf-8") as f:
        f.write("{not json\n")
        f.write(json.dumps([1, 2]) + "\n")
        f.write(json.dumps({**_finding().to_json(), "kind": "explosion"}) + "\n")
    found, problems = read(tmp_path / FINDINGS_FILE)
    assert [f.key for f in found] == ["good"]
    assert len(problems) == 3 and all("not a finding" in p for p in problems)
    assert problems[0].endswith(f"{FINDINGS_FILE}:2: not a finding (JSONDecodeError: Expecting property name "
                                "enclosed in double quotes: line 1 column 2 (char 1))")


def test_no_file_is_no_findings(tmp_path: Path) -> None:
    assert read(tmp_path) == ([], [])
