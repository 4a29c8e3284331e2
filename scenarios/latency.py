"""Latency: a fixed rate (open loop), measuring send latency, publish delay (start - intended) and
send-to-consume latency through long polling (push consumers: one pull per queue always held at the broker).

    locust -f scenarios/latency.py --headless -t 30s                       # 500 msg/s, 1 KiB
    locust -f scenarios/latency.py --headless -t 60s --rate 2000 --flush SYNC_FLUSH
"""

import sys
from pathlib import Path

if str(Path(__file__).resolve().parents[1]) not in sys.path:  # loaded by path (locust -f) from elsewhere
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scenarios.options import Settings
from scenarios.runtime import LabUser, install
from scenarios.spec import ScenarioSpec

SPEC = ScenarioSpec(name="latency", defaults=Settings(rate=500.0, queues=8, in_flight=1000))
install(SPEC)


class LatencyProducer(LabUser):
    pass
