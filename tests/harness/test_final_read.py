"""The final read (harness.final_read): the positions it asks for, how it batches them, and, against a real
name server and broker, that what it finds turns "lost" into "unread" in the check while a position the broker
never had stays lost."""

# pyarrow ships no type information.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

from harness.checker import Category, check_run
from harness.driver import RocketMQDriver
from harness.final_read import COLUMNS, read_back, wanted_positions, windows
from harness.launcher import Topology
from harness.records import RunRecord, load_events
from harness.send_outcome import record_send


def events(rows: list[tuple[str, str, str, int, int, str]]) -> pa.Table:
    return pa.table(dict(zip(COLUMNS, map(list, zip(*rows, strict=True)), strict=True)))


def test_wanted_positions_are_the_acknowledged_sends_no_receive_or_read_has() -> None:
    t = events([
        ("send", "a", "T", 0, 0, "ok"), ("send", "b", "T", 0, 1, "ok"), ("send", "c", "T", 1, 0, "ok"),
        ("send", "d", "T", 1, 1, "unknown"),  # no acknowledged position
        ("send", "e", "T", -1, -1, "ok"),  # acknowledged without a position: cannot be read back
        ("send", "f", "U", 0, 5, "ok"), ("send", "f", "U", 0, 6, "ok"),  # a retried key: both positions
        ("receive", "a", "T", 0, 0, "ok"), ("receive", "b", "T", 0, 1, "fail"),  # a declined delivery
        ("read", "c", "T", 1, 0, "ok"),
    ])
    assert wanted_positions(t) == {("T", 0, 1): {"b"}, ("U", 0, 5): {"f"}, ("U", 0, 6): {"f"}}


def test_offsets_become_pulls_of_at_most_a_batch_reading_over_short_gaps() -> None:
    assert windows([7, 3, 4, 5, 6, 5, 20, 21, 40], batch=3) == [(3, 3), (6, 2), (20, 2), (40, 1)]
    assert windows([0, 2, 4, 9, 10], batch=5) == [(0, 5), (9, 2)]
    assert windows([]) == []
    assert windows(range(100)) == [(0, 32), (32, 32), (64, 32), (96, 4)]


@pytest.mark.e2e
def test_the_final_read_finds_what_no_consumer_received_and_the_check_calls_it_unread(tmp_path: Path) -> None:
    with Topology(tmp_path / "topo", broker_conf={"mappedFileSizeCommitLog": str(64 << 20)}) as topo:
        driver = RocketMQDriver(topo.namesrv_addr, instance=f"final-read-test-{os.getpid()}")
        driver.start()
        try:
            driver.create_topic("FinalRead", 2)
            rec = RunRecord.create(tmp_path / "runs", "final-read", {}, ["pytest"])
            w = rec.events_writer("w0", background=False)
            for i in range(60):
                key = f"fr-{i:03d}"
                o = driver.send("FinalRead", key, b"x" * 100)
                assert o.outcome == "ok", o
                record_send(w, key, "FinalRead", o, 0, 1, 100)
                if i % 3 == 0:  # the consumers got every third message only
                    w.record_receive(key, "FinalRead", o.queue_id, o.queue_offset, 2, 2, nbytes=100)
            w.record_send("fr-never", "FinalRead", 0, 10_000, 0, 1, "ok", nbytes=100)  # a position never written
            w.close()
        finally:
            driver.stop()
        wanted = wanted_positions(load_events(rec.run_dir, columns=COLUMNS))
        assert sum(map(len, wanted.values())) == 41
        reader = rec.events_writer("final-read", background=False)
        stats = read_back(topo.namesrv_addr, wanted, reader, group="final_read_test", instance="fr-test")
        reader.close()
    rec.finish()
    assert (stats.wanted, stats.found, stats.complete) == (41, 40, True), stats
    assert stats.pulls == 2 + 1  # each queue's 20 unreceived offsets in one pull, and the miss
    result = check_run(rec.run_dir)
    assert (result.acknowledged, result.lost, result.unread, result.reads) == (61, 1, 40, 40)
    assert result.samples[Category.LOST] == ["fr-never"]
    assert not result.valid  # the position the broker never had is still a loss
