"""Session-wide test setup.

Brokers started by the tests use small files (RMQ_LAB_BROKER_CONF below).

Importing locust monkey-patches the whole process with gevent (threads become greenlets), and the scenario
tests import locust modules at collection. In this process that would turn every other test's threads —
the servers' event-loop threads among them — into greenlets on the main thread. So locust is imported here
first without the patch (LOCUST_SKIP_MONKEY_PATCH, read only at its import), and the variable is removed
again so the locust processes the scenario tests start are patched as usual.
"""

from __future__ import annotations

import os

# Small files for every broker the tests start through harness/launcher.py (see env_broker_conf there):
# 64 MiB commit-log files and an 8 MiB index instead of 1 GiB and ~420 MB, all reserved up front.
os.environ.setdefault("RMQ_LAB_BROKER_CONF",
                      "mappedFileSizeCommitLog=67108864;maxHashSlotNum=100000;maxIndexNum=400000")

os.environ["LOCUST_SKIP_MONKEY_PATCH"] = "1"
try:
    import locust  # noqa: F401
finally:
    del os.environ["LOCUST_SKIP_MONKEY_PATCH"]
