"""The store check's logic (store/check.py, check_report.py) on small stores written by the store itself."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reference_broker.store.check import CheckOptions, _index_layout, check_store
from reference_broker.store.check_report import CheckReport, Outcome, ProblemKind, render_text
from reference_broker.store.consume_queue import BLANK_UNIT, CQ_STORE_UNIT_SIZE
from tests.store.store_helpers import Stores, make_config, make_msg, put_ok, stores_fixture, wait_dispatched


@pytest.fixture
def stores() -> Iterator[Stores]:
    yield from stores_fixture()


def _write(stores: Stores, root: Path, n: int = 30) -> int:
    """``n`` keyed messages over two queues in 1 KiB commit-log files, then a clean shutdown; the log's end."""
    cfg = make_config(root)
    s = stores.open(cfg)
    for i in range(n):
        put_ok(s, make_msg(f"body-{i}", queue_id=i % 2, keys=f"key{i} other{i}", uniq_key=f"U{i:04d}"))
    wait_dispatched(s)
    end = s.get_max_phy_offset()
    s.shutdown()
    stores.opened.remove(s)
    return end


def test_clean_small_store(stores: Stores, tmp_path: Path) -> None:
    _write(stores, tmp_path)
    r = check_store(tmp_path)
    assert r.outcome is Outcome.CLEAN, render_text(r)
    assert r.counts["commitlog_records"] == 30 and r.counts["cq_units"] == 30
    assert r.counts["index_entries"] == 90  # UNIQ_KEY and two KEYS tokens each
    assert r.counts["commitlog_files"] > 3


def test_a_preallocated_zero_file_is_accepted_data_after_zeros_is_not(stores: Stores, tmp_path: Path) -> None:
    _write(stores, tmp_path)
    logs = sorted((tmp_path / "commitlog").iterdir())
    nxt = tmp_path / "commitlog" / f"{int(logs[-1].name) + 1024:020d}"
    nxt.write_bytes(bytes(1024))  # what RocketMQ's AllocateMappedFileService leaves ahead of the writer
    assert check_store(tmp_path).outcome is Outcome.CLEAN
    after = tmp_path / "commitlog" / f"{int(nxt.name) + 1024:020d}"
    after.write_bytes(logs[0].read_bytes())  # records again after a file of zeros: a hole in the log
    r = check_store(tmp_path)
    assert r.outcome is Outcome.PROBLEMS
    (p,) = [p for p in r.problems if p.kind is ProblemKind.LOG_FILES]
    assert p.file == f"commitlog/{after.name}" and "zeros in the middle of the log" in p.reason


def test_pre_blank_units_lead_a_queue_only(stores: Stores, tmp_path: Path) -> None:
    _write(stores, tmp_path)
    qdir = tmp_path / "consumequeue" / "FooBar" / "0"
    (f,) = sorted(qdir.iterdir())
    data = bytearray(f.read_bytes())
    n = len(data) // CQ_STORE_UNIT_SIZE
    # A queue whose first file starts with pre-blank units is fine (fillPreBlank) ...
    moved = bytearray(BLANK_UNIT * 3) + data[: len(data) - 3 * CQ_STORE_UNIT_SIZE]
    # ... but its units' indexes then no longer match their records' queue offsets: check only the blank rule
    # here, on a unit turned blank after real ones.
    data[2 * CQ_STORE_UNIT_SIZE:3 * CQ_STORE_UNIT_SIZE] = BLANK_UNIT
    f.write_bytes(bytes(data))
    r = check_store(tmp_path)
    assert [p.reason for p in r.problems if p.kind is ProblemKind.CQ_UNIT] == [
        "unit 2: a pre-blank unit after real units"]
    f.write_bytes(bytes(moved))
    r = check_store(tmp_path)
    assert r.counts["cq_units_pre_blank"] == 3
    assert not any("pre-blank" in p.reason for p in r.problems)
    assert n > 3


def test_index_layout() -> None:
    assert _index_layout(420_000_040, CheckOptions()) == (5_000_000, 20_000_000)  # RocketMQ's defaults
    assert _index_layout(40 + 100 * 4 + 400 * 20, CheckOptions()) == (100, 400)
    assert _index_layout(40 + 100 * 4 + 500 * 20, CheckOptions()) is None
    assert _index_layout(40 + 100 * 4 + 500 * 20, CheckOptions(100, 500)) == (100, 500)
    assert _index_layout(40 + 100 * 4 + 400 * 20, CheckOptions(100, 500)) is None


