"""The coordinator (locust master, or the local runner): the run's environment, record, steering and end.

At locust start (``init``): the embedded topology (unless ``--host``), the sysctl profile, the fio baseline.
Per run (``test_start`` .. ``test_stop``; the web UI may run several): the run record with its meta.json,
the run's topics, the metrics sampler, the load processes (in this process, or workers over the bus), the
scenario's controller. At the end: producers stop, consumers drain (bounded), every process writes its last
events, the record is finished and checked, and the summary is printed (headless: after locust's own tables,
so it is the last screen) and written to ``summary.txt``/``summary.json``. Then the topology stops and
the sysctl profile is restored, on every path (atexit too).

Exit status (headless): 0 when the check is valid, 1 when it is not (lost or unexpected messages), 2 when
the run could not be recorded or checked.
"""

# gevent and locust ship no type information; their names are Any here.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

import atexit
import enum
import json
import logging
import os
import shlex
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Final

import gevent
from locust.runners import MasterRunner

from harness import final_read
from harness.checker import check_run
from harness.driver import Driver, RocketMQDriver
from harness.drivers import is_peer, make_driver, server_kind
from harness.fio_baseline import fio_baseline
from harness.launcher import LaunchError, Topology
from harness.memory_cgroup import CgroupError, MemoryCgroup, Skip, detect
from harness.metrics_sampler import BrokerTarget, MetricsSampler
from harness.peer_drivers import ACK_PROMISES
from harness.peers import PeerServer
from harness.records import MetricsWriter, RunRecord, load_events, validate_run
from harness.records.findings import record as record_finding
from harness.vm_stats import VmSampler
from reference_broker.broker.broker_config import BROKER_KEYS, load_broker_conf
from reference_broker.store.config import ROCKETMQ_KEYS
from scenarios.agent import Agent
from scenarios.contract import RUN_INFO_ATTR, Phase, RunInfo
from scenarios.findings import drain_stall
from scenarios.hub import Hub, LocalHub, MasterHub
from scenarios.options import OptionError, Settings, parse_host, settings_from
from scenarios.spec import RunContext, ScenarioSpec
from scenarios.summary import format_summary, summarize
from sysctl_profiles import SysctlProfileError, applied_profile, load_profile, read_values

log = logging.getLogger("scenarios")

QUIET_S: Final = 0.5  # drained: everything acknowledged received, and no delivery for this long
IDLE_S: Final = 5.0  # give up draining when no delivery arrives for this long
JOIN_TIMEOUT_S: Final = 30.0  # workers reporting for a new run
CONTROLLER_GRACE_S: Final = 5.0  # the run is ending: how long the controller may take to return
EXIT_VALID, EXIT_INVALID, EXIT_ERROR = 0, 1, 2


