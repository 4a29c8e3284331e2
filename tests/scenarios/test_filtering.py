"""The filtering scenario (scenarios/filtering.py, filtering_control.py): its three filters select exactly the
same messages, and a short headless locust run against a real embedded broker records, per mode, complete
deliveries of exactly the selected messages with the broker's CPU, the bytes on the wire and the delivery
rate — which the filtering report (spark_reports/jobs/filtering.py) turns into a page, a CSV and charts. The
FilterServer mode runs when the client has class filters and is otherwise skipped with that reason."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from reference_broker.filter.sql92 import compile_selector
from scenarios import filtering_control as fc
from spark_reports.html_report import local_references
from spark_reports.jobs import filtering as report
from tests.scenarios.test_e2e import SMALL_BROKER, run_locust


@pytest.mark.parametrize("selectivity", [0.01, 0.1, 0.25, 0.5, 1.0])
def test_the_tag_the_selector_and_the_class_filter_select_the_same_messages(selectivity: float) -> None:
    cut = fc.threshold(selectivity)
    selector = compile_selector(f"sel < {cut}")
    namespace: dict[str, Any] = {}
    exec(fc.filter_source(cut), namespace)  # the class filter the FilterServer mode uploads
    n = 1000
    picked = set()
    for i in range(n):
        tags, props = fc.message_fields(i, cut)
        by_tag = tags == "hit"
        by_sql = selector.matches({**props, "TAGS": tags})
        by_class = namespace["match"](type("M", (), {"properties": props})())
        assert by_tag == by_sql == by_class, (i, tags, props)
        if by_tag:
            picked.add(f"k{i}")
    assert picked == fc.expected_keys(n, cut, "k")
    assert len(picked) == round(n * selectivity)  # the chosen share, exactly (sel cycles through 0..99)


@pytest.mark.e2e
@pytest.mark.slow  # about 25 s: locust's 12 s run, the embedded broker's start and the run's end
def test_a_short_filtering_run_compares_the_modes_and_reports_them(tmp_path: Path) -> None:
    proc, run = run_locust("filtering", tmp_path, *SMALL_BROKER, "-t", "12s", "--filter-messages", "2000",
                           "--selectivity", "0.1", timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    meta = json.loads((run / "meta.json").read_text(encoding="utf-8"))
    assert meta["broker"]["enablePropertyFilter"] in (True, "true")
    f = meta["results"]["filtering"]
    assert "controller_error" not in meta["results"], meta["results"]
    assert f["messages"] == 2000 and f["produce"]["messages"] == 2000 and f["threshold"] == 10
    modes = {m["mode"]: m for m in f["modes"]}
    assert set(modes) == {"tag", "sql92", "filterserver"}
    measured = ["tag", "sql92"]
    if "skipped" in modes["filterserver"]:
        assert fc.filter_server_support() is not None
        assert modes["filterserver"]["skipped"] == fc.filter_server_support()
    else:
        measured.append("filterserver")
    for name in measured:
        m = modes[name]
        assert m["complete"] and m["expected"] == m["delivered"] == 200 and m["unexpected"] == 0, m
        assert m["seconds"] > 0 and m["msgs_per_s"] > 0
        assert m["broker_cpu_s"] is not None and m["broker_cpu_s"] >= 0
        # every delivered message crossed the wire with its 1 KiB body; what did not match did not
        assert 200 * 1024 < m["wire_bytes"] < 2000 * 1024, m

    out = tmp_path / "reports"
    output = report.run(None, run.parent, out)  # type: ignore[arg-type]  # the job needs no Spark session
    page = output.index.read_text(encoding="utf-8")
    assert all((output.index.parent / r).is_file() for r in local_references(page))
    assert run.name in page
    with open(out / "filtering" / "filtering_modes.csv", encoding="utf-8") as fh:
        rows = {r["mode"]: r for r in csv.DictReader(fh)}
    assert set(rows) == {"tag", "sql92", "filterserver"}
    for name in measured:
        assert int(rows[name]["delivered"]) == 200
        assert float(rows[name]["wire_bytes_per_msg"]) == pytest.approx(modes[name]["wire_bytes_per_msg"])
