"""Wiring a scenario into locust: its options, its User class, and one listener per locust event.

A scenario file calls ``install(SPEC)`` and defines ``class <Name>(LabUser)``. Roles, by locust runner:

==============  =============================================================================================
local runner    coordinator + the load (one ``Agent``) in one process
master          coordinator; the load is on the workers (``--master`` or ``--processes N``)
worker          one ``Agent`` per run, steered by the master's commands (``scenarios.hub``)
==============  =============================================================================================

Nothing starts at import: locust imports the file before ``--processes`` forks, and every process sets
itself up in ``init``, after the fork (writers and client threads do not survive one).
"""

# gevent and locust ship no type information; their names are Any here.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

import logging
import sys
from typing import Any

from locust import User, constant, task
from locust import events as _locust_events
from locust.runners import WorkerRunner

from harness.launcher import LaunchError
from scenarios.agent import Agent, agent_user_loop
from scenarios.contract import RUN_INFO_ATTR, RunInfo
from scenarios.coordinator import Coordinator
from scenarios.hub import WorkerLink
from scenarios.options import OptionError, register, settings_from
from scenarios.spec import ScenarioSpec

log = logging.getLogger("scenarios")


class LabUser(User):
    """A producer: sends while the run wants it (rate, phase and stop come from the coordinator)."""

    abstract = True
    wait_time = constant(0)

    @task
    def produce(self) -> None:
        agent_user_loop()


class WorkerSide:
    """A locust worker: joins each run the master announces in its spawn message."""

    def __init__(self, spec: ScenarioSpec, environment: Any, runner: Any) -> None:
        self.spec = spec
        self.env = environment
        self.runner = runner
        self.link = WorkerLink(runner)
        self.agent: Agent | None = None

    def begin_run(self) -> None:
        if self.agent is not None:
            self.agent.finish()
        raw = getattr(self.env.parsed_options, RUN_INFO_ATTR, None)
        if not raw:
            log.error("the master sent no run information: is it running the same scenario file?")
            return
        info = RunInfo.from_json(raw)
        settings = settings_from(self.env.parsed_options, self.spec.defaults)
        worker = f"w{self.runner.worker_index}"
        self.agent = Agent(info, settings, worker, fire=self.env.events.request.fire,
                           driver=self.spec.driver_for(info, settings, worker))
        self.agent.begin()
        self.link.attach(self.agent, info.run_id)

    def stopping(self) -> None:
        if self.agent is not None:
            self.agent.producing = False  # the master's commands drain and finish

    def end_run(self) -> None:
        pass

    def quitting(self) -> None:
        self.teardown()

    def teardown(self) -> None:
        if self.agent is not None:
            self.agent.finish()  # idempotent; the master lost or gone: keep what was recorded
        self.link.detach()

    def print_final(self) -> None:
        pass


def install(spec: ScenarioSpec) -> None:
    """Register the scenario's options and its lifecycle on locust's events (call once, at import)."""
    events: Any = _locust_events  # locust's EventHook is untyped
    side: dict[str, Coordinator | WorkerSide] = {}

    def _options(parser: Any, **_kw: Any) -> None:
        register(parser, spec.defaults, spec.options)

    def _init(environment: Any, runner: Any = None, **_kw: Any) -> None:
        if runner is None:  # locust used as a library without a runner: nothing to run
            return
        if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
            # The client logs every queue it is given at INFO: 10,000 lines for the queues scenario.
            logging.getLogger("reference_broker").setLevel(logging.WARNING)
        try:
            settings_from(environment.parsed_options, spec.defaults)  # refuse bad options before starting anything
            if isinstance(runner, WorkerRunner):
                side["s"] = WorkerSide(spec, environment, runner)
            else:
                co = side["s"] = Coordinator(spec, environment, runner)
                co.setup()
        except (OptionError, LaunchError) as exc:
            log.error("%s", exc)
            sys.exit(2)

    def _start(environment: Any, **_kw: Any) -> None:
        if "s" in side:
            side["s"].begin_run()

    def _stopping(environment: Any, **_kw: Any) -> None:
        if "s" in side:
            side["s"].stopping()

    def _stop(environment: Any, **_kw: Any) -> None:
        if "s" in side:
            side["s"].end_run()

    def _quitting(environment: Any, **_kw: Any) -> None:
        if "s" in side:
            side["s"].quitting()

    def _quit(exit_code: int, **_kw: Any) -> None:
        if "s" in side:
            side["s"].print_final()  # the summary first, then the (possibly slow) broker shutdown
            side["s"].teardown()

    events.init_command_line_parser.add_listener(_options)
    events.init.add_listener(_init)
    events.test_start.add_listener(_start)
    events.test_stopping.add_listener(_stopping)
    events.test_stop.add_listener(_stop)
    events.quitting.add_listener(_quitting)
    events.quit.add_listener(_quit)
