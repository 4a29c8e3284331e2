"""The client's timer thread and serial worker (functional behaviour only, no timing claims)."""

from __future__ import annotations

import threading
from functools import partial

from reference_broker.client.scheduler import Scheduler, Worker


def test_tasks_run_in_deadline_order_and_periodic_ones_repeat() -> None:
    sched = Scheduler()
    sched.start()
    ran: list[str] = []
    done = threading.Event()
    ticks = threading.Semaphore(0)

    def late() -> None:
        ran.append("late")
        done.set()

    sched.schedule(0.2, late)
    sched.schedule(0.0, lambda: ran.append("now"))
    sched.schedule_at_fixed_rate(0.0, 0.01, ticks.release)
    assert done.wait(5)
    for _ in range(3):
        assert ticks.acquire(timeout=5)
    sched.shutdown()
    assert ran == ["now", "late"]


def test_a_failing_task_does_not_stop_the_scheduler() -> None:
    sched = Scheduler()
    sched.start()
    ok = threading.Event()
    sched.schedule(0.0, lambda: 1 / 0)
    sched.schedule(0.01, ok.set)
    assert ok.wait(5)
    sched.shutdown()


def test_shutdown_drops_pending_tasks() -> None:
    sched = Scheduler()
    sched.start()
    ran = threading.Event()
    sched.schedule(30.0, ran.set)
    sched.shutdown()
    sched.schedule(0.0, ran.set)  # after shutdown: ignored
    assert not ran.wait(0.2)


def test_worker_runs_tasks_in_submission_order() -> None:
    worker = Worker("w")
    worker.start()
    out: list[int] = []
    done = threading.Event()
    for i in range(100):
        worker.execute(partial(out.append, i))
    worker.execute(lambda: 1 / 0)
    worker.execute(done.set)
    assert done.wait(5)
    worker.shutdown()
    assert out == list(range(100))