def test_report_caps_each_kind_and_counts_all() -> None:
    r = CheckReport("/x", max_per_kind=3)
    for i in range(10):
        r.add(ProblemKind.CQ_UNIT, "consumequeue/T/0/00000000000000000000", i * 20, f"unit {i}: bad")
    r.add(ProblemKind.CHECKPOINT, "checkpoint", 0, "ahead")
    assert r.totals[ProblemKind.CQ_UNIT] == 10 and len(r.problems) == 4
    assert r.exit_code == 1
    text = "\n".join(render_text(r))
    assert "consumequeue-unit: 10 problems" in text and "... and 7 more" in text
    assert r.to_json()["problem_totals"] == {"checkpoint": 1, "consumequeue-unit": 10}
    r.add(ProblemKind.UNREADABLE, "commitlog/x", -1, "cannot read")
    assert r.exit_code == 2


def test_empty_store_directory_is_clean_and_no_commitlog_is_not_a_store(tmp_path: Path) -> None:
    (tmp_path / "commitlog").mkdir()
    assert check_store(tmp_path).outcome is Outcome.CLEAN
    assert check_store(tmp_path / "commitlog").outcome is Outcome.NOT_A_STORE



def _tear_tail(root: Path, end: int, written: int) -> int:
    """Write the first ``written`` bytes of the log's first record again at its end, as a slave's log holds a
    record its master had sent only part of, and point the checkpoint's physicMsgOffset (flushed) past them;
    returns the record's length."""
    first = (root / "commitlog" / f"{0:020d}").read_bytes()
    total = int.from_bytes(first[:4], "big")
    last = root / "commitlog" / f"{end - end % 1024:020d}"
    data = bytearray(last.read_bytes())
    pos = end % 1024
    assert pos + total <= len(data), "the torn record must fit in the last file"
    data[pos:pos + written] = first[:written]
    last.write_bytes(bytes(data))
    ckpt = bytearray((root / "checkpoint").read_bytes())
    ckpt[40:48] = (end + written).to_bytes(8, "big")
    (root / "checkpoint").write_bytes(bytes(ckpt))
    return total


@pytest.mark.parametrize("written", [6, 100])
def test_a_torn_tail_is_expected_of_a_slave_and_a_problem_on_a_cleanly_stopped_master(
        stores: Stores, tmp_path: Path, written: int) -> None:
    end = _write(stores, tmp_path, n=28)
    clean = check_store(tmp_path)
    assert clean.outcome is Outcome.CLEAN, render_text(clean)
    total = _tear_tail(tmp_path, end, written)
    assert written < total
    as_slave = check_store(tmp_path, CheckOptions(slave=True))
    assert as_slave.outcome is Outcome.CLEAN, render_text(as_slave)
    assert any(f"the log ends inside its last record at {end % 1024}: {written} of its {total} bytes" in w
               and "master stopped in the middle of a transfer" in w for w in as_slave.warnings), as_slave.warnings
    assert as_slave.counts["commitlog_records"] == clean.counts["commitlog_records"]
    as_master = check_store(tmp_path)
    assert as_master.outcome is Outcome.PROBLEMS
    assert [p.kind for p in as_master.problems] == [ProblemKind.LOG_TAIL], render_text(as_master)
    assert "after a clean stop" in as_master.problems[0].reason
    (tmp_path / "abort").touch()  # not cleanly stopped: recovery will cut it
    assert check_store(tmp_path).outcome is Outcome.CLEAN


def test_damage_at_the_end_is_no_torn_tail(stores: Stores, tmp_path: Path) -> None:
    end = _write(stores, tmp_path, n=28)
    total = _tear_tail(tmp_path, end, 100)
    last = tmp_path / "commitlog" / f"{end - end % 1024:020d}"
    data = bytearray(last.read_bytes())
    data[end % 1024 + total + 5] = 7  # a byte past where the record would end: data after the "tail"
    last.write_bytes(bytes(data))
    r = check_store(tmp_path, CheckOptions(slave=True))
    assert r.outcome is Outcome.PROBLEMS
    assert ProblemKind.LOG_RECORD in r.totals and not any("ends inside" in w for w in r.warnings)


def test_a_tail_of_zero_bytes_is_no_record_but_a_slave_may_have_flushed_it(stores: Stores, tmp_path: Path) -> None:
    # The first three bytes of a record shorter than 256 bytes: zeros, like unwritten space. A slave's checkpoint
    # may count them; a cleanly stopped master's may not.
    end = _write(stores, tmp_path, n=28)
    _tear_tail(tmp_path, end, 3)
    assert check_store(tmp_path, CheckOptions(slave=True)).outcome is Outcome.CLEAN
    r = check_store(tmp_path)
    assert [p.kind for p in r.problems] == [ProblemKind.CHECKPOINT]
    assert f"physicMsgOffset {end + 3} is past the end of the log's data {end}" in r.problems[0].reason
