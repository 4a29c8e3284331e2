"""Report pages reference only files that exist, and the front page links every report."""

import pytest

from spark_reports.html_report import MissingReferenceError, Page, local_references
from spark_reports.jobs import latency, loss, offset_overflow


def test_every_page_references_only_existing_files(reports):
    pages = sorted(reports.out_dir.rglob("*.html"))
    assert {p.relative_to(reports.out_dir).as_posix() for p in pages} == {
        "index.html", "findings.html", *(f"{name}/index.html" for name in reports.outputs)}
    for page in pages:
        refs = local_references(page.read_text(encoding="utf-8"))
        assert refs or page.name == "findings.html", page  # no findings recorded: a page without links
        assert [r for r in refs if not (page.parent / r).is_file()] == [], page


def test_front_page_links_each_report(reports):
    refs = local_references((reports.out_dir / "index.html").read_text(encoding="utf-8"))
    # the claims table links the reports holding evidence too: every link is to a report written here, or to
    # the findings about RocketMQ
    assert set(refs) == {f"{name}/index.html" for name in reports.outputs} | {"findings.html"}


def test_each_report_states_runs_configuration_and_machine(reports, synth):
    for name in reports.outputs:
        page = (reports.out_dir / name / "index.html").read_text(encoding="utf-8")
        assert "Runs used" in page
        for run_id in synth.expected:
            assert run_id in page
        for fact in ("ASYNC_FLUSH", "SYNC_FLUSH", "durable", "synthetic (no broker ran)", "cores"):
            assert fact in page, (name, fact)


def test_page_refuses_a_missing_figure(tmp_path):
    page = Page("x")
    page.figure("missing.png", "nothing")
    with pytest.raises(MissingReferenceError):
        page.write(tmp_path / "index.html")
    assert not (tmp_path / "index.html").exists()


def test_external_links_and_anchors_are_not_local():
    html = '<a href="https://example.org/x">x</a><a href="#top">t</a><img src="a.png"><a href="b/c.csv">c</a>'
    assert local_references(html) == ["a.png", "b/c.csv"]


def test_reports_over_an_empty_runs_directory_still_write_valid_pages(spark, tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "out"
    runs.mkdir()
    for job in (offset_overflow, latency, loss):
        output = job.run(spark, runs, out)
        page = output.index.read_text(encoding="utf-8")
        assert "No runs with records were found" in page
        assert all((output.index.parent / r).is_file() for r in local_references(page))
    assert "616.9314558" in (out / "offset-overflow" / "index.html").read_text(encoding="utf-8")
