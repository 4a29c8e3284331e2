"""The SparkSession the reports run in: `local[*]` by default, any master URL otherwise.

Local masters bind to 127.0.0.1 (the lab talks to nothing else) and run quietly; tests ask for a
small session (`local[2]`, 4 shuffle partitions, no UI). Under spark-submit the JVM is already up,
so pass the binding there:

    PYSPARK_PYTHON=.venv/bin/python PYTHONPATH=. SPARK_LOCAL_IP=127.0.0.1 \
        .venv/bin/spark-submit --master 'local[2]' spark_reports/jobs/latency.py --runs runs --out reports
"""

import os
from typing import Final

from pyspark.sql import SparkSession

DEFAULT_MASTER: Final = "local[*]"
TEST_MASTER: Final = "local[2]"
APP_NAME: Final = "spark_reports"
# Report inputs are one lab's runs, not a data lake: a handful of shuffle partitions is plenty
# (Spark's default of 200 mostly schedules empty tasks on a 2-core machine).
SHUFFLE_PARTITIONS: Final = 4


def launched_by_spark_submit() -> bool:
    """True when spark-submit started this Python driver (it hands the JVM gateway over in the environment)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def resolve_master(master: str | None) -> str | None:
    """The master to set: the one given, else none under spark-submit (it chose), else ``local[*]``."""
    if master is not None:
        return master
    return None if launched_by_spark_submit() else DEFAULT_MASTER


def _loopback_master(master: str) -> bool:
    """A cluster master on this machine's loopback (spark_reports.standalone): the driver binds there too, so
    the executors reach it without the lab touching another interface."""
    host = master.split("://", 1)[-1].rsplit(":", 1)[0]
    return master.startswith("spark://") and host in ("127.0.0.1", "localhost")


def build_session(master: str | None = None, *, app_name: str = APP_NAME,
                  driver_memory: str | None = None) -> SparkSession:
    """Get or create the session on ``resolve_master(master)``."""
    master = resolve_master(master)
    builder = SparkSession.builder.appName(app_name)
    builder = builder.config("spark.ui.enabled", "false")
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    builder = builder.config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
    builder = builder.config("spark.sql.session.timeZone", "UTC")
    if master is not None:
        builder = builder.master(master)
    if master is not None and (master.startswith("local") or _loopback_master(master)):
        # Without this Spark binds to the first non-loopback interface; the lab stays on 127.0.0.1.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.driver.host", "127.0.0.1")
        builder = builder.config("spark.driver.bindAddress", "127.0.0.1")
    if driver_memory is not None:
        builder = builder.config("spark.driver.memory", driver_memory)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
