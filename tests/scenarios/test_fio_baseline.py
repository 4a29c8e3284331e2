"""The fio baseline step: figures for meta.json from tiny jobs, or the reason it was skipped."""

import shutil

import pytest

from harness.fio_baseline import fio_baseline
from reference_broker.bench.fio import FioParams

TINY = FioParams(seq_write_size_bytes=4 << 20, sync_size_bytes=1 << 20, sync_runtime_s=0.2,
                 randread_size_bytes=4 << 20, randread_runtime_s=0.2, randread_iodepth=4)


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio not installed")
def test_figures(tmp_path):
    r = fio_baseline(tmp_path, params=TINY)
    assert "skipped" not in r, r
    assert r["seq_write_bytes_per_s"] > 0 and r["fdatasync_4k_iops"] > 0 and r["randread_4k_iops"] > 0
    assert r["fdatasync_4k_p99_us"] >= r["fdatasync_4k_p50_us"] > 0
    assert r["mode"] == "quick" and r["params"]["seq_write_size_bytes"] == 4 << 20
    assert list(tmp_path.iterdir()) == []  # fio's files are gone


def test_skipped_with_a_reason(tmp_path):
    r = fio_baseline(tmp_path / "missing", params=TINY)
    assert "not a directory" in r["skipped"] or "not installed" in r["skipped"]
