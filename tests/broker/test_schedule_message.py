"""Delay levels: ScheduleMessageService on a real store (RocketMQ 4.9.8 ScheduleMessageServiceTest and the
delay-level failure modes reported as apache/rocketmq issues #1869, #3473, #6881, #7077).

Stores use millisecond levels ("100ms 200ms 300ms", ``MsDelayConfig``) so deliveries take a fraction
of a second. No test claims a delivery time beyond "not before its delivery time" and "eventually".
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reference_broker.broker import delay_level as dl
from reference_broker.broker import schedule_message
from reference_broker.broker.schedule_message import ScheduleMessageService
from reference_broker.common import message as mc
from reference_broker.common import record as rec
from reference_broker.store.config import FlushDiskType, MessageStoreConfig
from reference_broker.store.message_store import MessageStore
from reference_broker.store.status import GetMessageStatus, PutMessageResult, PutMessageStatus
from tests.broker import schedule_writer_proc as wp
from tests.broker.schedule_writer_proc import MsDelayConfig
from tests.store.store_helpers import Stores, make_config, make_msg, put_ok, wait_dispatched, wait_until

REPO = Path(__file__).resolve().parents[2]
LEVELS = "100ms 200ms 300ms"
REAL = "DelayTopic"
SCHEDULE = mc.SCHEDULE_TOPIC


def ms_config(root: Path, **overrides: Any) -> MsDelayConfig:
    base = make_config(root, **{"message_delay_level": LEVELS, "mapped_file_size_commit_log": 64 * 1024,
                                "max_index_num": 4000, "max_hash_slot_num": 1000, **overrides})
    return MsDelayConfig(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)})


class Env:
    """Opens stores and schedule services; shuts the services down before their stores."""

    def __init__(self) -> None:
        self.stores = Stores()
        self.services: list[ScheduleMessageService] = []

    def store(self, config: MessageStoreConfig) -> MessageStore:
        store = self.stores.new(config)
        assert store.load()
        return store

    def service(self, store: MessageStore, **kwargs: Any) -> ScheduleMessageService:
        svc = ScheduleMessageService(store, store.config.store_path_root_dir, **{"first_delay_ms": 0, **kwargs})
        self.services.append(svc)
        return svc

    def open(self, config: MessageStoreConfig, **kwargs: Any) -> tuple[MessageStore, ScheduleMessageService]:
        store = self.store(config)
        svc = self.service(store, **kwargs)
        assert svc.load(), svc.offsets.last_error
        store.start()
        svc.start()
        return store, svc

    @staticmethod
    def close(store: MessageStore, svc: ScheduleMessageService) -> None:
        svc.shutdown()
        store.shutdown()

    def close_all(self) -> None:
        for svc in reversed(self.services):
            svc.shutdown()
        self.stores.close_all()


@pytest.fixture
def env() -> Iterator[Env]:
    e = Env()
    try:
        yield e
    finally:
        e.close_all()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def delayed(i: int, level: int, queue_id: int = 0, topic: str = REAL, **props: str) -> rec.MessageExtBrokerInner:
    return make_msg(f"body-{i}", topic=topic, queue_id=queue_id, keys=f"k{i}",
                    props={mc.PROPERTY_DELAY_TIME_LEVEL: str(level), **props})


def put_delayed(store: MessageStore, i: int, level: int, queue_id: int = 0, **props: str) -> PutMessageResult:
    return put_ok(store, delayed(i, level, queue_id, **props))


def read_topic(store: MessageStore, topic: str, queue_id: int) -> list[rec.MessageExt]:
    out: list[rec.MessageExt] = []
    offset = 0
    while True:
        r = store.get_message("test", topic, queue_id, offset, 32)
        if r.status is not GetMessageStatus.FOUND:
            return out
        out += [rec.decode_message(raw, check_crc=True) for raw in r.messages]
        offset = r.next_begin_offset


def real_keys(store: MessageStore, queues: range = range(2), topic: str = REAL) -> Counter[str]:
    return Counter(m.keys for q in queues for m in read_topic(store, topic, q))


def caught_up(store: MessageStore, svc: ScheduleMessageService) -> bool:
    return all(svc.offset_table.get(level, 0) >= store.get_max_offset_in_queue(SCHEDULE, level - 1)
               for level in svc.delay_level_table_ms)


def wait_all_delivered(store: MessageStore, svc: ScheduleMessageService) -> None:
    wait_dispatched(store)
    wait_until(lambda: caught_up(store, svc), what="every level to catch up")
    wait_dispatched(store)


def saved_offsets(root: Path) -> dict[str, int]:
    table: dict[str, int] = json.loads((root / "config" / "delayOffset.json").read_text())["offsetTable"]
    return table


# ---- pure parts ------------------------------------------------------------------------------------------

def test_parse_delay_levels_accepts_rocketmq_units_and_milliseconds() -> None:
    assert dl.parse_delay_levels("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h")[18] == 7_200_000
    assert dl.parse_delay_levels("100ms 2s 3m 1h 1d") == {1: 100, 2: 2000, 3: 180_000, 4: 3_600_000, 5: 86_400_000}


@pytest.mark.parametrize(("text", "match"), [("1s 1x", "level 2 is '1x'"), ("", "empty"), ("   ", "empty"),
                                             ("s", "level 1 is 's'"), ("-1s", "level 1"), ("1.5s", "level 1")])
def test_parse_delay_levels_rejects_bad_levels(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        dl.parse_delay_levels(text)


def test_service_rejects_an_empty_level_table(tmp_path: Path, env: Env) -> None:
    store = env.store(make_config(tmp_path, message_delay_level=""))  # the store alone accepts it: no delays
    with pytest.raises(ValueError, match=r"messageDelayLevel .* is empty"):
        ScheduleMessageService(store, tmp_path)


def test_compute_and_correct_deliver_timestamp(tmp_path: Path, env: Env) -> None:
    svc = env.service(env.store(ms_config(tmp_path)))
    assert (svc.max_delay_level, svc.delay_level_table_ms) == (3, {1: 100, 2: 200, 3: 300})
    assert svc.compute_deliver_timestamp(2, 10_000) == 10_200
    assert svc.compute_deliver_timestamp(9, 10_000) == 11_000  # unknown level: storeTs + 1000
    assert dl.correct_deliver_timestamp(5000, 5200, 200) == 5200
    assert dl.correct_deliver_timestamp(5000, 5201, 200) == 5000  # further than the whole delay: deliver now
    assert dl.correct_deliver_timestamp(5000, 9999, None) == 9999  # a level beyond the table keeps its time


def test_classify_put_statuses() -> None:
    assert dl.classify_put(PutMessageStatus.PUT_OK) is dl.DeliverOutcome.DELIVERED
    assert dl.classify_put(PutMessageStatus.FLUSH_DISK_TIMEOUT) is dl.DeliverOutcome.DELIVERED  # it IS stored
    assert dl.classify_put(PutMessageStatus.MESSAGE_ILLEGAL) is dl.DeliverOutcome.SKIPPED
    assert dl.classify_put(PutMessageStatus.SERVICE_NOT_AVAILABLE) is dl.DeliverOutcome.PUT_FAILED


def test_message_timeup_needs_a_real_topic_and_queue() -> None:
    raw_msg = rec.MessageExt(SCHEDULE, b"x", 0, 0, 0, 0, 0, 0, ("127.0.0.1", 1), 0, ("127.0.0.1", 2), 0, 0,
                             {mc.PROPERTY_DELAY_TIME_LEVEL: "1", mc.PROPERTY_REAL_TOPIC: "T"}, 0, 0)
    with pytest.raises(dl.UndeliverableError, match="REAL_TOPIC/REAL_QID"):
        dl.message_timeup(raw_msg)


# ---- delivery --------------------------------------------------------------------------------------------

def test_delayed_message_is_not_visible_before_its_time_and_is_after(tmp_path: Path, env: Env) -> None:
    store, svc = env.open(ms_config(tmp_path))
    r = put_delayed(store, 1, level=2)
    assert r.append is not None
    deliver_ts = svc.compute_deliver_timestamp(2, r.append.store_timestamp)
    deadline = time.monotonic() + 10
    while True:
        visible = store.get_max_offset_in_queue(REAL, 0) > 0
        checked_at = now_ms()
        if visible:
            break
        assert time.monotonic() < deadline, "never delivered"
        time.sleep(0.005)
    assert checked_at >= deliver_ts, "visible in the real topic before its delivery time"
    [m] = read_topic(store, REAL, 0)
    assert m.store_timestamp >= deliver_ts and m.body == b"body-1"
    assert store.get_max_offset_in_queue(SCHEDULE, 1) == 1  # the schedule copy stays where it was


def test_levels_deliver_in_order_and_keep_the_message(tmp_path: Path, env: Env) -> None:
    store, svc = env.open(ms_config(tmp_path))
    n = 30
    born = now_ms() - 5000
    for i in range(n):
        msg = delayed(i, level=1 + i % 3, queue_id=i % 2, UNIQ_KEY=f"u{i}", RETRY_TOPIC="orig",
                      RECONSUME_TIME="3", custom=f"c{i}")
        msg.flag, msg.reconsume_times, msg.born_timestamp = 7, 2, born + i
        msg.born_host = ("10.1.2.3", 4567)
        msg.sys_flag = mc.MULTI_TAGS_FLAG
        put_ok(store, msg)
    wait_all_delivered(store, svc)
    got = {q: read_topic(store, REAL, q) for q in range(2)}
    assert sorted(int(m.keys[1:]) for q in got for m in got[q]) == list(range(n))  # each exactly once
    for q, msgs in got.items():
        for level in (1, 2, 3):
            idx = [int(m.keys[1:]) for m in msgs if 1 + int(m.keys[1:]) % 3 == level]
            assert idx == sorted(idx), f"level {level} out of order in queue {q}: {idx}"
        for m in msgs:
            i = int(m.keys[1:])
            p = m.properties
            assert mc.PROPERTY_DELAY_TIME_LEVEL not in p
            assert (p["UNIQ_KEY"], p["RETRY_TOPIC"], p["RECONSUME_TIME"], p["custom"], p["TAGS"]) == (
                f"u{i}", "orig", "3", f"c{i}", "TagA")
            assert (p[mc.PROPERTY_REAL_TOPIC], p[mc.PROPERTY_REAL_QUEUE_ID], p[mc.PROPERTY_WAIT_STORE_MSG_OK]) == (
                REAL, str(q), "false")
            assert (m.topic, m.queue_id, m.body, m.flag, m.reconsume_times) == (REAL, i % 2, f"body-{i}".encode(), 7, 2)
            assert (m.born_timestamp, m.born_host, m.sys_flag) == (born + i, ("10.1.2.3", 4567), mc.MULTI_TAGS_FLAG)
    assert svc.deliver_counts == Counter({dl.DeliverOutcome.DELIVERED: n})
    assert svc.offset_table == {1: 10, 2: 10, 3: 10}
    assert svc.running_stats()["scheduleMessageOffset_1"] == "10,10"


def test_backlog_across_queue_files_and_batches_is_delivered_once(tmp_path: Path, env: Env,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schedule_message, "DELIVER_BATCH_MAX", 7)
    store = env.store(ms_config(tmp_path))  # consume-queue files of 64 units
    store.start()
    n = 150
    for i in range(n):
        put_delayed(store, i, level=2)
    wait_dispatched(store)
    svc = env.service(store)
    assert svc.load()
    svc.start()
    wait_all_delivered(store, svc)
    assert [m.keys for m in read_topic(store, REAL, 0)] == [f"k{i}" for i in range(n)]
    assert svc.timer_runs[2] > n // 7


def test_half_topic_message_is_discarded_and_the_level_goes_on(tmp_path: Path, env: Env,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    store, svc = env.open(ms_config(tmp_path))
    put_ok(store, make_msg("half", topic=mc.RMQ_SYS_TRANS_HALF_TOPIC, props={mc.PROPERTY_DELAY_TIME_LEVEL: "1"}))
    put_delayed(store, 2, level=1)
    with caplog.at_level(logging.ERROR, logger="reference_broker.broker.schedule_message"):
        wait_all_delivered(store, svc)
    assert store.get_max_offset_in_queue(mc.RMQ_SYS_TRANS_HALF_TOPIC, 0) == 0
    assert real_keys(store) == Counter({"k2": 1})
    assert svc.offset_table[1] == 2
    assert svc.deliver_counts[dl.DeliverOutcome.DISCARDED] == 1
    assert mc.RMQ_SYS_TRANS_HALF_TOPIC in caplog.text


def test_refused_put_is_retried_and_delivered_once(tmp_path: Path, env: Env) -> None:
    store, svc = env.open(ms_config(tmp_path))
    put_delayed(store, 1, level=1)
    store.running_flags.get_and_make_disk_full()  # the store refuses every put: SERVICE_NOT_AVAILABLE
    wait_until(lambda: svc.deliver_counts[dl.DeliverOutcome.PUT_FAILED] >= 3, what="retries of the refused put")
    assert svc.offset_table.get(1, 0) == 0 and store.get_max_offset_in_queue(REAL, 0) == 0
    store.running_flags.get_and_make_disk_ok()
    wait_all_delivered(store, svc)
    assert real_keys(store) == Counter({"k1": 1})
    assert svc.deliver_counts[dl.DeliverOutcome.DELIVERED] == 1


def test_idle_levels_sleep_until_their_queue_gets_a_message(tmp_path: Path, env: Env,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        store, svc = env.open(ms_config(tmp_path), idle_recheck_ms=60_000)
        wait_until(lambda: all(svc.timer_runs[level] >= 1 for level in (1, 2, 3)), what="the first runs")
        time.sleep(0.3)  # a quiet window: no queue exists, so no level may run again (not a timing claim)
        assert [svc.timer_runs[level] for level in (1, 2, 3)] == [1, 1, 1]
        put_delayed(store, 1, level=3)  # the dispatch of its schedule copy wakes level 3, long before 60 s
        wait_all_delivered(store, svc)
    assert real_keys(store) == Counter({"k1": 1})
    assert [svc.timer_runs[level] for level in (1, 2)] == [1, 1]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_queue_of_a_level_dropped_from_the_table_is_still_delivered(tmp_path: Path, env: Env,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    store = env.store(ms_config(tmp_path))
    store.start()
    put_delayed(store, 1, level=3)
    wait_dispatched(store)
    store.shutdown()
    with caplog.at_level(logging.WARNING):
        store, svc = env.open(ms_config(tmp_path, message_delay_level="100ms 200ms"))  # #412: levels changed
    assert "beyond messageDelayLevel" in caplog.text
    wait_until(lambda: real_keys(store, range(1)) == Counter({"k1": 1}), what="the level-3 message")
    assert svc.offset_table[3] == 1


# ---- delayOffset.json ------------------------------------------------------------------------------------

def test_offsets_persist_and_load_round_trip(tmp_path: Path, env: Env) -> None:
    store, svc = env.open(ms_config(tmp_path))
    for i in range(5):
        put_delayed(store, i, level=1 if i < 3 else 3)
    wait_all_delivered(store, svc)
    svc.shutdown()
    assert saved_offsets(tmp_path) == {"1": 3, "3": 2}
    again = env.service(store)
    assert again.load() and again.offset_table == {1: 3, 3: 2}


def test_offsets_file_accepts_fastjson_unquoted_keys(tmp_path: Path) -> None:
    m = dl.DelayOffsetManager(tmp_path)
    m.config_file_path().parent.mkdir(parents=True)
    m.config_file_path().write_text('{"offsetTable":{1:12,3:0},"dataVersion":{"counter":1}}')
    assert m.load() and m.offset_table == {1: 12, 3: 0}


def test_load_clamps_offsets_into_their_queues_and_persists_the_correction(
        tmp_path: Path, env: Env, caplog: pytest.LogCaptureFixture) -> None:
    store = env.store(ms_config(tmp_path))
    store.start()
    for i in range(3):
        put_delayed(store, i, level=1)
    put_delayed(store, 3, level=2)
    wait_dispatched(store)
    m = dl.DelayOffsetManager(tmp_path)
    m.offset_table = {1: 999, 2: -4, 3: 7}  # past max (#1869), below min, a queue that does not exist
    m.persist()
    svc = env.service(store)
    with caplog.at_level(logging.ERROR):
        assert svc.load()
    assert svc.offset_table == {1: 3, 2: 0, 3: 0}
    assert saved_offsets(tmp_path) == {"1": 3, "2": 0, "3": 0}  # persisted at once (#7077)
    assert "correct delay offset of level 1 from 999 to 3" in caplog.text
    svc.start()
    put_delayed(store, 4, level=1)  # the corrected level is not stuck: new messages are delivered
    wait_all_delivered(store, svc)
    assert real_keys(store, range(1)) == Counter({"k3": 1, "k4": 1})


def test_load_clamps_to_the_queue_min_after_cleaning(tmp_path: Path, env: Env) -> None:
    cfg = ms_config(tmp_path, mapped_file_size_commit_log=1024)
    store = env.store(cfg)
    store.start()
    n = 40
    for i in range(n):
        put_delayed(store, i, level=3)
    wait_dispatched(store)
    old = time.time() - cfg.file_reserved_time_hours * 3600 * 2
    for mf in store.commit_log.mapped_file_queue.mapped_files[:5]:
        os.utime(mf.path, (old, old))
    store.execute_delete_files_manually()
    assert store.clean_commit_log.run() == 5
    store.clean_consume_queue.run()
    lo = store.get_min_offset_in_queue(SCHEDULE, 2)
    assert 0 < lo < n
    store.shutdown()

    store, svc = env.open(cfg)  # delayOffset.json does not exist: level 3 starts at 0, below the min
    wait_all_delivered(store, svc)
    assert real_keys(store, range(1)) == Counter({f"k{i}": 1 for i in range(lo, n)})
    svc.shutdown()
    assert saved_offsets(tmp_path) == {"3": n}

    m = dl.DelayOffsetManager(tmp_path)
    m.offset_table = {3: 0}
    m.persist()
    svc2 = env.service(store)
    assert svc2.load() and svc2.offset_table == {3: lo}


def two_versions(tmp_path: Path) -> Path:
    m = dl.DelayOffsetManager(tmp_path)
    m.offset_table = {1: 5}
    m.persist()
    m.offset_table = {1: 9}
    m.persist()
    return m.config_file_path()


@pytest.mark.parametrize("damage", ["{not json", "", '{"offsetTable": {"x": 1}}', '{"offsetTable": {"1": "9"}}'])
def test_unusable_main_file_falls_back_to_bak(tmp_path: Path, env: Env, damage: str,
                                              caplog: pytest.LogCaptureFixture) -> None:
    store = env.store(ms_config(tmp_path))
    store.start()
    for i in range(12):
        put_delayed(store, i, level=1)
    wait_dispatched(store)
    two_versions(tmp_path).write_text(damage)
    svc = env.service(store)
    with caplog.at_level(logging.ERROR):
        assert svc.load()
    assert svc.offset_table == {1: 5}  # the .bak holds the previous version
    assert "delayOffset.json" in caplog.text


def test_no_usable_offsets_file_fails_load(tmp_path: Path, env: Env) -> None:
    store = env.store(ms_config(tmp_path))
    path = two_versions(tmp_path)
    path.write_text("garbage")
    path.with_name(path.name + ".bak").write_text("{also garbage")
    svc = env.service(store)
    assert svc.load() is False
    assert svc.offsets.last_error is not None
    assert "delayOffset.json.bak" in svc.offsets.last_error
    with pytest.raises(RuntimeError, match="after a successful load"):
        svc.start()
    with pytest.raises(RuntimeError, match="#6881"):
        svc.persist()
    assert path.read_text() == "garbage"  # never overwritten


def test_unusable_main_file_without_bak_fails_load(tmp_path: Path, env: Env) -> None:
    path = dl.DelayOffsetManager(tmp_path).config_file_path()
    path.parent.mkdir(parents=True)
    path.write_text('{"offsetTable": [1, 2]}')
    assert env.service(env.store(ms_config(tmp_path))).load() is False


def test_no_offsets_file_is_a_fresh_start(tmp_path: Path, env: Env) -> None:
    svc = env.service(env.store(ms_config(tmp_path)))
    assert svc.load() and svc.offset_table == {}
    assert not dl.DelayOffsetManager(tmp_path).config_file_path().exists()  # nothing to correct, nothing written


def test_load_before_the_store_refuses(tmp_path: Path, env: Env) -> None:
    store = env.store(ms_config(tmp_path))
    store.start()
    put_delayed(store, 1, level=1)
    wait_dispatched(store)
    store.shutdown()
    unloaded = env.stores.new(ms_config(tmp_path))
    with pytest.raises(RuntimeError, match="load the message store before"):
        ScheduleMessageService(unloaded, tmp_path).load()


def test_persisted_offset_waits_for_the_flush_of_delivered_copies(tmp_path: Path, env: Env) -> None:
    # Async flush that never flushes after its first pass: the delivered copies stay unflushed.
    cfg = ms_config(tmp_path, flush_commit_log_least_pages=10**6, flush_commit_log_thorough_interval_ms=10**9)
    store, svc = env.open(cfg)
    put_ok(store, make_msg("plain", topic="Other"))
    wait_until(lambda: store.commit_log.flushed_where > 0, what="the first flush pass")
    for i in range(3):
        put_delayed(store, i, level=1)
    wait_all_delivered(store, svc)
    svc.persist()
    if store.commit_log.flushed_where < store.commit_log.get_max_offset():
        assert saved_offsets(tmp_path).get("1", 0) == 0, "persisted past delivered copies the log has not flushed"
    svc.shutdown()  # the shutdown persist writes everything: the store's shutdown flushes next
    assert saved_offsets(tmp_path) == {"1": 3}


def test_persisted_offset_follows_a_sync_flush(tmp_path: Path, env: Env) -> None:
    store, svc = env.open(ms_config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH), persist_interval_ms=60_000)
    for i in range(3):
        put_delayed(store, i, level=1)
    wait_all_delivered(store, svc)

    def persisted_all() -> bool:
        path = tmp_path / "config" / "delayOffset.json"
        return path.exists() and saved_offsets(tmp_path).get("1") == 3

    # Persisted shortly after the delivering run, once the group commit has flushed the copies.
    wait_until(persisted_all, what="the batch persist")


# ---- restarts --------------------------------------------------------------------------------------------

def test_clean_restarts_during_a_stream_deliver_each_message_exactly_once(tmp_path: Path, env: Env) -> None:
    cfg = ms_config(tmp_path)
    per_cycle, cycles = 40, 3
    delivered_before = 0
    for c in range(cycles):
        store, svc = env.open(cfg)
        for i in range(c * per_cycle, (c + 1) * per_cycle):
            put_delayed(store, i, level=1 + i % 3, queue_id=i % 2)
            time.sleep(0.002)
        # Shut down mid-stream: at least one new delivery in this cycle, most of the 300 ms level still due.
        wait_until(lambda: sum(real_keys(store).values()) > delivered_before,  # noqa: B023
                   what="a delivery in this cycle")
        svc.shutdown()
        delivered_before = sum(real_keys(store).values())
        store.shutdown()
    store, svc = env.open(cfg)
    wait_all_delivered(store, svc)
    keys = real_keys(store)
    assert keys == Counter({f"k{i}": 1 for i in range(cycles * per_cycle)}), (
        f"duplicates {[k for k, n in keys.items() if n > 1][:10]}, "
        f"missing {sorted(set(f'k{i}' for i in range(cycles * per_cycle)) - set(keys))[:10]}")


class Child:
    """A running schedule_writer_proc.py whose acknowledgements are read as they come."""

    def __init__(self, root: Path, flush: str, start: int, stderr: Path) -> None:
        self.stderr_path = stderr
        with open(stderr, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, str(Path(wp.__file__)), "--dir", str(root), "--flush", flush,
                                          "--start", str(start)], stdout=subprocess.PIPE, stderr=err, cwd=REPO)
        self.acks: list[int] = []
        self.nacks: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            parts = raw.decode().split()
            if not raw.endswith(b"\n") or not parts:
                continue
            if parts[0] == "ack":
                self.acks.append(int(parts[1]))
            elif parts[0] != "ready":
                self.nacks.append(raw.decode().strip())

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        self._reader.join(30)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


def verify_after_kill(env: Env, snap: Path, flush: FlushDiskType, acked: set[int],
                      persisted: list[dict[str, int]]) -> None:
    """No delayed message lost; one delivered more than once only past a persisted offset of some kill."""
    store, svc = env.open(wp.config(snap, flush))
    try:
        wait_all_delivered(store, svc)
        delivered = real_keys(store, range(wp.QUEUES), wp.TOPIC)
        in_schedule: set[str] = set()
        for level in svc.delay_level_table_ms:
            cq = store.find_consume_queue(SCHEDULE, level - 1, create=False)
            for o in range(cq.get_max_offset_in_queue() if cq else 0):
                assert cq is not None
                unit = cq.get_unit(o)
                assert unit is not None
                m = store.look_message_by_offset(unit[0], unit[1])
                assert m is not None
                in_schedule.add(m.keys)
                copies = delivered[m.keys]
                may_repeat = sum(1 for p in persisted if p.get(str(level), 0) <= o)
                assert 1 <= copies <= 1 + may_repeat, (
                    f"{m.keys} (level {level}, offset {o}) delivered {copies} times; persisted offsets {persisted}")
        lost = sorted(i for i in acked if wp.key_of(i) not in in_schedule)
        assert not lost, f"acknowledged delayed puts missing from the schedule queues: {lost[:10]}"
        assert set(delivered) <= in_schedule
    finally:
        Env.close(store, svc)


@pytest.mark.e2e
@pytest.mark.parametrize("flush", ["sync", "async"])
def test_kill9_mid_delivery_loses_no_delayed_message(tmp_path: Path, env: Env, flush: str) -> None:
    root = tmp_path / "store"
    flush_type = FlushDiskType.SYNC_FLUSH if flush == "sync" else FlushDiskType.ASYNC_FLUSH
    rng = random.Random()
    acked: set[int] = set()
    persisted: list[dict[str, int]] = []
    for cycle in range(2):
        child = Child(root, flush, cycle * 1_000_000, tmp_path / f"child-{cycle}.err")
        try:
            wait_until(lambda: len(child.acks) >= 50 or child.proc.poll() is not None,  # noqa: B023
                       timeout_s=60, what="the child's first puts")
            assert child.proc.poll() is None, child.stderr_path.read_text()[-3000:]
            time.sleep(rng.uniform(0.2, 0.8))  # kill at a random moment, deliveries in full swing
            assert child.proc.poll() is None, child.stderr_path.read_text()[-3000:]
        finally:
            child.kill()
        assert not child.nacks, child.nacks[:5]
        acked.update(child.acks)
        offsets_file = root / "config" / "delayOffset.json"
        persisted.append(saved_offsets(root) if offsets_file.exists() else {})
        snap = tmp_path / f"snapshot-{cycle}"
        shutil.copytree(root, snap)  # the next child must recover the killed directory itself
        verify_after_kill(env, snap, flush_type, acked, persisted)
        shutil.rmtree(snap)
