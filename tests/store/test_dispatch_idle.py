"""Dispatch's idle wait (store/reput.py, ``dispatchIdleIntervalMillis``): long while nothing waits for dispatch,
1 ms (4.9.8) while something does, and ended at once by whatever needs what is written now."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from reference_broker.store.config import ROCKETMQ_KEYS, BrokerRole
from reference_broker.store.message_store import MessageStore
from reference_broker.store.reput import BUSY_IDLE_S
from reference_broker.store.status import GetMessageStatus
from tests.store.store_helpers import TOPIC, Stores, make_config, make_msg, put_ok, stores_fixture, wait_until

LONG_MS = 5000  # far longer than any wait below: what finishes before it was nudged


@pytest.fixture
def stores():
    yield from stores_fixture()


def _open(stores: Stores, root: Path, idle_ms: int) -> MessageStore:
    return stores.open(make_config(root, mapped_file_size_commit_log=1 << 20, dispatch_idle_interval_ms=idle_ms))


def _runs_over_spread_puts(store: MessageStore, n: int = 100, spread_s: float = 0.2) -> int:
    """Dispatch runs while ``n`` puts arrive one at a time over ``spread_s``, until all are dispatched."""
    before = store.reput.dispatch_runs
    for i in range(n):
        put_ok(store, make_msg(f"m{i}"))
        time.sleep(spread_s / n)
    wait_until(lambda: store.dispatch_behind_bytes() == 0, what="dispatch")
    return store.reput.dispatch_runs - before


def test_with_nothing_waiting_dispatch_runs_far_less_often(stores: Stores, tmp_path: Path) -> None:
    """Counted, not timed: 100 puts 2 ms apart are dispatched in about one run each at 1 ms (4.9.8), and in
    about one run per 10 ms at the default interval."""
    at_1ms = _open(stores, tmp_path / "a", 1)
    at_10ms = _open(stores, tmp_path / "b", 10)
    assert at_10ms.reput.idle_interval_s == 0.010 and at_1ms.reput.idle_interval_s == BUSY_IDLE_S
    runs_1 = _runs_over_spread_puts(at_1ms)
    runs_10 = _runs_over_spread_puts(at_10ms)
    assert runs_10 <= 0.2 / 0.010 * 1.5 + 2  # at most ~one run per 10 ms (sleeps only overshoot)
    assert runs_10 * 2 <= runs_1, (runs_1, runs_10)
    assert at_10ms.get_max_offset_in_queue(TOPIC, 0) == 100
    assert at_10ms.get_runtime_info()["dispatchRuns"] == str(at_10ms.reput.dispatch_runs)


def test_a_waiter_makes_dispatch_look_every_ms(stores: Stores, tmp_path: Path) -> None:
    store = _open(stores, tmp_path, LONG_MS)
    waiting = [False]
    store.add_dispatch_waiter(lambda: waiting[0])
    assert store.reput.idle_wait_s() == LONG_MS / 1000
    waiting[0] = True
    assert store.reput.idle_wait_s() == BUSY_IDLE_S
    store.nudge_dispatch()  # what turned the waiter true ends the long wait chosen before
    put_ok(store, make_msg("x"))
    wait_until(lambda: store.dispatch_behind_bytes() == 0, timeout_s=LONG_MS / 1000 / 2, what="dispatch at 1 ms")


def test_a_read_at_the_end_of_a_queue_has_what_is_written_dispatched(stores: Stores, tmp_path: Path) -> None:
    """The read finds nothing built yet (the queue does not exist, then ends at the offset read): it nudges, and
    dispatch runs at once rather than at the end of its long wait."""
    store = _open(stores, tmp_path, LONG_MS)
    put_ok(store, make_msg("first"))
    time.sleep(0.2)
    assert store.dispatch_behind_bytes() > 0  # the long wait is really long: nothing dispatched it yet
    assert store.get_message("g", TOPIC, 0, 0, 32).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    wait_until(lambda: store.get_max_offset_in_queue(TOPIC, 0) == 1, timeout_s=LONG_MS / 1000 / 2,
               what="dispatch after the nudge")
    put_ok(store, make_msg("second"))
    assert store.get_message("g", TOPIC, 0, 1, 32).status is GetMessageStatus.OFFSET_OVERFLOW_ONE
    wait_until(lambda: store.get_max_offset_in_queue(TOPIC, 0) == 2, timeout_s=LONG_MS / 1000 / 2,
               what="dispatch after the second nudge")
    assert store.get_message("g", TOPIC, 0, 1, 32).status is GetMessageStatus.FOUND


def test_a_key_lookup_and_wait_dispatched_see_the_puts_before_them(stores: Stores, tmp_path: Path) -> None:
    store = _open(stores, tmp_path, LONG_MS)
    put_ok(store, make_msg("keyed", keys="k-1"))
    found = store.query_message(TOPIC, "k-1", 32, 0, 2**62)
    assert [m.keys for m in found] == ["k-1"]
    put_ok(store, make_msg("more"))
    assert store.wait_dispatched(LONG_MS / 1000 / 2)
    assert store.dispatch_behind_bytes() == 0


def test_clean_shutdown_still_waits_for_dispatch(stores: Stores, tmp_path: Path) -> None:
    store = _open(stores, tmp_path, LONG_MS)
    put_ok(store, make_msg("last"))
    store.shutdown()
    assert store.shutdown_normally is True
    again = stores.open(make_config(tmp_path, mapped_file_size_commit_log=1 << 20))
    assert again.last_exit_ok
    assert again.get_max_offset_in_queue(TOPIC, 0) == 1


def test_the_key_and_a_slave_keep_their_cadence(stores: Stores, tmp_path: Path) -> None:
    assert ROCKETMQ_KEYS["dispatchIdleIntervalMillis"] == "dispatch_idle_interval_ms"
    slave = stores.new(make_config(tmp_path / "s", broker_role=BrokerRole.SLAVE, dispatch_idle_interval_ms=LONG_MS))
    assert slave.reput.busy_idle_s == slave.reput.idle_interval_s  # held pulls or not, as before
    assert slave.reput.idle_interval_s < LONG_MS / 1000
    four_nine_eight = stores.new(make_config(tmp_path / "m", dispatch_idle_interval_ms=1))
    assert four_nine_eight.reput.idle_interval_s == four_nine_eight.reput.busy_idle_s == BUSY_IDLE_S
