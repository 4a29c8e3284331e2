"""The store benchmark: the CLI end to end (small workload), its argument errors, and fio (sizes, plan and
targets: test_store_plan.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from reference_broker.__main__ import main
from reference_broker.bench import fio as fio_mod
from reference_broker.bench.report import format_table
from reference_broker.bench.store_plan import MiB

REPO = Path(__file__).resolve().parents[2]
MANY = 200  # queues in the fan-out comparison of the small run (10,000 by default)

TOP_LEVEL_NUMBERS = [
    "append_async_msgs_per_s",
    "append_async_dispatched_msgs_per_s",
    "append_async_nokey_msgs_per_s",
    "append_async_no_prop_crc_msgs_per_s",
    "append_async_process_msgs_per_s",
    "append_async_process_dispatched_msgs_per_s",
    "prop_crc_vs_none_ratio",
    "append_sync_1_msgs_per_s",
    "append_sync_16_msgs_per_s",
    "append_sync_64_msgs_per_s",
    "sync64_vs_async_ratio",
    "queues_1_msgs_per_s",
    f"queues_{MANY}_msgs_per_s",
    f"queues_{MANY}_vs_1_ratio",
    "recovery_normal_s",
    "recovery_abnormal_checkpoint_s",
    "recovery_full_scan_s",
    "recovery_full_scan_bytes_per_s",
    "cpu_count",
]


def _bench_cmd(tmp: Path, *extra: str, scale: float = 0.05) -> list[str]:
    return [sys.executable, "-m", "reference_broker", "bench", "store", "--quick", "--no-fio", "--sizes", "8M",
            "--scale", str(scale), "--many-queues", str(MANY), "--dir", str(tmp), *extra]


@pytest.mark.e2e
def test_quick_json_run_reports_every_figure_and_cleans_up(tmp_path: Path) -> None:
    proc = subprocess.run(_bench_cmd(tmp_path, "--json"), cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)  # stdout is one JSON object and nothing else
    assert "append, ASYNC_FLUSH" in proc.stderr  # progress goes to stderr
    for key in TOP_LEVEL_NUMBERS:
        assert isinstance(result[key], (int, float)) and result[key] > 0, (key, result[key])
    for key in ("fio_seq_write_bytes_per_s", "fio_fdatasync_4k_iops", "fio_randread_4k_iops"):
        assert key in result and result[key] is None
    assert result["fio_skipped_reason"]
    assert len(result["append_async"]["keyed"]["rounds"]) == 3 and len(result["queues"]["1"]["rounds"]) == 3
    assert isinstance(result["python_version"], str) and isinstance(result["machine"], dict)
    rec = result["recovery"]["8M"]
    for key in ("normal_s", "abnormal_checkpoint_s", "full_scan_s", "full_scan_bytes_per_s"):
        assert rec[key] > 0
    assert rec["log_bytes"] >= 8 * MiB and rec["full_scan_redispatched_msgs"] == rec["messages"]
    assert set(result["targets"]) == {"append_async", "sync64_vs_async", f"queues_{MANY}_vs_1",
                                      "recovery_abnormal_checkpoint", "recovery_full_scan"}
    assert all(t["met"] in (True, False) for t in result["targets"].values())
    assert list(tmp_path.iterdir()) == []  # every store removed
    assert "Recovery" in format_table(result)


@pytest.mark.e2e
def test_interrupt_removes_the_stores(tmp_path: Path) -> None:
    # Long enough (SYNC_FLUSH phases of 10 s each) that the signal lands mid-run even when this process lags
    # behind the bench's output on a loaded machine; it is interrupted within a second or two.
    # SIGINT as a terminal's Ctrl-C finds it: a parent started in the background without job control hands its
    # children SIGINT ignored, and Python then installs no KeyboardInterrupt handler.
    proc = subprocess.Popen(_bench_cmd(tmp_path, scale=5.0), cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stderr is not None
    try:
        for line in proc.stderr:
            if "SYNC_FLUSH" in line:  # mid-run, with stores on disk
                break
        assert any(tmp_path.iterdir())
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()  # also after a timeout: an open pipe is a ResourceWarning in a later test
    assert proc.returncode != 0
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("args", "message"), [
    (["--sizes", "abc"], "'abc' is not a size"),
    (["--sizes", "1G,x"], "'x' is not a size"),
    (["--sizes", "100K"], "too small"),
    (["--sizes", ","], "no sizes given"),
    (["--dir", "/nonexistent/rmq-lab"], "does not exist"),
    (["--quick", "--bogus"], "No such option"),
])
def test_bad_arguments_are_usage_errors(args: list[str], message: str) -> None:
    res = CliRunner().invoke(main, ["bench", "store", *args])
    assert res.exit_code == 2, res.output
    assert message in res.output


# ---- fio ---------------------------------------------------------------------------------------

TINY = fio_mod.FioParams(seq_write_size_bytes=4 * MiB, sync_size_bytes=1 * MiB, sync_runtime_s=0.2,
                         randread_size_bytes=4 * MiB, randread_runtime_s=0.2, randread_iodepth=4)


@pytest.mark.skipif(fio_mod.find_fio() is None, reason="fio is not installed")
def test_fio_baselines_on_tmp_path(tmp_path: Path) -> None:
    res, reason = fio_mod.run_fio_baselines(tmp_path, TINY)
    assert reason is None and res is not None, reason
    assert res.errors == ()
    assert res.seq_write_bytes_per_s and res.seq_write_bytes_per_s > 0
    assert res.fdatasync_4k_iops and res.fdatasync_4k_iops > 0
    assert res.randread_4k_iops and res.randread_4k_iops > 0
    assert res.fio_version.startswith("fio-")
    assert list(tmp_path.iterdir()) == []  # fio's files are deleted


def test_fio_missing_is_a_reason_not_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fio_mod, "find_fio", lambda: None)
    assert fio_mod.run_fio_baselines(tmp_path, TINY) == (None, "fio is not installed (Debian: apt-get install fio)")


def test_fio_job_failure_is_reported_and_files_removed(tmp_path: Path) -> None:
    fake = tmp_path / "fio"
    fake.write_text("#!/bin/sh\necho 'fio: bad option' >&2\nexit 1\n")
    os.chmod(fake, 0o755)
    data = tmp_path / "data"
    data.mkdir()
    res, reason = fio_mod.run_fio_baselines(data, TINY, fio_bin=str(fake))
    assert res is None and reason is not None and "bad option" in reason
    assert list(data.iterdir()) == []


def test_parse_fio_json_skips_notes_and_rejects_job_errors() -> None:
    job = fio_mod.parse_fio_json('note: something\n{"fio version": "fio-3.33", "jobs": [{"jobname": "x", "error": 0}]}')
    assert job["jobname"] == "x"
    with pytest.raises(fio_mod.FioError):
        fio_mod.parse_fio_json('{"jobs": [{"jobname": "x", "error": 5}]}')
    with pytest.raises(fio_mod.FioError):
        fio_mod.parse_fio_json("garbage")
