"""A Spark standalone cluster from the installed pyspark, as local processes: a master and N workers started
with pyspark's ``bin/spark-class`` on 127.0.0.1 and stopped by PID (whole process groups). For the test that
runs the reports on ``--master spark://…`` for real, and for a user who wants to see the reports run on a
cluster before pointing them at a real one (README: "Reports on a cluster").

    with StandaloneCluster(workers=2, work_dir=tmp) as cluster:
        subprocess.run([sys.executable, "-m", "spark_reports", "all", "--master", cluster.master_url, ...])
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import TracebackType

import pyspark


class ClusterError(RuntimeError):
    pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spark_class() -> Path:
    return Path(pyspark.__file__).resolve().parent / "bin" / "spark-class"


class StandaloneCluster:
    """A master and ``workers`` workers (``cores`` and ``memory`` each) on loopback; ``master_url`` once
    started. Every process is in its own process group and is killed with it on ``stop``."""

    def __init__(self, workers: int = 2, work_dir: Path | None = None, cores: int = 1, memory: str = "1g",
                 start_timeout_s: float = 120.0) -> None:
        self.workers = workers
        self.work_dir = Path(work_dir) if work_dir is not None else Path.cwd() / "spark-standalone"
        self.cores = cores
        self.memory = memory
        self.start_timeout_s = start_timeout_s
        self.port = _free_port()
        self.ui_port = _free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen[bytes]] = []

    def _env(self) -> dict[str, str]:
        return {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_MASTER_HOST": "127.0.0.1",
                "PYSPARK_PYTHON": sys.executable, "SPARK_LOG_DIR": str(self.work_dir / "logs"),
                "SPARK_WORKER_DIR": str(self.work_dir / "work"), "SPARK_NO_DAEMONIZE": "1"}

    def _spawn(self, name: str, *args: str) -> None:
        log = (self.work_dir / f"{name}.log").open("wb")
        try:
            self.procs.append(subprocess.Popen([str(spark_class()), *args], stdout=log, stderr=subprocess.STDOUT,
                                               env=self._env(), start_new_session=True))
        finally:
            log.close()

    def alive_workers(self) -> int:
        """Workers the master counts as ALIVE (its web UI's JSON), -1 when the master does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as r:
                state = json.loads(r.read())
        except (OSError, ValueError):
            return -1
        return int(state.get("aliveworkers", 0))

    def start(self) -> StandaloneCluster:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._spawn("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                        str(self.port), "--webui-port", str(self.ui_port))
            for i in range(self.workers):
                self._spawn(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                            "--cores", str(self.cores), "--memory", self.memory, "--webui-port", "0",
                            "--work-dir", str(self.work_dir / f"work-{i}"), self.master_url)
            self._wait_for_workers()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_for_workers(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while self.alive_workers() < self.workers:
            dead = [p.args for p in self.procs if p.poll() is not None]
            if dead:
                raise ClusterError(f"a Spark process exited while starting: {dead}; see {self.work_dir}")
            if time.monotonic() > deadline:
                raise ClusterError(f"{self.alive_workers()} of {self.workers} workers alive after "
                                   f"{self.start_timeout_s:.0f} s; see {self.work_dir}")
            time.sleep(0.5)

    def stop(self) -> None:
        """Kill every process group this cluster started (workers first, then the master) and wait for them."""
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
        for p in reversed(self.procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=10)
        self.procs.clear()

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
