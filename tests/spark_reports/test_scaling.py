"""The scaling report over hand-written rows: medians and spread over sessions, the finding sentence computed
from the points, one panel per curve."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from PIL import Image
from pyspark.sql import SparkSession

from harness.records.scaling import SCALING_FILE
from spark_reports.jobs import scaling
from spark_reports.plots import PANELS_KEY


def _rows(path: Path) -> None:
    rows = []
    for session, k in (("a", 1.0), ("b", 1.2), ("c", 0.8)):
        rows += [
            {"session": session, "curve": "size", "x": 128, "target": "broker", "msgs_per_s": 20_000 * k,
             "p99_ms": 2.0 * k, "broker_cpu_us_per_msg": 40.0},
            {"session": session, "curve": "size", "x": 65536, "target": "broker", "msgs_per_s": 2_000 * k,
             "p99_ms": 20.0},
            {"session": session, "curve": "size", "x": 65536, "target": "bare", "msgs_per_s": 8_000.0},
            {"session": session, "curve": "size", "x": 65536, "target": "fio", "msgs_per_s": 20_000.0},
            {"session": session, "curve": "queues", "x": 1, "target": "broker", "msgs_per_s": 30_000.0},
            {"session": session, "curve": "queues", "x": 10_000, "target": "broker", "msgs_per_s": 27_000.0},
            {"session": session, "curve": "groups", "x": 1, "target": "broker", "msgs_per_s": 10_000.0},
            {"session": session, "curve": "groups", "x": 2, "target": "broker", "msgs_per_s": 18_000.0},
        ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_medians_spread_and_the_finding(spark: SparkSession, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    _rows(runs / SCALING_FILE)
    out = scaling.run(spark, runs, tmp_path / "out")
    with open(out.index.parent / "scaling.csv", encoding="utf-8") as f:
        table = {(r["curve"], r["x"], r["target"]): r for r in csv.DictReader(f)}
    small = table[("size", "128", "broker")]
    assert (small["msg/s (median)"], small["min"], small["max"], small["sessions"]) == ("20,000", "16,000",
                                                                                       "24,000", "3")
    page = out.index.read_text()
    # 2,000 of the bare broker's 8,000 and fio's 20,000 at 64 KiB; 27,000 / 30,000 at 10,000 queues.
    assert "25% of bare, 10% of fio there" in page
    assert "10,000 queues run at 0.90× one queue" in page
    assert "2 groups give 1.80× one group" in page
    assert page.index("10,000 queues run at") < page.index("rate.png"), "the finding comes before the plot"


def test_one_panel_per_curve(tmp_path: Path) -> None:
    pts = [scaling.Point(c, x, "broker", 100.0 * x, 1, 1, None, 1.0, None, 1, False)
           for c in ("size", "depth", "backlog") for x in (1, 10)]
    fig_path = scaling.panels(tmp_path / "p.png", "t", pts, "rate", "msg/s")
    with Image.open(fig_path) as img:
        assert str(img.text.get(PANELS_KEY, "")).splitlines() == ["size", "depth", "backlog"]  # type: ignore[attr-defined]


def test_no_rows_says_so(spark: SparkSession, tmp_path: Path) -> None:
    out = scaling.run(spark, tmp_path, tmp_path / "out")
    assert "No scaling rows" in out.index.read_text()
