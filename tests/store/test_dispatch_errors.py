"""Records dispatch cannot handle are skipped for that dispatcher, counted and logged; they never stop the
other queues, and a store holding one still starts. Names and numbers a record cannot hold are refused
before anything is written."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from reference_broker.common.message_batch import encode_entry
from reference_broker.store.commit_log import EncodedBatch
from reference_broker.store.reput import STUCK_RETRIES, ReputMessageService
from reference_broker.store.status import PutMessageStatus
from tests.store.store_helpers import Stores, cq_units, make_config, make_msg, put_ok, stores_fixture, wait_until

BAD_TOPIC = "a\0b"  # what a CONSUMER_SEND_MSG_BACK with group "a\0b" used to make: %DLQ%a\0b


@pytest.fixture
def stores() -> Iterator[Stores]:
    yield from stores_fixture()


def _legacy_put(store, topic: str, body: str) -> None:
    """Append a record whose topic the put path would refuse today, as an older broker could write it."""
    store.commit_log._safe_topics.add(topic)
    put_ok(store, make_msg(body, topic=topic))


def test_a_record_whose_queue_cannot_be_created_does_not_stop_the_others(tmp_path: Path, stores: Stores,
                                                                          caplog) -> None:
    store = stores.open(make_config(tmp_path, mapped_file_size_commit_log=64 * 1024))
    put_ok(store, make_msg("before", topic="GOOD"))
    with caplog.at_level(logging.ERROR, logger="reference_broker.store.message_store"):
        _legacy_put(store, "%DLQ%" + BAD_TOPIC, "bad")
        put_ok(store, make_msg("after", topic="GOOD"))
        put_ok(store, make_msg("other", topic="OTHER"))
        wait_until(lambda: store.dispatch_behind_bytes() == 0, what="dispatch past the bad record")
    assert len(cq_units(store, "GOOD", 0)) == 2
    assert len(cq_units(store, "OTHER", 0)) == 1
    assert store.dispatcher.error_count == 1
    assert store.get_runtime_info()["dispatchErrorCount"] == "1"
    assert any("skipped" in r.message and r.levelno == logging.ERROR for r in caplog.records)


@pytest.mark.parametrize("clean_stop", [True, False])
def test_a_store_holding_such_a_record_starts_again(tmp_path: Path, stores: Stores, clean_stop: bool) -> None:
    cfg = make_config(tmp_path, mapped_file_size_commit_log=64 * 1024)
    store = stores.open(cfg)
    _legacy_put(store, "%DLQ%" + BAD_TOPIC, "bad")
    put_ok(store, make_msg("after", topic="GOOD"))
    wait_until(lambda: store.dispatch_behind_bytes() == 0, what="dispatch")
    store.shutdown()
    stores.opened.remove(store)
    if not clean_stop:
        (tmp_path / "abort").touch()  # what a kill -9 leaves: the next start recovers abnormally
    again = stores.open(make_config(tmp_path, mapped_file_size_commit_log=64 * 1024))
    wait_until(lambda: again.dispatch_behind_bytes() == 0, what="dispatch after restart")
    assert len(cq_units(again, "GOOD", 0)) == 1
    put_ok(again, make_msg("later", topic="GOOD"))
    wait_until(lambda: len(cq_units(again, "GOOD", 0)) == 2, what="a new record dispatched")


@pytest.mark.parametrize("topic", [BAD_TOPIC, "a/b", "..", ".", ""])
def test_put_refuses_a_topic_that_cannot_name_a_directory(tmp_path: Path, stores: Stores, topic: str) -> None:
    store = stores.open(make_config(tmp_path, mapped_file_size_commit_log=64 * 1024))
    before = store.commit_log.get_max_offset()
    r = store.put_message(make_msg("x", topic=topic))
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL
    assert "directory" in (r.remark or "")
    batch = EncodedBatch(topic, 0, rec_batch_body(), 0, 0, ("127.0.0.1", 1), b"")
    assert store.put_messages(batch).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.commit_log.get_max_offset() == before


@pytest.mark.parametrize("field,value", [("flag", 2**31), ("flag", -(2**31) - 1), ("born_timestamp", 2**63),
                                         ("reconsume_times", 2**31), ("queue_id", -1), ("queue_id", 2**31),
                                         ("sys_flag", 2**31), ("prepared_transaction_offset", -(2**63) - 1)])
def test_put_refuses_header_numbers_a_record_cannot_hold_and_writes_nothing(tmp_path: Path, stores: Stores,
                                                                           field: str, value: int) -> None:
    store = stores.open(make_config(tmp_path, mapped_file_size_commit_log=64 * 1024))
    put_ok(store, make_msg("first"))
    mf = store.commit_log.mapped_file_queue.mapped_files[-1]
    pos = mf.staged_position
    tail = bytes(mf.wbuf[pos:pos + 256])
    msg = make_msg("x")
    setattr(msg, field, value)
    r = store.put_message(msg)
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL
    assert "out of range" in (r.remark or "")
    assert mf.staged_position == pos
    assert bytes(mf.wbuf[pos:pos + 256]) == tail  # not even a partial header past the write position


def rec_batch_body() -> bytes:
    return encode_entry(b"body", 0, {})


def test_reput_skips_an_offset_that_keeps_failing(tmp_path: Path, stores: Stores) -> None:
    store = stores.open(make_config(tmp_path, mapped_file_size_commit_log=1024))
    store.reput.shutdown(0)
    for i in range(12):  # several 1 KiB files
        put_ok(store, make_msg(f"m{i:03d}" * 20))
    first_file_end = 1024
    calls: list[int] = []

    def dispatch(reqs: list) -> None:
        calls.append(reqs[0].commit_log_offset)
        if reqs[0].commit_log_offset < first_file_end:
            raise RuntimeError("a dispatcher bug")

    svc = ReputMessageService(store.commit_log, dispatch, {})
    svc.idle_interval_s = 0.001
    svc.start()
    try:
        wait_until(lambda: svc.reput_from_offset >= first_file_end, timeout_s=STUCK_RETRIES * 0.05 + 10,
                   what="reput past the failing offset")
        wait_until(lambda: not svc.is_commit_log_available(), what="reput to the end")
    finally:
        svc.shutdown(0)
    assert svc.stuck_skips == 1
    assert any(off >= first_file_end for off in calls)
