"""ConsumePool: the consume thread pool keeps ThreadPoolExecutor's contract without a Future per call."""

from __future__ import annotations

import threading
import time

import pytest

from reference_broker.client.consume_pool import ConsumePool


def test_calls_run_and_threads_grow_only_to_the_maximum() -> None:
    pool = ConsumePool(3, "t")
    gate = threading.Event()
    ran: list[int] = []
    names: set[str] = set()
    lock = threading.Lock()

    def call(i: int) -> None:
        gate.wait(5)
        with lock:
            ran.append(i)
            names.add(threading.current_thread().name)

    for i in range(10):
        pool.submit(call, i)
    assert pool.threads == 3  # each call found no idle worker, so up to the maximum were started
    gate.set()
    deadline = time.monotonic() + 5
    while len(ran) < 10 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert sorted(ran) == list(range(10))
    assert names <= {"t_0", "t_1", "t_2"}
    pool.shutdown(wait=True)


def wait_idle(pool: ConsumePool, workers: int = 1) -> None:
    """Until ``workers`` have finished their call and wait for the next (the pool's idle count)."""
    deadline = time.monotonic() + 5
    while pool._idle._value < workers:  # threading.Semaphore's count
        assert time.monotonic() < deadline, "the worker never went idle"
        time.sleep(0.001)


def test_an_idle_worker_takes_the_next_call_instead_of_a_new_thread() -> None:
    pool = ConsumePool(4, "t")
    for _ in range(4):
        done = threading.Event()
        pool.submit(done.set)
        assert done.wait(5)
        wait_idle(pool)
    assert pool.threads == 1
    pool.shutdown(wait=True)


def test_a_failing_call_does_not_end_its_worker() -> None:
    pool = ConsumePool(1, "t")

    def boom() -> None:
        raise ValueError("listener bug")

    pool.submit(boom)
    after = threading.Event()
    pool.submit(after.set)
    assert after.wait(5)
    assert pool.threads == 1
    pool.shutdown(wait=True)


def test_shutdown_refuses_new_calls_drops_queued_ones_and_waits_for_running_ones() -> None:
    pool = ConsumePool(1, "t")
    started = threading.Event()
    release = threading.Event()
    finished: list[str] = []

    def running() -> None:
        started.set()
        release.wait(5)
        finished.append("running")

    pool.submit(running)
    assert started.wait(5)
    pool.submit(finished.append, "queued")
    pool.shutdown(wait=False, cancel_futures=True)
    with pytest.raises(RuntimeError):
        pool.submit(finished.append, "late")
    waiter = threading.Thread(target=pool.shutdown, kwargs={"wait": True})
    waiter.start()
    time.sleep(0.05)
    assert waiter.is_alive()  # the running call holds it
    release.set()
    waiter.join(5)
    assert not waiter.is_alive()
    assert finished == ["running"]


def test_at_least_one_thread() -> None:
    with pytest.raises(ValueError):
        ConsumePool(0, "t")
