"""Queues: the same rate spread over 1, 100, 1,000 and 10,000 queues, one phase each (the seed's "10,000+
queues per broker without write degradation"); send rate and latencies per phase in the summary.

    locust -f scenarios/queues.py --headless -t 30s                        # 2,000 msg/s, 4 phases
    locust -f scenarios/queues.py --headless -t 120s --queue-counts 1,1000,10000,20000 --rate 5000
"""

import sys
from pathlib import Path

if str(Path(__file__).resolve().parents[1]) not in sys.path:  # loaded by path (locust -f) from elsewhere
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scenarios import queues_control
from scenarios.options import Settings
from scenarios.runtime import LabUser, install
from scenarios.spec import ScenarioSpec

SPEC = ScenarioSpec(
    name="queues",
    defaults=Settings(rate=2000.0, in_flight=1000),
    options=("queue_counts", "max_queues_per_topic", "phase_s"),
    phases=queues_control.queue_phases,
    controller=queues_control.control,
)
install(SPEC)


class QueuesProducer(LabUser):
    pass