class Coordinator:
    def __init__(self, spec: ScenarioSpec, environment: Any, runner: Any) -> None:
        self.spec = spec
        self.env = environment
        self.runner = runner
        self.distributed = isinstance(runner, MasterRunner)
        self._exit = ExitStack()
        self.topology: Topology | None = None
        self.peer: PeerServer | None = None
        self.driver: Driver | None = None
        self.namesrv = ""
        self.sysctl: dict[str, Any] = {"profile": None, "applied": False, "reason": None, "values": {}}
        self.fio: dict[str, Any] | None = None
        self.memory_cgroup: MemoryCgroup | None = None
        self.master_hub = MasterHub(runner) if self.distributed else None
        self.run: _Run | None = None
        self.summary_text: str | None = None
        self._torn_down = False

    # ---- locust start / quit --------------------------------------------------------------------------

    def setup(self) -> None:
        s = settings_from(self.env.parsed_options, self.spec.defaults)
        atexit.register(self.teardown)
        if is_peer(s.driver):  # a peer broker: started embedded (its URL stands where a name server would)
            if self.env.host:
                raise OptionError(f"--driver {s.driver} starts its own server: --host is not taken with it")
            self.peer = PeerServer(server_kind(s.driver),
                                   root=Path(s.store_dir) / f"{s.driver}-{os.getpid()}" if s.store_dir else None)
            self._exit.callback(self.peer.cleanup)
            log.info("starting the embedded %s server in %s", s.driver, self.peer.root)
            self.peer.start()
            self.namesrv = self.peer.url
            self.driver = make_driver(s.driver, self.peer.url, instance=f"lab-coordinator-{os.getpid()}",
                                      peer_client=s.peer_client)
            self._exit.callback(self.driver.stop)
            self.driver.start()
            self._host_facts(s)
            return
        namesrv = parse_host(self.env.host)
        if s.memory_max and namesrv is not None:
            raise OptionError("--memory-max limits the embedded broker: it is not taken with --host")
        if namesrv is None:
            conf = {**self.spec.broker_conf, **s.broker_conf_dict()}
            root = Path(s.store_dir) / f"topology-{os.getpid()}" if s.store_dir else None
            hook = self._memory_cgroup(s.memory_max) if s.memory_max else None
            self.topology = Topology(root, broker_conf=conf, impl=s.broker_impl, rocketmq_home=s.rocketmq_home or None,
                                     broker_spawn_hook=hook)
            self._exit.callback(self.topology.cleanup)
            log.info("starting the embedded topology (name server + %s broker) in %s", s.broker_impl,
                     self.topology.root)
            self.topology.start()
            namesrv = self.topology.namesrv_addr
        self.namesrv = namesrv
        self.driver = RocketMQDriver(namesrv, instance=f"lab-coordinator-{os.getpid()}")
        self._exit.callback(self.driver.stop)
        self._host_facts(s)

    def _memory_cgroup(self, limit: int) -> Callable[[int], None]:
        """The broker's memory cgroup (created now, removed at teardown after the topology stopped: the exit
        stack unwinds in reverse) and the spawn hook that moves a broker into it; OptionError with why there
        is none."""
        plan = detect(limit)
        if isinstance(plan, Skip):
            raise OptionError(f"--memory-max: skipped: {plan.reason}")
        try:
            cg = MemoryCgroup(plan).create()
        except CgroupError as exc:
            raise OptionError(f"--memory-max: {exc}") from exc
        self._exit.callback(cg.close)
        self.memory_cgroup = cg
        log.info("memory cgroup %s (%s) limited to %d MiB: the broker starts in it", plan.path,
                 plan.version.value, limit >> 20)

        def admit(pid: int) -> None:
            try:
                cg.admit(pid)
            except CgroupError as exc:
                raise LaunchError(str(exc)) from exc

        return admit

    def _host_facts(self, s: Settings) -> None:
        """The sysctl profile (applied or read) and the fio baseline, for meta.json."""
        if s.sysctl_profile:
            state = self._exit.enter_context(applied_profile(s.sysctl_profile, allow_unapplied=True))
            self.sysctl = state.record()
            log.info("sysctl profile %s: %s", s.sysctl_profile, "applied" if state.applied else state.reason)
        else:
            try:
                values = read_values(load_profile("default").keys)
            except (SysctlProfileError, OSError) as exc:  # a kernel without one of the keys: recorded as unknown
                values = {}
                log.warning("cannot read the sysctl values in force: %s", exc)
            self.sysctl = {"profile": None, "applied": False, "reason": "no profile requested",
                           "values": dict(sorted(values.items()))}
        if s.fio:
            where = (self.topology.brokers[0].store_root if self.topology is not None
                     else self.peer.data_dir.parent if self.peer is not None else Path(s.store_dir or "."))
            log.info("fio baseline (%s) in %s", s.fio, where)
            self.fio = fio_baseline(where, "full" if s.fio == "full" else "quick", progress=log.info)

    def quitting(self) -> None:
        """locust is quitting: a run still going ends now (its summary prints at ``quit``)."""
        if self.run is not None:
            self.end_run()

    def teardown(self) -> None:
        """After the summary: stop the topology, restore the sysctl profile. Also at exit, whatever happened."""
        if self._torn_down:
            return
        self._torn_down = True
        self.quitting()
        log.debug("stopping %s", "the embedded topology" if self.topology is not None else "the admin client")
        self._exit.close()

    # ---- one run ------------------------------------------------------------------------------------------

    def begin_run(self) -> None:
        if self.run is not None:  # a run the web UI did not stop cleanly
            self.end_run()
        try:
            self.run = _Run(self)
            self.run.begin()
        except Exception as exc:  # the run's boundary: exit code EXIT_ERROR
            log.exception("the run could not start")
            self.env.process_exit_code = EXIT_ERROR
            if self.run is not None:
                self.run.abort(str(exc))
            self.run = None
            gevent.spawn_later(0, self.runner.quit)

    def stopping(self) -> None:
        if self.run is not None:
            self.run.stop_producing()

    def end_run(self) -> None:
        run, self.run = self.run, None
        if run is None:
            return
        text, code = run.end()
        self.summary_text = text
        self.env.process_exit_code = code
        if not self.env.parsed_options.headless:
            print(text, flush=True)

    def print_final(self) -> None:
        """Headless: the summary as the last screen (locust prints its tables before ``quit``)."""
        if self.summary_text and self.env.parsed_options.headless:
            print("\n" + self.summary_text, flush=True)


