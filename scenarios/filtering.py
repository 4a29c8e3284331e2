"""Filtering: tag vs SQL92 vs FilterServer at the same selectivity — broker CPU per delivered message, bytes on
the wire to the consumer, and consumer-side throughput (steps in ``scenarios.filtering_control``; findings in
meta.json ``results.filtering`` and the report's filtering page, ``python -m spark_reports filtering``).

The embedded broker runs with ``enablePropertyFilter=true`` (SQL92) and, when the client has FilterServer
class filters, ``filterServerNums=1``; add the SQL92 filter bits with ``--broker-conf enableCalcFilterBitMap=true
--broker-conf enableConsumeQueueExt=true``. The FilterServer mode is skipped, with the reason, when the client
cannot subscribe with ``filter_source``.

    locust -f scenarios/filtering.py --headless -t 60s                     # 20,000 messages, 10 % match
    locust -f scenarios/filtering.py --headless -t 120s --selectivity 0.01 --filter-messages 100000
"""

import sys
from pathlib import Path

if str(Path(__file__).resolve().parents[1]) not in sys.path:  # loaded by path (locust -f) from elsewhere
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scenarios import filtering_control
from scenarios.options import Settings
from scenarios.runtime import LabUser, install
from scenarios.spec import ScenarioSpec

_BROKER_CONF = {"enablePropertyFilter": "true"}
if filtering_control.filter_server_support() is None:
    _BROKER_CONF["filterServerNums"] = "1"

SPEC = ScenarioSpec(
    name="filtering",
    # the run's own producers only warm up: the controller stops them and produces the filter workload
    defaults=Settings(rate=200.0, queues=4, in_flight=64, drain_timeout_s=60.0),
    options=("selectivity", "filter_messages", "filter_modes"),
    controller=filtering_control.control,
    broker_conf=_BROKER_CONF,
)
install(SPEC)


class FilteringProducer(LabUser):
    pass
