"""ServiceThread (RocketMQ's ServiceThread protocol) and PeriodicTask."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from reference_broker.store.service_thread import PeriodicTask, ServiceThread


class Counter(ServiceThread):
    def __init__(self, interval_s: float) -> None:
        super().__init__("Counter")
        self.interval_s = interval_s
        self.rounds = 0
        self.round_done = threading.Event()

    def run(self) -> None:
        while not self.is_stopped:
            self.wait_for_running(self.interval_s)
            self.rounds += 1
            self.round_done.set()


def test_wakeup_ends_the_wait_at_once() -> None:
    svc = Counter(60.0)
    svc.start()
    try:
        svc.wakeup()
        assert svc.round_done.wait(5)
    finally:
        svc.shutdown()
    assert svc._thread is not None and not svc._thread.is_alive()


def test_a_wakeup_while_busy_is_not_lost() -> None:
    """The has-notified flag: a wake-up before the wait makes the next wait return at once."""
    svc = Counter(60.0)
    svc.wakeup()  # nobody waits yet
    t0 = time.monotonic()
    svc.wait_for_running(60.0)
    assert time.monotonic() - t0 < 1.0
    t0 = time.monotonic()
    svc.wait_for_running(0.05)  # consumed: this one waits its interval
    assert time.monotonic() - t0 >= 0.04


def test_sleep_returns_true_once_stopping() -> None:
    svc = Counter(1.0)
    assert svc.sleep(0.01) is False
    svc.make_stop()
    assert svc.is_stopped
    assert svc.sleep(60.0) is True


def test_a_run_that_raises_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(ServiceThread):
        def run(self) -> None:
            raise RuntimeError("boom")

    svc = Broken("Broken")
    with caplog.at_level(logging.ERROR):
        svc.start()
        svc.join(5)
    assert any("Broken died" in r.message for r in caplog.records)


def test_periodic_task_runs_after_the_delay_then_every_period_and_survives_a_failure() -> None:
    runs: list[float] = []

    def job() -> None:
        runs.append(time.monotonic())
        if len(runs) == 1:
            raise ValueError("the first run fails")

    t0 = time.monotonic()
    task = PeriodicTask("job", 0.05, 0.01, job)
    task.start()
    try:
        deadline = time.monotonic() + 5
        while len(runs) < 3 and time.monotonic() < deadline:
            time.sleep(0.005)
    finally:
        task.shutdown(5)
    assert len(runs) >= 3
    assert runs[0] - t0 >= 0.04
    count = len(runs)
    time.sleep(0.05)
    assert len(runs) == count  # stopped


def test_periodic_task_stopped_during_its_delay_never_runs() -> None:
    runs: list[int] = []
    task = PeriodicTask("never", 60.0, 1.0, lambda: runs.append(1))
    task.start()
    task.shutdown(5)
    assert runs == []
