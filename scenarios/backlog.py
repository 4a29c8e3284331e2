"""Backlog: the OpenMessaging Benchmark backlog test (build with consumers paused, drain while producing).

Records the build and drain times, the backlog as the broker reports it, the drain rates, and whether the
drain read from the page cache or from disk (``--cold`` drops the page cache first; root). Steps in
``scenarios.backlog_control``; findings in meta.json ``results.backlog`` and the summary.

    locust -f scenarios/backlog.py --headless -t 30s                       # 16 MiB backlog at 3,000 msg/s
    locust -f scenarios/backlog.py --headless -t 120s --backlog-bytes 1073741824 --rate 10000 --cold
    locust -f scenarios/backlog.py --headless -t 15m --backlog-bytes 4GiB --memory-max 1GiB  # root

A head reader (``--head-readers``, one by default) keeps up with the sends throughout; its send-to-consume
latency per stage is in ``results.backlog.head``. ``--memory-max`` runs the broker in a memory cgroup of that
limit (harness.memory_cgroup): the backlog then exceeds its page cache and the drain reads from disk.
"""

import sys
from pathlib import Path

if str(Path(__file__).resolve().parents[1]) not in sys.path:  # loaded by path (locust -f) from elsewhere
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scenarios import backlog_control
from scenarios.options import Settings
from scenarios.runtime import LabUser, install
from scenarios.spec import ScenarioSpec

SPEC = ScenarioSpec(
    name="backlog",
    defaults=Settings(rate=3000.0, queues=8, in_flight=1000, backlog_bytes=16 << 20, warmup_s=2.0, head_readers=1),
    options=("backlog_bytes", "drain_ratio", "drain_rate", "warmup_s", "cold", "memory_max", "head_readers",
             "stop_after_drain"),
    controller=backlog_control.control,
)
install(SPEC)


class BacklogProducer(LabUser):
    pass
