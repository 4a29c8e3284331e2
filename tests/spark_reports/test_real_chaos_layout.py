"""The latency report over a real chaos run: a broker killed -9 twice under load and restarted by
``python -m chaos matrix``, then the Spark job; the scatter shades each kill from its faults.jsonl line to the
restart's, and the page opens with its finding (no synthetic data)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark_reports.claims import ClaimId, Verdict
from spark_reports.jobs import latency, loss
from spark_reports.site import write_site_index
from tests.spark_reports.test_report_layout import blocks, panels

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.e2e
@pytest.mark.slow
def test_latency_scatter_and_claim_rows_over_a_real_kill9_run(spark: SparkSession, tmp_path: Path) -> None:
    runs, out = tmp_path / "runs", tmp_path / "reports"
    p = subprocess.run([sys.executable, "-m", "chaos", "matrix", "--flush", "sync", "--faults", "kill9", "--profiles",
                        "default", "--cycles", "2", "--runs-dir", str(runs), "--work-dir", str(tmp_path / "work")],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    (run_dir,) = [d for d in runs.iterdir() if (d / "meta.json").is_file()]
    t0 = json.loads((run_dir / "meta.json").read_text())["started_at_ns"]
    lines = [json.loads(x) for x in (run_dir / "faults.jsonl").read_text().splitlines() if x.strip()]
    kills = {f["params"]["cycle"]: f["ts_ns"] for f in lines if f["kind"] == "kill9"}
    restarts = {f["params"]["cycle"]: f["ts_ns"] for f in lines if f["kind"] == "restart"}
    assert sorted(kills) == sorted(restarts) == [0, 1]

    output = latency.run(spark, runs, out)
    drawn = [b.removeprefix("band ").rsplit(" ", 2) for b in panels(output.index.parent / f"faults_{run_dir.name}.png")]
    assert [label for label, _, _ in drawn] == ["kill9 #0", "kill9 #1"]
    for (_, start, end), c in zip(drawn, (0, 1), strict=True):
        assert float(start) == pytest.approx((kills[c] - t0) / 1e9, abs=1e-3)
        assert float(end) == pytest.approx((restarts[c] - t0) / 1e9, abs=1e-3)
    first = blocks(output.index.read_text())[0]
    assert first["class"] == "finding" and first["text"].endswith("over 1 run in 1 scenario.")

    loss.run(spark, runs, out)
    front = write_site_index(out, runs).read_text()
    row = front[front.index(f'id="{ClaimId.SYNC_NO_LOSS.value}"'):].split("</tr>")[0]
    assert Verdict.HELD.value in row and "held in 1 of 1 run; 0 acknowledged lost; one run:" in row
