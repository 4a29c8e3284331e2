"""Replication as the SYNC_MASTER durability condition (CommitLog.submitReplicaRequest, HAService.isSlaveOK and
GroupTransferService, 4.9.8), with a real slave over loopback or a socket that plays a slave."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from reference_broker.common import message as mc
from reference_broker.store.config import BrokerRole
from reference_broker.store.ha.replica import ReplicaState, ReplicationCondition
from reference_broker.store.status import PutMessageStatus
from tests.ha.ha_helpers import open_master, open_slave
from tests.store.store_helpers import make_config, make_msg, stores_fixture, wait_until


@pytest.fixture
def stores():
    yield from stores_fixture()


def sync_master(stores, tmp_path, **overrides):
    return open_master(stores, tmp_path / "m", broker_role=BrokerRole.SYNC_MASTER, **overrides)


def test_sync_master_put_returns_put_ok_only_after_the_slave_reported_it(stores, tmp_path):
    master, ha = sync_master(stores, tmp_path)
    slave, _ = open_slave(stores, tmp_path / "s", ha)
    wait_until(lambda: ha.connection_count() == 1, what="the slave to connect")
    for i in range(20):
        result = master.put_message(make_msg(f"m{i}"))
        assert result.status is PutMessageStatus.PUT_OK
        assert result.append is not None
        end = result.append.wrote_offset + result.append.wrote_bytes
        # PUT_OK means a slave acknowledged the put's end offset: the slave already holds it.
        assert master.replica.push2slave_max_offset >= end
        assert slave.get_max_phy_offset() >= end


def test_one_report_releases_every_put_it_covers(stores, tmp_path):
    """Group commit: puts waiting together all complete on the acknowledgement that covers the last one."""
    master, ha = sync_master(stores, tmp_path)
    with socket.create_connection(("127.0.0.1", ha.port), timeout=10) as fake:
        fake.sendall(struct.pack(">q", master.get_max_phy_offset() or 1))
        wait_until(lambda: ha.connection_count() == 1, what="the fake slave to connect")
        pending = [master.put(make_msg(f"m{i}")) for i in range(10)]
        time.sleep(0.1)
        assert not any(p.done for p in pending)  # nobody acknowledged yet
        fake.sendall(struct.pack(">q", master.get_max_phy_offset()))
        assert [p.wait().status for p in pending] == [PutMessageStatus.PUT_OK] * 10


def test_no_slave_is_slave_not_available_and_the_message_is_stored(stores, tmp_path):
    master, _ = sync_master(stores, tmp_path)
    before = master.get_max_phy_offset()
    t0 = time.monotonic()
    result = master.put_message(make_msg("alone"))
    assert result.status is PutMessageStatus.SLAVE_NOT_AVAILABLE
    assert time.monotonic() - t0 < 2  # at once, not after slaveTimeout (3 s)
    assert result.append is not None and result.append.wrote_offset == before
    assert master.get_max_phy_offset() > before
    assert master.look_message_by_offset(before).body == b"alone"


def test_silent_slave_is_flush_slave_timeout(stores, tmp_path):
    """A connected slave that stops acknowledging: the put waits slaveTimeout, then FLUSH_SLAVE_TIMEOUT."""
    master, ha = sync_master(stores, tmp_path, slave_timeout_ms=300)
    slave, _client = open_slave(stores, tmp_path / "s", ha)
    assert master.put_message(make_msg("first")).status is PutMessageStatus.PUT_OK
    # The slave stops mid-way without closing its connection: the fake below keeps the master's connection
    # open and reports only what the slave had.
    acked = slave.get_max_phy_offset()
    slave.shutdown()
    wait_until(lambda: ha.connection_count() == 0, what="the stopped slave's connection to go")
    with socket.create_connection(("127.0.0.1", ha.port), timeout=10) as fake:
        fake.sendall(struct.pack(">q", acked))
        wait_until(lambda: ha.connection_count() == 1, what="the silent slave to connect")
        t0 = time.monotonic()
        result = master.put_message(make_msg("unacked"))
        assert result.status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
        assert time.monotonic() - t0 >= 0.29
        assert result.append is not None
        assert master.look_message_by_offset(result.append.wrote_offset).body == b"unacked"  # stored anyway


def test_slave_gone_after_housekeeping_is_slave_not_available(stores, tmp_path):
    """HATest: the slave shut down, then after haHousekeepingInterval puts are SLAVE_NOT_AVAILABLE."""
    master, ha = sync_master(stores, tmp_path, ha_housekeeping_interval_ms=1000)
    slave, _ = open_slave(stores, tmp_path / "s", ha)
    assert master.put_message(make_msg("a")).status is PutMessageStatus.PUT_OK
    slave.shutdown()
    time.sleep(1.5)
    assert master.put_message(make_msg("b")).status is PutMessageStatus.SLAVE_NOT_AVAILABLE


def test_slave_too_far_behind_is_slave_not_available(stores, tmp_path):
    master, ha = sync_master(stores, tmp_path, ha_slave_fallbehind_max=100)
    with socket.create_connection(("127.0.0.1", ha.port), timeout=10) as fake:
        for i in range(5):
            master.put_message(make_msg(f"m{i}"))  # SLAVE_NOT_AVAILABLE: no slave yet
        fake.sendall(struct.pack(">q", 1))  # connected, but far behind
        wait_until(lambda: ha.connection_count() == 1, what="the fake slave to connect")
        assert master.put_message(make_msg("x")).status is PutMessageStatus.SLAVE_NOT_AVAILABLE


def test_async_master_and_wait_false_never_wait(stores, tmp_path):
    master, _ha = open_master(stores, tmp_path / "m")  # ASYNC_MASTER, no slave at all
    assert master.put_message(make_msg("a")).status is PutMessageStatus.PUT_OK
    assert [c.name for c in master.durability] == ["flush"]
    sync, _ = sync_master(stores, tmp_path / "x")
    msg = make_msg("b", props={mc.PROPERTY_WAIT_STORE_MSG_OK: "false"})
    assert sync.put_message(msg).status is PutMessageStatus.PUT_OK  # WAIT=false: answers without a slave


def test_condition_is_only_for_sync_master(tmp_path):
    from reference_broker.store.message_store import MessageStore
    names = {role: [c.name for c in MessageStore(make_config(tmp_path / role.value, broker_role=role)).durability]
             for role in BrokerRole}
    assert names == {BrokerRole.ASYNC_MASTER: ["flush"], BrokerRole.SYNC_MASTER: ["flush", "replication"],
                     BrokerRole.SLAVE: ["flush"]}


def test_is_slave_ok_and_push2slave_never_goes_back(tmp_path):
    state = ReplicaState(make_config(tmp_path, ha_slave_fallbehind_max=1000))
    assert not state.is_slave_ok(0)  # no connection
    state.add_connection()
    assert state.is_slave_ok(999) and not state.is_slave_ok(1000)
    state.notify_transfer_some(500)
    state.notify_transfer_some(200)  # a slower slave
    assert state.push2slave_max_offset == 500
    assert ReplicationCondition(state.config, state).name == "replication"


def _state(tmp_path, **overrides):
    state = ReplicaState(make_config(tmp_path, **overrides))
    state.add_connection()
    return state


def test_one_acknowledgement_releases_the_covered_puts_on_the_reporting_thread(tmp_path):
    """The report's thread completes every request it covers, in one batch, and only those; no other thread
    is involved (the group transfer thread is not even running here)."""
    from reference_broker.store.ha.replica import ReplicaRequest
    state = _state(tmp_path)
    reqs = [ReplicaRequest(100 * (i + 1), 60_000) for i in range(5)]
    for r in reqs:
        state.group_transfer.put_request(r)
    seen: list[tuple[int, int]] = []
    for r in reqs:
        r.add_done_callback(lambda _s, r=r: seen.append((r.next_offset, threading.get_ident())))
    state.notify_transfer_some(300)
    assert [off for off, _ in seen] == [100, 200, 300]
    assert {tid for _, tid in seen} == {threading.get_ident()}
    assert [r.status for r in reqs] == [PutMessageStatus.PUT_OK] * 3 + [None, None]
    state.notify_transfer_some(10_000)
    assert [r.status for r in reqs] == [PutMessageStatus.PUT_OK] * 5


def test_a_request_arriving_out_of_offset_order_is_still_released(tmp_path):
    """A put from another thread may reach the condition after a later put: it must not wait behind it."""
    from reference_broker.store.ha.replica import ReplicaRequest
    state = _state(tmp_path)
    late, early = ReplicaRequest(500, 60_000), ReplicaRequest(200, 60_000)
    state.group_transfer.put_request(late)
    state.group_transfer.put_request(early)
    state.notify_transfer_some(300)
    assert early.status is PutMessageStatus.PUT_OK and late.status is None


def test_a_request_already_acknowledged_completes_at_once(tmp_path):
    from reference_broker.store.ha.replica import ReplicaRequest
    state = _state(tmp_path)
    state.notify_transfer_some(1000)
    req = ReplicaRequest(800, 60_000)
    state.group_transfer.put_request(req)
    assert req.status is PutMessageStatus.PUT_OK


def test_the_group_transfer_times_out_only_expired_requests(tmp_path):
    from reference_broker.store.ha.replica import ReplicaRequest
    state = _state(tmp_path)
    gt = state.group_transfer
    gt.start()
    try:
        short, long_ = ReplicaRequest(100, 150), ReplicaRequest(200, 60_000)
        t0 = time.monotonic()
        gt.put_request(short)
        gt.put_request(long_)
        assert short.result(5) is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
        assert 0.14 <= time.monotonic() - t0 < 2
        assert long_.status is None
        state.notify_transfer_some(200)
        assert long_.status is PutMessageStatus.PUT_OK
    finally:
        gt.shutdown()


def test_stopping_the_group_transfer_times_out_what_waits(tmp_path):
    from reference_broker.store.ha.replica import ReplicaRequest
    state = _state(tmp_path)
    gt = state.group_transfer
    gt.start()
    req = ReplicaRequest(100, 60_000)
    gt.put_request(req)
    gt.shutdown()
    assert req.status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
    after = ReplicaRequest(200, 60_000)
    gt.put_request(after)  # no thread is left: completed at once, not left hanging
    assert after.status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT


def test_a_sender_does_not_sleep_through_a_wakeup_between_its_look_and_its_wait():
    from reference_broker.store.ha.replica import WaitNotify
    senders = WaitNotify()
    seen = senders.generation()  # the sender looks: nothing new
    senders.wakeup_all()  # a put lands before the sender waits
    t0 = time.monotonic()
    senders.wait(5.0, seen)
    assert time.monotonic() - t0 < 1.0


def test_wakeups_asked_in_one_loop_turn_wake_the_sender_once_after_it():
    import asyncio

    from reference_broker.ha.service import _end_of_turn
    from reference_broker.store.ha.replica import WaitNotify

    async def main() -> tuple[int, int, int]:
        senders = WaitNotify()
        senders.defer_with(_end_of_turn(asyncio.get_running_loop(), lambda wake: wake()))
        before = senders.generation()
        for _ in range(10):  # ten puts of one read of requests
            senders.wakeup_all()
        during = senders.generation()
        await asyncio.sleep(0)  # the loop's turn ends
        after = senders.generation()
        # from another thread: at once, not deferred
        t = threading.Thread(target=senders.wakeup_all)
        t.start()
        t.join()
        return during - before, after - before, senders.generation() - after

    assert asyncio.run(main()) == (0, 1, 1)
