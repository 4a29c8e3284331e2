"""Throughput: production at a fixed rate (open loop; intended send times recorded) or as fast as possible
(``--rate 0``, closed loop with ``--in-flight`` sends outstanding per process), with concurrent consumption.

    locust -f scenarios/throughput.py --headless -t 30s                    # embedded broker, max rate
    locust -f scenarios/throughput.py --headless -t 60s -u 4 --processes 2 --rate 20000 --batch 16
    locust -f scenarios/throughput.py --host rmq://127.0.0.1:9876          # web UI, existing name server
"""

import sys
from pathlib import Path

if str(Path(__file__).resolve().parents[1]) not in sys.path:  # loaded by path (locust -f) from elsewhere
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scenarios.options import Settings
from scenarios.runtime import LabUser, install
from scenarios.spec import ScenarioSpec

SPEC = ScenarioSpec(name="throughput", defaults=Settings(rate=0.0, queues=8, in_flight=256))
install(SPEC)


class ThroughputProducer(LabUser):
    pass
