"""Transactions: every send is a transaction (half message, local transaction, END_TRANSACTION) whose fate is
drawn from a mix — commit, rollback, UNKNOW then committed or rolled back by the broker's check-back, or never
resolved — and read from its key (scenarios/tx_driver.py), so any process of the producer group answers a
check-back alike. The run record carries a "tx" row per decision; the checker's atomicity rule judges it (only
committed transactions delivered, every committed one delivered) and the report's transactions page shows the
outcomes and the check-back latency. The embedded broker checks every 500 ms for half messages older than 1 s.

    locust -f scenarios/transactions.py --headless -t 30s                 # 200 transactions/s
    locust -f scenarios/transactions.py --headless -t 60s --rate 500 -u 16 \\
        --tx-mix commit=0.4,rollback=0.2,unknown_commit=0.2,unknown_rollback=0.1,never=0.1
"""

import sys
from pathlib import Path

if str(Path(__file__).resolve().parents[1]) not in sys.path:  # loaded by path (locust -f) from elsewhere
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import os

from harness.driver import Driver
from scenarios.contract import RunInfo
from scenarios.options import Settings
from scenarios.runtime import LabUser, install
from scenarios.spec import ScenarioSpec
from scenarios.tx_driver import TransactionalDriver, parse_mix


def _driver(info: RunInfo, settings: Settings, worker: str) -> Driver:
    return TransactionalDriver(info.namesrv, instance=f"lab-{info.tag}-{worker}-{os.getpid()}",
                               producer_group=f"lab_tx_producer_{info.tag}", run_dir=info.run_dir, worker=worker,
                               mix=parse_mix(settings.tx_mix), send_timeout_s=settings.send_timeout_s,
                               record=settings.record)


SPEC = ScenarioSpec(
    name="transactions",
    # Each User runs one transaction at a time (the local transaction sits between the half message and its end).
    defaults=Settings(rate=200.0, queues=4, in_flight=64, sync=True),
    options=("tx_mix",),
    broker_conf={"transactionCheckInterval": "500", "transactionTimeOut": "1000"},
    driver_factory=_driver,
)
install(SPEC)


class TransactionProducer(LabUser):
    pass
