"""This module owns reading run records from any Hadoop-compatible URL (``file://``, ``hdfs://``, ``s3a://`` with
its connector on the classpath): ``--runs`` may name a directory on a cluster's storage.

Through Hadoop's FileSystem API (the JVM Spark already runs) it lists the run directories and copies each run's
small files (meta.json, check.json, faults.jsonl, chaos.json) into a local staging directory, where the jobs read
them as they read a local run. The bulk — events and metrics — is not copied: the staged run names its URL in
``STAGED_FILE`` and the data entries found there, and Spark's executors read them from the URL itself, so a
cluster never funnels the events through the driver.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Final

from pyspark.sql import SparkSession

SMALL_FILES: Final = ("meta.json", "check.json", "faults.jsonl", "chaos.json")
DATA_DIRS: Final = ("events", "metrics")  # Parquet part files
DATA_FILES: Final = ("events.jsonl", "metrics.jsonl")
STAGED_FILE: Final = ".remote.json"  # {"url": run URL, "data": [entries present there]}
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")  # two letters at least: "C:\" is not a URL


def is_url(runs: str) -> bool:
    return _SCHEME.match(runs) is not None


class RunSourceError(ValueError):
    """The URL cannot be listed or holds no run records."""


def stage_runs(spark: SparkSession, url: str, stage_dir: Path) -> Path:
    """Mirror the run records under ``url`` (a runs directory or one run) into ``stage_dir``; returns the directory
    to hand to the jobs."""
    jvm: Any = spark.sparkContext._jvm  # py4j: PySpark's only door to Hadoop's FileSystem
    hpath = jvm.org.apache.hadoop.fs.Path
    try:
        root = hpath(url)
        fs = root.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
        if fs.exists(hpath(root, "meta.json")):
            run_dirs = [root]
        else:
            run_dirs = [s.getPath() for s in fs.listStatus(root)
                        if s.isDirectory() and fs.exists(hpath(s.getPath(), "meta.json"))]
    except Exception as exc:  # noqa: BLE001 - the JVM's boundary: py4j wraps the JVM's IOException
        raise RunSourceError(f"{url}: cannot list run records: {str(exc).splitlines()[0]}") from None
    stage_dir.mkdir(parents=True, exist_ok=True)
    single = len(run_dirs) == 1 and run_dirs[0] == root
    for run in run_dirs:
        # Staged under the run's own directory name: the readers map Parquet files to runs by that name.
        local = stage_dir / str(run.getName())
        local.mkdir(parents=True, exist_ok=True)
        for name in SMALL_FILES:
            src = hpath(run, name)
            if fs.exists(src):
                # useRawLocalFileSystem: no .crc side files in the staging directory
                fs.copyToLocalFile(False, src, hpath((local / name).resolve().as_uri()), True)
        data = [name for name in DATA_DIRS if fs.exists(hpath(run, name))
                and len(fs.globStatus(hpath(hpath(run, name), "*.parquet")) or []) > 0]
        data += [name for name in DATA_FILES if fs.exists(hpath(run, name))]
        (local / STAGED_FILE).write_text(json.dumps({"url": str(run.toString()), "data": data}), encoding="utf-8")
    if not run_dirs:
        raise RunSourceError(f"{url}: no run records (no meta.json in it or in its subdirectories)")
    return stage_dir / str(root.getName()) if single else stage_dir
