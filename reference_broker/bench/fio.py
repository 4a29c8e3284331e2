"""fio device baselines: what the filesystem under the store can do, so store figures can be read against it.

This module owns the three fio jobs the store benchmark reports (fio ``--output-format=json``, one job
per run, each on its own file in the given directory; the files are always deleted):

| figure                  | fio job                                                                      |
|-------------------------|------------------------------------------------------------------------------|
| seq_write_bytes_per_s   | rw=write bs=1M size=1G (256M quick) ioengine=psync direct=0 end_fsync=1      |
| fdatasync_4k_iops       | rw=write bs=4k fdatasync=1 ioengine=psync, time-based 5 s (2 s quick)        |
| randread_4k_iops        | rw=randread bs=4k direct=1 ioengine=libaio iodepth=32 (psync, depth 1, when  |
|                         | fio lacks libaio), time-based 5 s (2 s quick) over a 256M (64M quick) file   |

The sequential write is buffered with a final fsync, like a commit log flushed behind the writer; the
4 KiB fdatasync job is the cost of one group commit; direct random reads are a cold backlog read.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Progress = Callable[[str], None]


class FioError(RuntimeError):
    """One fio job failed: non-zero exit, a job error, or output that is not fio's JSON."""


@dataclass(frozen=True)
class FioParams:
    seq_write_size_bytes: int = 1 << 30
    sync_size_bytes: int = 64 << 20
    sync_runtime_s: float = 5.0
    randread_size_bytes: int = 256 << 20
    randread_runtime_s: float = 5.0
    randread_iodepth: int = 32

    @classmethod
    def for_mode(cls, quick: bool) -> FioParams:
        if quick:
            return cls(seq_write_size_bytes=256 << 20, sync_runtime_s=2.0, randread_size_bytes=64 << 20,
                       randread_runtime_s=2.0)
        return cls()


@dataclass(frozen=True)
class FioBaselines:
    directory: str
    fio_version: str
    seq_write_bytes_per_s: float | None
    fdatasync_4k_iops: float | None
    fdatasync_4k_p50_us: float | None
    fdatasync_4k_p99_us: float | None
    randread_4k_iops: float | None
    randread_ioengine: str
    errors: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["errors"] = list(self.errors)
        return d


def find_fio() -> str | None:
    return shutil.which("fio")


def has_ioengine(fio: str, engine: str) -> bool:
    """Whether this fio build lists ``engine`` in ``fio --enghelp``."""
    try:
        out = subprocess.run([fio, "--enghelp"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return any(line.strip() == engine for line in out.splitlines())


def _runtime_arg(seconds: float) -> str:
    return f"{max(100, round(seconds * 1000))}ms"


def parse_fio_json(text: str) -> dict[str, Any]:
    """The first job of fio's JSON output (fio may print notes before the JSON object)."""
    start = text.find("{")
    if start < 0:
        raise FioError(f"no JSON in fio output: {text.strip()[:200]!r}")
    try:
        data = json.loads(text[start:])
        job = data["jobs"][0]
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise FioError(f"unreadable fio JSON output: {e}") from None
    if not isinstance(job, dict):
        raise FioError("unreadable fio JSON output: job is not an object")
    if job.get("error"):
        raise FioError(f"fio job {job.get('jobname')} reported error {job['error']}")
    job["_fio_version"] = data.get("fio version", "")
    return job


def run_job(fio: str, name: str, path: Path, args: list[str], timeout_s: float) -> dict[str, Any]:
    """Run one fio job on ``path`` and return its JSON; the file is deleted whatever happens."""
    cmd = [fio, "--output-format=json", f"--name={name}", f"--filename={path}", *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        if proc.returncode != 0:
            detail = (proc.stderr.strip() or proc.stdout.strip())[-400:]
            raise FioError(f"{name}: fio exited with status {proc.returncode}: {detail}")
        return parse_fio_json(proc.stdout)
    except subprocess.TimeoutExpired:
        raise FioError(f"{name}: fio did not finish within {timeout_s:.0f} s") from None
    finally:
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def _percentile_us(job: dict[str, Any], section: str, pct: str) -> float | None:
    try:
        return float(job[section]["lat_ns"]["percentile"][pct]) / 1000
    except (KeyError, TypeError, ValueError):
        return None


def run_fio_baselines(directory: Path, params: FioParams | None = None, *, fio_bin: str | None = None,
                      progress: Progress | None = None) -> tuple[FioBaselines | None, str | None]:
    """Run the three jobs in ``directory``: (figures, None), or (None, why they were skipped).

    A job that fails leaves its figure ``None`` and its message in ``errors``; only when fio is
    missing, the directory is missing or every job failed is the result ``None``.
    """
    params = params or FioParams()
    fio = fio_bin or find_fio()
    if fio is None:
        return None, "fio is not installed (Debian: apt-get install fio)"
    if not directory.is_dir():
        return None, f"{directory} is not a directory"
    say = progress or (lambda _msg: None)
    prefix = f".rmq-lab-fio-{os.getpid()}"
    errors: list[str] = []
    version = ""

    def job(name: str, args: list[str], budget_s: float) -> dict[str, Any] | None:
        nonlocal version
        try:
            j = run_job(fio, name, directory / f"{prefix}-{name}.dat", args, budget_s)
        except (FioError, OSError) as e:
            errors.append(str(e))
            return None
        version = version or str(j.get("_fio_version", ""))
        return j

    say(f"fio: sequential write {params.seq_write_size_bytes >> 20} MiB, bs=1M, buffered + end_fsync")
    seq = job("seqwrite", ["--rw=write", "--bs=1M", f"--size={params.seq_write_size_bytes}", "--ioengine=psync",
                           "--direct=0", "--end_fsync=1"], 600)
    say(f"fio: 4 KiB write + fdatasync for {params.sync_runtime_s:g} s")
    sync = job("fdatasync4k", ["--rw=write", "--bs=4k", f"--size={params.sync_size_bytes}", "--ioengine=psync",
                               "--fdatasync=1", "--time_based", f"--runtime={_runtime_arg(params.sync_runtime_s)}"],
               params.sync_runtime_s + 120)
    engine = "libaio" if has_ioengine(fio, "libaio") else "psync"
    depth = params.randread_iodepth if engine == "libaio" else 1
    say(f"fio: 4 KiB random read, direct, {engine} depth {depth}, for {params.randread_runtime_s:g} s")
    rand = job("randread4k", ["--rw=randread", "--bs=4k", f"--size={params.randread_size_bytes}", "--direct=1",
                              f"--ioengine={engine}", f"--iodepth={depth}", "--time_based",
                              f"--runtime={_runtime_arg(params.randread_runtime_s)}"],
               params.randread_runtime_s + 300)
    if seq is None and sync is None and rand is None:
        return None, "every fio job failed: " + "; ".join(errors)
    return FioBaselines(
        directory=str(directory),
        fio_version=version,
        seq_write_bytes_per_s=float(seq["write"]["bw_bytes"]) if seq else None,
        fdatasync_4k_iops=float(sync["write"]["iops"]) if sync else None,
        fdatasync_4k_p50_us=_percentile_us(sync, "sync", "50.000000") if sync else None,
        fdatasync_4k_p99_us=_percentile_us(sync, "sync", "99.000000") if sync else None,
        randread_4k_iops=float(rand["read"]["iops"]) if rand else None,
        randread_ioengine=f"{engine} iodepth={depth}",
        errors=tuple(errors),
    ), None
