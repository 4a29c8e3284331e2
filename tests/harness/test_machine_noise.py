"""harness.machine_noise: the load average and a quick fio baseline before and after the main job's
experiments, and the claims page's table of them. Real fio on the runs' filesystem (its entry says why when
fio cannot run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from harness.records import noise
from spark_reports.site import write_site_index


def test_samples_are_appended_and_shown_on_the_claims_page(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for label in ("before", "after"):
        done = subprocess.run([sys.executable, "-m", "harness.machine_noise", str(runs), "--label", label],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
    samples = noise.read(runs)
    assert [s["label"] for s in samples] == ["before", "after"]
    for s in samples:
        assert len(s["loadavg"]) == 3 and s["cpus"] >= 1
        fio = s["fio"]
        assert "skipped" in fio or fio["seq_write_bytes_per_s"] > 0, fio
    with (runs / noise.NOISE_FILE).open("a") as f:
        f.write("not json\n")  # a torn line is left out, not raised
    assert len(noise.read(runs)) == 2
    html = write_site_index(tmp_path / "out", runs).read_text()
    assert "The machine&#x27;s noise at the time" in html or "The machine's noise at the time" in html
    assert json.dumps(samples[0]["loadavg"][0]) in html or f"{samples[0]['loadavg'][0]:.2f}" in html


def test_without_samples_the_page_says_how_to_take_them(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    html = write_site_index(tmp_path / "out", tmp_path / "runs").read_text()
    assert "python -m harness.machine_noise" in html
