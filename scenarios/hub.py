"""How the coordinator steers the load processes: in-process (local runner) or over locust's message bus.

Commands are the ``Agent`` methods named in ``COMMANDS``. Over the bus (``--master``/``--worker``,
``--processes``): the master broadcasts ``rmq_cmd`` {run_id, seq, op, args}; each worker runs it on a greenlet
of its own and answers ``rmq_ack`` with its counts; every ``PROGRESS_INTERVAL_S`` a worker also sends
``rmq_progress``, from which the master sums the run's counts (send/consume rates, drain progress). Messages
of another run (a late worker, a previous run in the web UI) are ignored by run id.
"""

# gevent and locust ship no type information; their names are Any here.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

import abc
import logging
import time
from collections.abc import Callable
from typing import Any, Final

import gevent

from scenarios.agent import Agent
from scenarios.contract import Counts

log = logging.getLogger(__name__)

COMMANDS: Final = frozenset({"set_phase", "set_rate", "pause", "resume", "stop_producing", "finish", "mark"})
PROGRESS_INTERVAL_S: Final = 0.25
MSG_CMD, MSG_ACK, MSG_PROGRESS = "rmq_cmd", "rmq_ack", "rmq_progress"


class Hub(abc.ABC):
    @abc.abstractmethod
    def command(self, op: str, timeout_s: float = 60.0, **args: Any) -> list[Counts]:
        """Run ``op`` on every load process; their counts afterwards (those that answered in time)."""

    @abc.abstractmethod
    def totals(self) -> Counts:
        """The run's counts, summed over the load processes (up to ``PROGRESS_INTERVAL_S`` old over the bus)."""

    @abc.abstractmethod
    def processes(self) -> int: ...


def run_command(agent: Agent, op: str, args: dict[str, Any]) -> Counts:
    if op not in COMMANDS:
        raise ValueError(f"unknown command {op!r}")
    method: Callable[..., Counts] = getattr(agent, op)
    return method(**args)


class LocalHub(Hub):
    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def command(self, op: str, timeout_s: float = 60.0, **args: Any) -> list[Counts]:
        return [run_command(self.agent, op, args)]

    def totals(self) -> Counts:
        return Counts.total([self.agent.snapshot()])

    def processes(self) -> int:
        return 1


class MasterHub(Hub):
    """The master's side. ``expect(run_id)`` starts a run: workers join it with their first report."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.run_id: str | None = None
        self._seq = 0
        self._latest: dict[str, Counts] = {}  # worker -> latest counts of this run
        self._acks: dict[int, dict[str, Counts]] = {}
        runner.register_message(MSG_ACK, self._on_ack)
        runner.register_message(MSG_PROGRESS, self._on_progress)

    def expect(self, run_id: str | None) -> None:
        self.run_id = run_id
        self._latest.clear()
        self._acks.clear()

    def _on_progress(self, environment: Any, msg: Any, **_kw: Any) -> None:
        data = msg.data or {}
        if data.get("run_id") == self.run_id:
            c = Counts.from_dict(data["counts"])
            self._latest[c.worker] = c

    def _on_ack(self, environment: Any, msg: Any, **_kw: Any) -> None:
        data = msg.data or {}
        if data.get("run_id") != self.run_id:
            return
        c = Counts.from_dict(data["counts"])
        self._latest[c.worker] = c
        self._acks.setdefault(int(data["seq"]), {})[c.worker] = c
        if data.get("error"):
            log.error("worker %s: command %s failed: %s", c.worker, data.get("op"), data["error"])

    def wait_joined(self, n: int, timeout_s: float) -> int:
        """Wait until ``n`` workers report for this run; how many did."""
        deadline = time.monotonic() + timeout_s
        while len(self._latest) < n and time.monotonic() < deadline:
            gevent.sleep(0.05)
        return len(self._latest)

    def command(self, op: str, timeout_s: float = 60.0, **args: Any) -> list[Counts]:
        if op not in COMMANDS:
            raise ValueError(f"unknown command {op!r}")
        self._seq += 1
        seq = self._seq
        members = set(self._latest)
        self.runner.send_message(MSG_CMD, {"run_id": self.run_id, "seq": seq, "op": op, "args": args})
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            acked = self._acks.get(seq, {})
            if members <= set(acked):
                break
            gevent.sleep(0.02)
        else:
            missing = sorted(members - set(self._acks.get(seq, {})))
            log.warning("command %s: no answer from %s within %.0f s", op, ", ".join(missing), timeout_s)
        return list(self._acks.pop(seq, {}).values())

    def totals(self) -> Counts:
        return Counts.total(list(self._latest.values()))

    def processes(self) -> int:
        return len(self._latest)


class WorkerLink:
    """The worker's side: runs commands for the current run's agent and reports progress."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.agent: Agent | None = None
        self.run_id: str | None = None
        self._reporter: Any = None
        runner.register_message(MSG_CMD, self._on_command, concurrent=True)

    def attach(self, agent: Agent, run_id: str) -> None:
        self.agent = agent
        self.run_id = run_id
        self._send(MSG_PROGRESS, agent.snapshot())
        if self._reporter is None:
            self._reporter = gevent.spawn(self._report_loop)

    def _send(self, kind: str, counts: Counts, **extra: Any) -> None:
        try:
            self.runner.send_message(kind, {"run_id": self.run_id, "counts": counts.to_dict(), **extra})
        except Exception as exc:  # noqa: BLE001 - the master's boundary: if it went away, the run goes on locally
            log.warning("cannot report to the master: %s", exc)

    def _report_loop(self) -> None:
        while True:
            agent = self.agent
            if agent is not None:
                self._send(MSG_PROGRESS, agent.snapshot())
            gevent.sleep(PROGRESS_INTERVAL_S)

    def _on_command(self, environment: Any, msg: Any, **_kw: Any) -> None:
        data = msg.data or {}
        agent = self.agent
        if agent is None or data.get("run_id") != self.run_id:
            return
        error = None
        try:
            counts = run_command(agent, data["op"], dict(data.get("args") or {}))
        except Exception as exc:  # a command from the master: the error is sent back
            log.exception("command %s failed", data.get("op"))
            error = f"{type(exc).__name__}: {exc}"
            counts = agent.snapshot()
        self._send(MSG_ACK, counts, seq=data["seq"], op=data["op"], error=error)

    def detach(self) -> None:
        if self._reporter is not None:
            self._reporter.kill(block=False)
            self._reporter = None
