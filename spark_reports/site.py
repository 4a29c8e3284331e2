"""The front page `OUT/index.html`: links every report that has been written under OUT."""

from pathlib import Path
from typing import Final

from spark_reports import REPORT_NAMES
from spark_reports.html_report import Page

DESCRIPTIONS: Final = {
    "offset-overflow": "Years until a 64-bit commit-log / consume-queue offset overflows: the seed's table "
                       "and the horizon at the measured peak ingest rate.",
    "latency": "Send latency, send-to-consume latency and publish delay percentiles per run and per 10 s "
               "window, with CDFs comparing runs.",
    "loss": "Acknowledged, lost, duplicated and recovered messages per run, by flush mode × fault × sysctl "
            "profile.",
}


def write_site_index(out_dir: Path) -> Path:
    """Write OUT/index.html listing the reports present in OUT (each report's own index.html)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    present = [name for name in REPORT_NAMES if (out_dir / name / "index.html").is_file()]
    page = Page("RocketMQ store lab — reports")
    if present:
        page.heading("Reports")
        page.links([(f"{name}/index.html", f"{name}: {DESCRIPTIONS[name]}") for name in present])
    else:
        page.paragraph("No reports have been written yet.")
    missing = [name for name in REPORT_NAMES if name not in present]
    if missing:
        page.paragraph("Not generated in this directory: " + ", ".join(missing) + ".", note=True)
    index = out_dir / "index.html"
    page.write(index)
    return index
