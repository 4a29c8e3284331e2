"""A report's ending (``report_io.finish_report``): CSV links, the claims judged, the runs used, the page."""

import json

from spark_reports.html_report import Page, local_references
from spark_reports.report_io import finish_report, fixed, make_report_dir


def test_finish_report_writes_the_page_with_its_links_findings_and_runs(tmp_path):
    directory = make_report_dir(tmp_path, "demo")
    csv = directory / "rows.csv"
    csv.write_text("a\n1\n", encoding="utf-8")
    png = directory / "plot.png"
    png.write_bytes(b"")
    page = Page("Demo")
    out = finish_report(page, directory, "demo", [], [csv, png], link_csvs=True, findings=[])
    assert (out.name, out.index, out.files) == ("demo", directory / "index.html", (csv, png))
    text = out.index.read_text(encoding="utf-8")
    assert local_references(text) == ["rows.csv"]
    assert "Claims judged from these runs" in text and "Runs used" in text
    assert json.loads((directory / "findings.json").read_text(encoding="utf-8")) == []


def test_finish_report_without_options_adds_only_the_runs(tmp_path):
    directory = make_report_dir(tmp_path, "plain")
    out = finish_report(Page("Plain"), directory, "plain", [], [])
    text = out.index.read_text(encoding="utf-8")
    assert "Runs used" in text and "Claims judged" not in text
    assert not (directory / "findings.json").exists()


def test_fixed_cells():
    assert fixed(None, 2) is None
    assert fixed(1234.5, 1) == "1,234.5"
    assert fixed(1234.5) == "1,234"
