"""Every report over a real short run: locust drives the backlog scenario against a broker it starts, and the
Spark jobs turn that run record into pages, figures and findings (no synthetic data)."""

from __future__ import annotations

import html
import json
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark_reports import REPORT_NAMES
from spark_reports.claims import CLAIMS, ClaimId, Verdict, read_findings
from spark_reports.cli import JOBS
from spark_reports.html_report import local_references
from spark_reports.site import write_site_index

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.e2e
@pytest.mark.slow
def test_reports_over_a_real_backlog_run(spark: SparkSession, tmp_path: Path) -> None:
    runs, out = tmp_path / "runs", tmp_path / "reports"
    p = subprocess.run([sys.executable, "-m", "locust", "-f", str(ROOT / "scenarios" / "backlog.py"), "--headless",
                        "-t", "14s", "--run-dir", str(runs), "--only-summary", "--backlog-bytes", str(4 << 20)],
                       cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    (run_dir,) = list(runs.iterdir())
    backlog = json.loads((run_dir / "meta.json").read_text(encoding="utf-8"))["results"]["backlog"]
    assert backlog.get("drain_s"), backlog  # the run built and drained a backlog

    for name in REPORT_NAMES:
        output = JOBS[name].run(spark, runs, out)
        page = output.index.read_text(encoding="utf-8")
        assert all((output.index.parent / r).is_file() for r in local_references(page)), name
        assert run_dir.name in page or name in ("recovery", "queues", "flush-compare", "transactions",
                                                              "filtering", "profiles"), name
    index = write_site_index(out, runs)
    front = index.read_text(encoding="utf-8")
    assert all((index.parent / r).is_file() for r in local_references(front))
    assert all(html.escape(c.text) in front for c in CLAIMS)  # one row per seed claim

    findings = {f.claim: f for f in read_findings(out)}
    # What one fault-free backlog run can show, it shows from its own records.
    capacity = findings[ClaimId.PAGE_CACHE_CAPACITY]
    assert capacity.verdict in (Verdict.HELD, Verdict.NOT_HELD) and run_dir.name in capacity.runs
    assert 1024 < capacity.figures["bytes_per_message"] < 2048  # a 1 KiB body plus header, unit and index
    overflow = findings[ClaimId.OFFSET_616_YEARS]
    assert overflow.verdict is Verdict.HELD and overflow.figures["peak_acks_per_s"] > 0
    # ... and what it cannot show stays "not measured yet".
    assert findings[ClaimId.SYNC_NO_LOSS].verdict is Verdict.NOT_MEASURED
    assert findings[ClaimId.RECOVERY_CHECKPOINT].verdict is Verdict.NOT_MEASURED
    acc = (out / "accumulation" / "accumulation.csv").read_text(encoding="utf-8")
    assert run_dir.name in acc
