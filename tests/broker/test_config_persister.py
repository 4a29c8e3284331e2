"""The coalescing config writer: few writes for many changes, the last state on disk, shutdown flushes,
write errors logged and retried, never raised into the request that made the change."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time

from reference_broker.broker.config_persister import CoalescingPersister
from reference_broker.broker.subscription_group import SubscriptionGroupManager
from reference_broker.broker.topic_config import TopicConfig, TopicConfigManager


def _groups_on_disk(root):
    return json.loads((root / "config" / "subscriptionGroup.json").read_text())["subscriptionGroupTable"]


def test_many_changes_few_writes_and_the_last_state_on_disk(tmp_path):
    m = SubscriptionGroupManager(tmp_path)
    t0 = time.monotonic()
    for i in range(1000):
        m.find_subscription_group_config(f"G{i}")
    changes_s = time.monotonic() - t0
    assert m.wait_persisted(10)
    on_disk = _groups_on_disk(tmp_path)
    assert all(f"G{i}" in on_disk for i in range(1000))
    assert json.loads((tmp_path / "config" / "subscriptionGroup.json").read_text())["dataVersion"] == \
        m.data_version.to_json()
    # 1,000 changes; the writer wrote a handful of times (each write covers every change before it started)
    assert 1 <= m.persister.writes <= 50, m.persister.writes
    assert changes_s < 5.0  # no change waits for a write (the inline persist made this O(N^2))
    m.persister.close()


def test_changes_during_a_write_are_written_again(tmp_path):
    started, release = threading.Event(), threading.Event()
    m = TopicConfigManager(tmp_path)
    real = m.persist

    def slow_persist():
        started.set()
        release.wait(10)
        real()

    m.persister._write = slow_persist  # a slow disk: the first write is in progress while more changes come
    m.update_topic_config(TopicConfig("A"))
    assert started.wait(10)
    m.update_topic_config(TopicConfig("B"))
    m.update_topic_config(TopicConfig("C"))
    release.set()
    assert m.wait_persisted(10)
    table = json.loads((tmp_path / "config" / "topics.json").read_text())["topicConfigTable"]
    assert {"A", "B", "C"} <= set(table)
    assert m.persister.writes == 2  # the one in progress, then one for both later changes
    m.persister.close()


def test_shutdown_writes_pending_changes(tmp_path):
    m = SubscriptionGroupManager(tmp_path)
    release = threading.Event()
    real = m.persist
    m.persister._write = lambda: (release.wait(10), real())  # the writer is stuck behind a slow write
    for i in range(200):
        m.find_subscription_group_config(f"S{i}")
    closer = threading.Thread(target=m.shutdown_persist)
    closer.start()
    release.set()
    closer.join(10)
    assert not closer.is_alive()
    on_disk = _groups_on_disk(tmp_path)
    assert all(f"S{i}" in on_disk for i in range(200))
    assert m.wait_persisted(0)  # nothing left pending


def test_a_write_error_is_logged_not_raised_and_retried(tmp_path, caplog):
    m = SubscriptionGroupManager(tmp_path)
    m.persister.retry_delay_s = 0.05
    (tmp_path / "config").write_text("a file where the config directory should be")  # every write fails
    with caplog.at_level(logging.ERROR):
        for i in range(10):
            m.find_subscription_group_config(f"E{i}")  # the request path never sees the error
        assert not m.wait_persisted(0.5)
    assert m.persister.failures >= 2, "the failed write is retried"
    assert m.persister.last_error is not None
    assert any("cannot persist subscriptionGroup.json" in r.getMessage() for r in caplog.records)
    (tmp_path / "config").unlink()  # the disk recovers: the next retry writes the latest state
    assert m.wait_persisted(10)
    assert m.persister.last_error is None
    assert all(f"E{i}" in _groups_on_disk(tmp_path) for i in range(10))
    m.persister.close()


def test_the_loop_awaits_a_write_without_blocking(tmp_path):
    release = threading.Event()
    p = CoalescingPersister(lambda: release.wait(10), "x")

    async def main():
        generation = p.request()
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.005)

        t = asyncio.ensure_future(ticker())
        waiting = asyncio.ensure_future(p.written_async(generation, 10))
        await asyncio.sleep(0.2)
        assert not waiting.done() and ticks > 5  # the loop runs while the write is slow
        release.set()
        assert await waiting
        assert not await p.written_async(p.request() + 1, 0.05)  # a generation never requested: times out
        t.cancel()

    asyncio.run(main())
    p.close()