def effective_broker_conf(conf_path: Path) -> dict[str, Any]:
    """Every broker.conf key of the embedded broker with the value in force (its file read as the broker reads
    it, defaults included), under RocketMQ's key names. A remote broker is described by its runtime info only:
    the reference broker has no GET_BROKER_CONFIG."""
    broker, store = load_broker_conf(conf_path)
    out: dict[str, Any] = {}
    for keys, obj in ((BROKER_KEYS, broker), (ROCKETMQ_KEYS, store)):
        for key, name in keys.items():
            value = getattr(obj, name)
            out[key] = value.name if isinstance(value, enum.Enum) else str(value) if isinstance(value, Path) else value
    return dict(sorted(out.items()))


class _Run:
    """One run, from test_start to test_stop."""

    def __init__(self, co: Coordinator) -> None:
        self.co = co
        self.settings: Settings = settings_from(co.env.parsed_options, co.spec.defaults)
        self.record: RunRecord | None = None
        self.metrics: MetricsWriter | None = None
        self.sampler: MetricsSampler | None = None
        self.vm_sampler: VmSampler | None = None
        self.hub: Hub | None = None
        self.agent: Agent | None = None
        self.ctx: RunContext | None = None
        self.controller: Any = None
        self.results: dict[str, Any] = {}

    @property
    def driver(self) -> Driver:
        assert self.co.driver is not None
        return self.co.driver

    def begin(self) -> None:
        co, s = self.co, self.settings
        opts = co.env.parsed_options
        users = getattr(opts, "num_users", None)
        params = {**s.params(), "users": users, "processes": getattr(opts, "processes", None),
                  "distributed": co.distributed, "host": co.env.host or None, "namesrv": co.namesrv}
        self.record = rec = RunRecord.create(s.run_dir, co.spec.name, params, command=sys.argv)
        tag = rec.run_id[-6:]
        phases = co.spec.phases(s, tag, co.spec.name)
        if s.topic:  # an existing topic: its own queue count
            phases = [Phase(p.label, tuple((t, self.driver.queue_count(t)) for t in p.topic_names)) for p in phases]
            if any(q == 0 for p in phases for _t, q in p.topics):
                raise OptionError(f"--topic {s.topic}: the name server has no route for it (create it first)")
        else:
            for phase in phases:
                for topic, queues in phase.topics:
                    self.driver.create_topic(topic, queues)
        facts = self.driver.broker_facts()
        broker = dict(facts["broker"])
        if co.topology is not None and co.topology.impl == "reference":
            broker = {**effective_broker_conf(Path(co.topology.brokers[0].args[-1])), **broker}
        elif co.topology is not None:  # RocketMQ answers GET_BROKER_CONFIG (in ``facts``); its file is the base
            broker = {**co.topology.brokers[0].conf, **broker}
        brokers = self._targets(facts)
        promise = facts.get("ack_promise") or ACK_PROMISES.get(str(broker.get("flushDiskType")))
        rec.update_meta(broker=broker, broker_impl=facts["broker_impl"], sysctl=co.sysctl, fio=co.fio,
                        driver=s.driver, ack_promise=None if promise is None else str(promise),
                        peer_client=facts.get("peer_client"),
                        # the coordinator's own driver is the library's whatever sends: say what the agents used
                        rocketmq_client={"rocketmq": s.rocketmq_client, "cpp": "cpp"}.get(s.driver),
                        topology={"embedded": co.topology is not None, "namesrv": co.namesrv,
                                  "brokers": facts["brokers"]},
                        phases=[{"label": p.label, "topics": [list(t) for t in p.topics]} for p in phases])
        processes = co.runner.worker_count if co.distributed else 1
        info = RunInfo(run_dir=str(rec.run_dir.resolve()), run_id=rec.run_id, tag=tag, scenario=co.spec.name,
                       namesrv=co.namesrv, group=f"lab_consumer_{tag}", phases=tuple(phases),
                       processes=max(1, processes),
                       from_timestamp_ms=(rec.meta()["started_at_ns"] // 1_000_000 - 1000) if s.topic else None)
        self.metrics = rec.metrics_writer()
        if not s.record:
            (rec.run_dir / "events").mkdir(exist_ok=True)  # recording off: a valid record with no events
        if co.distributed:
            assert co.master_hub is not None
            co.master_hub.expect(rec.run_id)
            self.hub = co.master_hub
            setattr(co.env.parsed_options, RUN_INFO_ATTR, info.to_json())  # travels in the spawn messages
        else:
            self.agent = Agent(info, s, "w0", fire=co.env.events.request.fire,
                               driver=co.spec.driver_for(info, s, "w0"))
            self.agent.begin()
            self.hub = LocalHub(self.agent)
        hub = self.hub
        self.sampler = MetricsSampler(
            self.metrics.record, brokers, runtime_info=self.driver.runtime_info,
            backlog=lambda: {info.group: self.driver.backlog(info.group, info.all_topics).total},
            counts=lambda: (hub.totals().ok, hub.totals().received)).start()
        # The host's dirty page cache and reclaim, finer than once a second: what a sysctl profile changes.
        self.vm_sampler = VmSampler(rec.metrics_writer("vm").record, clock=rec.clock.now_ns).start()
        run_time = getattr(opts, "run_time", None)
        self.ctx = RunContext(s, info, hub, self.driver, rec, brokers, float(run_time) if run_time else None,
                              self.results, memory_cgroup=co.memory_cgroup,
                              end_run=lambda: gevent.spawn_later(0.5, co.runner.quit))
        self.controller = gevent.spawn(self._control, processes)
        log.info("run %s: %s, %d phase(s), %s", rec.run_id, rec.run_dir, len(phases),
                 "embedded broker" if co.topology is not None else f"name server {co.namesrv}")

    def _targets(self, facts: dict[str, Any]) -> list[BrokerTarget]:
        topo = self.co.topology
        if topo is not None:
            return [BrokerTarget(b.name, b.addr, b.pid, b.store_root) for b in topo.brokers]
        return [BrokerTarget(name, addr) for name, addr in facts["brokers"].items()]

    def _control(self, processes: int) -> None:
        ctx = self.ctx
        assert ctx is not None
        if self.co.distributed:
            assert self.co.master_hub is not None
            joined = self.co.master_hub.wait_joined(processes, JOIN_TIMEOUT_S)
            if joined < processes:
                log.warning("only %d of %d workers joined the run", joined, processes)
        if self.co.spec.controller is not None:
            try:
                self.co.spec.controller(ctx)
            except gevent.GreenletExit:
                raise
            except Exception as exc:  # the user's controller: its error goes into the results
                log.exception("the %s controller failed", self.co.spec.name)
                self.results["controller_error"] = f"{type(exc).__name__}: {exc}"

    def stop_producing(self) -> None:
        if self.ctx is not None:
            self.ctx.stopped.set()
        if self.controller is not None:
            # A controller sees ``stopped`` at its next sleep and returns: give it a moment to write its
            # findings (a kill lands inside its cleanup otherwise), then kill one that does not.
            self.controller.join(timeout=CONTROLLER_GRACE_S)
            self.controller.kill(block=True, timeout=10)
        if self.hub is not None:
            self.hub.command("stop_producing", timeout_s=self.settings.send_timeout_s * 3 + 5)

    def _drain(self) -> dict[str, Any]:
        assert self.hub is not None
        self.hub.command("resume")  # a run may end while the consumers are paused
        start = last_change = time.monotonic()
        deadline = start + self.settings.drain_timeout_s
        last_rx = -1
        while True:
            t = self.hub.totals()
            now = time.monotonic()
            if t.received != last_rx:
                last_rx, last_change = t.received, now
            caught_up = t.received >= t.ok
            if caught_up and now - last_change >= QUIET_S:
                reason = "caught up"
                break
            if now - last_change >= IDLE_S:
                reason = f"no delivery for {IDLE_S:g} s"
                break
            if now >= deadline:
                reason = f"drain timeout ({self.settings.drain_timeout_s:g} s)"
                break
            gevent.sleep(0.1)
        return {"waited_s": round(time.monotonic() - start, 3), "caught_up": caught_up, "reason": reason,
                "acknowledged": t.ok, "received": t.received}

    def _final_read(self) -> dict[str, Any]:
        """Read back each acknowledged message no consumer received (harness.final_read), after the load
        processes wrote their last events."""
        rec = self.record
        assert rec is not None
        wanted = final_read.wanted_positions(load_events(rec.run_dir, columns=final_read.COLUMNS))
        if wanted:
            log.info("run %s: reading back %d acknowledged, unreceived messages", rec.run_id,
                     sum(len(k) for k in wanted.values()))
        writer = rec.events_writer(final_read.SESSION)
        try:
            stats = final_read.read_back(self.co.namesrv, wanted, writer, group=f"lab_final_read_{rec.run_id[-6:]}",
                                         instance=f"final-read-{os.getpid()}", budget_s=self.settings.final_read_s)
        finally:
            writer.close()
        return stats.to_json()

    def end(self) -> tuple[str, int]:
        """Drain, finish, check, summarize; (summary text, exit code). Never raises."""
        rec = self.record
        assert rec is not None
        code = EXIT_ERROR
        try:
            log.info("run %s: ending (producers stop, consumers drain)", rec.run_id)
            if self.ctx is not None and not self.ctx.stopped.is_set():
                self.stop_producing()
            if self.settings.consumers > 0:
                self.results["drain_at_end"] = self._drain()
            assert self.hub is not None
            log.info("run %s: finishing the load processes", rec.run_id)
            finished = self.hub.command("finish", timeout_s=60)
            errors = [c.error for c in finished if c.error]
            totals = self.hub.totals()
            self.results["load"] = {"processes": len(finished), "attempted": totals.attempted, "ok": totals.ok,
                                    "fail": totals.fail, "unknown": totals.unknown, "received": totals.received,
                                    "foreign": totals.foreign, "rows": totals.rows,
                                    "send_rate": totals.send_rate, "cpu_s": round(totals.cpu_s, 3),
                                    "cpu_us_per_msg": round(totals.cpu_s / totals.ok * 1e6, 2) if totals.ok else None}
            if errors:
                self.results["load_errors"] = errors
            # A peer broker has no positions to read back by (harness.peer_drivers): its consumer's drain is all.
            if (self.settings.record and self.settings.consumers > 0 and self.settings.final_read_s > 0
                    and self.co.peer is None):
                self.results["final_read"] = self._final_read()
        except Exception as exc:  # ending the run: the error goes into the results
            log.exception("ending the run")
            self.results["end_error"] = f"{type(exc).__name__}: {exc}"
        finally:
            if self.co.distributed:
                assert self.co.master_hub is not None
                self.co.master_hub.expect(None)
            if self.sampler is not None:
                self.sampler.stop()
                self.results["sampler"] = {"rounds": self.sampler.stats.rounds, "errors": self.sampler.stats.errors,
                                           "last_error": self.sampler.stats.last_error}
            if self.vm_sampler is not None:
                self.vm_sampler.stop()
                self.results["vm_sampler"] = self.vm_sampler.stats()
            try:
                rec.finish(results=self.results)
            except Exception as exc:  # finishing the record: the error goes into the results
                log.exception("finishing the record")
                self.results["finish_error"] = str(exc)
        check = None
        log.info("run %s: checking", rec.run_id)
        try:
            if self.settings.record and self.settings.consumers > 0:
                check = check_run(rec.run_dir).to_json()
                code = EXIT_VALID if check["valid"] else EXIT_INVALID
            else:
                problems = validate_run(rec.run_dir)
                code = EXIT_ERROR if problems else EXIT_VALID
            if self.results.get("load_errors") or self.results.get("end_error"):
                code = EXIT_ERROR
        except Exception as exc:  # checking the run: the error goes into the results
            log.exception("checking the run")
            self.results["check_error"] = str(exc)
        try:
            summary = summarize(rec.run_dir, check)
            text = format_summary(summary)
            stall = drain_stall(summary, "locust " + shlex.join(sys.argv[1:]))
            if stall is not None:  # about RocketMQ: a finding for the reports' findings page
                path = record_finding(Path(self.settings.run_dir), stall)
                text += f"\nfinding {stall.title} -> {path}"
            (rec.run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
            (rec.run_dir / "summary.txt").write_text(text + "\n")
        except Exception as exc:  # the summary: a run without one still ends
            log.exception("summarizing the run")
            text = f"run {rec.run_id} ({rec.run_dir}): no summary ({exc})"
        return text, code

    def abort(self, why: str) -> None:
        """A run that could not start: release what it took and mark its record."""
        if self.agent is not None:
            self.agent.finish()
        if self.sampler is not None:
            self.sampler.stop(final_sample=False)
        if self.vm_sampler is not None:
            self.vm_sampler.stop(final_sample=False)
        if self.record is not None:
            try:
                self.record.finish(results={"aborted": why})
            except Exception:  # aborting: nothing more to report to
                log.exception("finishing an aborted record")


