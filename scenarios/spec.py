"""What a scenario file declares (``ScenarioSpec``) and what its controller gets to work with (``RunContext``).

A scenario = defaults for the common options, the scenario's own options, the phases it sends to, embedded
broker settings, and an optional controller: a function run on a greenlet of the coordinator (locust master
or local runner) during the run, which steers the load processes through the hub (pause consumers, change
the rate, switch phase) and writes its findings into ``results`` (meta.json ``results``).
"""

# gevent ships no type information; its names are Any here.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gevent.event import Event

from harness.driver import Driver
from harness.memory_cgroup import MemoryCgroup
from harness.metrics_sampler import BrokerTarget
from harness.records import RunRecord, wall_clock
from scenarios.contract import Phase, RunInfo
from scenarios.hub import Hub
from scenarios.options import Settings


def one_topic(settings: Settings, tag: str, scenario: str) -> list[Phase]:
    """The default: one phase, one topic (the run's own, or ``--topic``)."""
    topic = settings.topic or f"lab_{scenario}_{tag}"
    return [Phase(topic, ((topic, settings.queues),))]


@dataclass
class RunContext:
    settings: Settings
    info: RunInfo
    hub: Hub
    driver: Driver
    record: RunRecord
    brokers: list[BrokerTarget]
    run_time_s: float | None  # locust --run-time, when given
    results: dict[str, Any] = field(default_factory=dict)
    memory_cgroup: MemoryCgroup | None = None  # the embedded broker's (--memory-max), else None
    end_run: Callable[[], None] | None = None  # end the run now, as -t would (after the controller returns)
    stopped: Event = field(default_factory=Event)
    started_monotonic: float = field(default_factory=time.monotonic)

    def now_ns(self) -> int:
        return wall_clock().now_ns()

    def sleep(self, seconds: float) -> bool:
        """Sleep unless the run ends first; False when it ended."""
        return not self.stopped.wait(max(0.0, seconds))

    def remaining_s(self) -> float | None:
        if self.run_time_s is None:
            return None
        return self.run_time_s - (time.monotonic() - self.started_monotonic)

    def backlog(self) -> int:
        """The group's backlog in messages as the broker reports it."""
        return self.driver.backlog(self.info.group, self.info.all_topics).total

    def say(self, message: str) -> None:
        logging.getLogger(f"scenarios.{self.info.scenario}").info(message)


Controller = Callable[[RunContext], None]


@dataclass(frozen=True)
class ScenarioSpec:
    name: str
    defaults: Settings
    options: tuple[str, ...] = ()  # scenario-specific options (scenarios.options.SCENARIO_OPTIONS, "cold")
    phases: Callable[[Settings, str, str], list[Phase]] = one_topic
    controller: Controller | None = None
    broker_conf: dict[str, str] = field(default_factory=dict)  # embedded broker defaults of this scenario
    # The load's driver per process, (info, settings, worker) -> Driver; None = the Agent's RocketMQDriver
    # (the transactions scenario sends through a TransactionProducer).
    driver_factory: Callable[[RunInfo, Settings, str], Driver] | None = None

    def driver_for(self, info: RunInfo, settings: Settings, worker: str) -> Driver | None:
        return None if self.driver_factory is None else self.driver_factory(info, settings, worker)
