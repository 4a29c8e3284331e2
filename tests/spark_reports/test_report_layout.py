"""The reports' layout: a page opens with its computed one-sentence finding and its main figure, the latency
figures are small multiples (one panel per scenario), and chaos runs get a latency-over-time scatter with each
fault shaded from its start to its recovery as faults.jsonl records them."""

import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
from PIL import Image

from spark_reports.fault_bands import fault_bands
from spark_reports.html_report import Page
from spark_reports.jobs import latency
from spark_reports.plots import PANELS_KEY, Band

S = 10**9


class _Body(HTMLParser):
    """The page's top-level blocks after the title, as (tag, class, text, src) in order."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks: list[dict[str, str]] = []
        self._depth = 0
        self._in_body = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "body":
            self._in_body = True
            return
        if not self._in_body:
            return
        if self._depth == 0:
            self.blocks.append({"tag": tag, "class": a.get("class", ""), "text": "", "src": ""})
        if tag == "img" and self.blocks:
            self.blocks[-1]["src"] = a.get("src", "")
        if tag not in ("img", "br"):
            self._depth += 1

    def handle_endtag(self, tag: str) -> None:
        if self._in_body and tag not in ("img", "br", "body", "html"):
            self._depth -= 1

    def handle_data(self, data: str) -> None:
        if self._in_body and self.blocks:
            self.blocks[-1]["text"] += data


def blocks(html_text: str) -> list[dict[str, str]]:
    parser = _Body()
    parser.feed(html_text)
    return [{**b, "text": b["text"].strip()} for b in parser.blocks if b["tag"] != "h1"]


def panels(png: Path) -> list[str]:
    with Image.open(png) as img:
        return str(img.text.get(PANELS_KEY, "")).splitlines()  # type: ignore[attr-defined]


def test_page_opens_with_its_finding_then_the_main_figure(tmp_path):
    (tmp_path / "a.png").write_bytes(b"")
    (tmp_path / "b.png").write_bytes(b"")
    page = Page("T")
    page.paragraph("method first")
    page.table(["x"], [("1",)])
    page.figure("a.png", "first figure")
    page.figure("b.png", "the main one", main=True)
    page.finding("It held in 3 of 3 runs.")
    page.write(tmp_path / "index.html")
    got = blocks((tmp_path / "index.html").read_text())
    assert [b["class"] for b in got[:2]] == ["finding", "figure"]
    assert got[0]["text"] == "It held in 3 of 3 runs." and got[1]["src"] == "b.png"
    assert [b["tag"] for b in got[2:]] == ["p", "table", "p"]  # the rest in the order added


def test_a_page_without_a_finding_keeps_its_order(tmp_path):
    page = Page("T")
    page.paragraph("one")
    page.heading("two")
    assert [b["tag"] for b in blocks(page.render())] == ["p", "h2"]


def test_fault_bands_pair_each_fault_with_what_ends_it():
    t0 = 1_000 * S
    faults = [  # as chaos writes them: the kill line after the settle, so out of time order in the file
        {"ts_ns": t0 + 15 * S, "kind": "restart", "target": "broker-a", "params": {"cycle": 0}},
        {"ts_ns": t0 + 12 * S, "kind": "kill9", "target": "broker-a", "params": {"cycle": 0}},
        {"ts_ns": t0 + 20 * S, "kind": "pause", "target": "broker-a", "params": {"cycle": 1}},
        {"ts_ns": t0 + 21 * S, "kind": "restart", "target": "broker-b", "params": {"cycle": 1}},  # another broker
        {"ts_ns": t0 + 22 * S, "kind": "resume", "target": "broker-a", "params": {"cycle": 1}},
        {"ts_ns": t0 + 25 * S, "kind": "drop_caches", "target": "host", "params": {}},  # no fault
        {"ts_ns": t0 + 30 * S, "kind": "master_kill9", "target": "broker-a", "params": {"cycle": 2}},
    ]
    assert fault_bands(faults, t0) == [Band("kill9 #0", 12.0, 15.0), Band("pause #1", 20.0, 22.0),
                                       Band("master_kill9 #2", 30.0, 30.0)]


@pytest.fixture(scope="module")
def layout_report(spark, synth, tmp_path_factory):
    """The synthetic runs in two scenarios, one of them with a kill -9 and its restart, through the latency job."""
    runs_dir = tmp_path_factory.mktemp("layout-runs")
    ids = sorted(synth.expected)
    for i, run_id in enumerate(ids):
        shutil.copytree(synth.runs_dir / run_id, runs_dir / run_id)
        meta_path = runs_dir / run_id / "meta.json"
        meta = json.loads(meta_path.read_text())
        meta["scenario"] = "scenario-a" if i < 2 else "scenario-b"
        meta_path.write_text(json.dumps(meta))
    chaos = ids[0]
    t0 = json.loads((runs_dir / chaos / "meta.json").read_text())["started_at_ns"]
    kill, back = t0 + 12 * S, t0 + 15_500_000_000
    (runs_dir / chaos / "faults.jsonl").write_text(
        json.dumps({"ts_ns": kill, "kind": "kill9", "target": "broker-a", "params": {"cycle": 0}}) + "\n"
        + json.dumps({"ts_ns": back, "kind": "restart", "target": "broker-a", "params": {"cycle": 0}}) + "\n")
    for run_id in ids[1:]:
        (runs_dir / run_id / "faults.jsonl").write_text("")
    out = tmp_path_factory.mktemp("layout-out")
    output = latency.run(spark, runs_dir, out)
    return output, chaos, (kill - t0) / S, (back - t0) / S


def test_latency_figures_have_one_panel_per_scenario(layout_report):
    output, *_ = layout_report
    for metric in latency.Metric:
        png = output.index.parent / f"cdf_{metric.value}.png"
        assert panels(png) == ["scenario-a", "scenario-b"]
        assert panels(output.index.parent / f"windows_{metric.value}.png") == ["scenario-a", "scenario-b"]


def test_latency_page_opens_with_the_worst_p99_and_its_percentile_plot(layout_report, synth):
    output, *_ = layout_report
    got = blocks(output.index.read_text())
    assert got[0]["class"] == "finding"
    assert got[1]["src"] == "cdf_send_latency.png"
    worst = max(e.latency["send_latency"]["p99"] for e in synth.expected.values())
    best = min(e.latency["send_latency"]["p99"] for e in synth.expected.values())
    numbers = re.findall(r"[\d.,]+(?= ms)", got[0]["text"])
    assert float(numbers[0].replace(",", "")) == pytest.approx(best / 1e6, rel=1e-2)
    assert float(numbers[1].replace(",", "")) == pytest.approx(worst / 1e6, rel=1e-2)
    assert "over 4 runs in 2 scenarios" in got[0]["text"]
    assert [b["tag"] for b in got].index("table") > 1  # tables below the finding and its figure


def test_chaos_scatter_shades_the_fault_from_its_start_to_its_restart(layout_report):
    output, chaos, start_s, end_s = layout_report
    png = output.index.parent / f"faults_{chaos}.png"
    (band,) = panels(png)
    label, start, end = band.removeprefix("band ").rsplit(" ", 2)
    assert label == "kill9 #0"
    assert (float(start), float(end)) == pytest.approx((start_s, end_s), abs=1e-3)
    page = output.index.read_text()
    assert f"faults_{chaos}.png" in page
    others = [p.name for p in output.index.parent.glob("faults_*.png")]
    assert others == [png.name]  # runs without faults get no scatter
