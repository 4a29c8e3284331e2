"""The reports on a real Spark standalone cluster (spark_reports.standalone: a master and two workers from the
installed pyspark, local processes on 127.0.0.1): ``python -m spark_reports all --master spark://…`` over
``file://`` run records gives the same findings and the same tables as ``local[*]``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from spark_reports.standalone import StandaloneCluster
from spark_reports.synthetic import default_specs, generate

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1500)]


def _reports(runs: Path, out: Path, *master: str) -> None:
    done = subprocess.run([sys.executable, "-m", "spark_reports", "all", "--runs", runs.as_uri(), "--out", str(out),
                           *master], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert done.returncode == 0, done.stderr[-4000:]


def _tables(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): p.read_text() for p in sorted(out.rglob("*"))
            if p.suffix in (".csv", ".json") and p.is_file()}


def test_the_reports_on_a_standalone_cluster_equal_the_local_ones(tmp_path: Path) -> None:
    if shutil.which("java") is None:
        pytest.skip("no java on PATH: Spark needs a JVM")
    runs = tmp_path / "runs"
    generate(runs, default_specs(2_000))
    _reports(runs, tmp_path / "local")
    with StandaloneCluster(workers=2, work_dir=tmp_path / "cluster") as cluster:
        assert cluster.alive_workers() == 2
        _reports(runs, tmp_path / "on-cluster", "--master", cluster.master_url)
        # The application really ran on the cluster: its executors left work directories on the workers.
        apps = list((tmp_path / "cluster").glob("work-*/app-*"))
        assert apps, "no application ran on the workers"
        pids = [p.pid for p in cluster.procs]
    assert len(pids) == 3 and not [pid for pid in pids if Path(f"/proc/{pid}").exists()], \
        "a master or worker process outlived the cluster"
    local, remote = _tables(tmp_path / "local"), _tables(tmp_path / "on-cluster")
    assert set(local) == set(remote) and any(k.endswith("findings.json") for k in local)
    differ = [k for k in local if local[k] != remote[k]]
    assert not differ, {k: (local[k][:300], remote[k][:300]) for k in differ[:3]}
    verdicts = [f["verdict"] for k, v in remote.items() if k.endswith("findings.json") for f in json.loads(v)]
    assert verdicts
