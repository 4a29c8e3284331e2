"""Recovery against deliberate damage, with the real broker process on a real store (chaos.damage).

Each case: produce keyed messages, crash (SIGKILL) or stop the broker, damage the store, start the broker
again. It must come up, serve only intact messages (no pull returns a body that fails its CRC), serve every
message that lies wholly before the damage (all of them when the commit log is untouched), accept and serve
new messages, say in its log what it truncated, and keep whatever recovery cut from the commit log in the
store's quarantine, byte for byte, as its runtime stats and ``admin quarantineList`` report.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from chaos import damage
from harness.launcher import LaunchError
from reference_broker.common import record as rec
from reference_broker.tools import admin
from tests.chaos.store_helpers import Sent, broker_log, create_topic, intact_keys, produce, read_all, topology

pytestmark = pytest.mark.e2e

N = 3000  # ~1.4 MiB of records: two 1 MiB commit-log files


def _record_size(sent: dict[str, Sent]) -> int:
    offs = sorted(s.commit_log_offset for s in sent.values())
    return min(b - a for a, b in itertools.pairwise(offs) if b > a)


def _snapshot(store_root: Path) -> dict[int, bytes]:
    return {int(p.name): p.read_bytes() for p in damage.commit_log_files(store_root)}


def _check_quarantine(store_root: Path, snap: dict[int, bytes], broker_addr: str) -> list[dict[str, Any]]:
    """Every quarantined cut holds exactly the bytes the commit log had there before the restart, and the
    broker's runtime stats report the same totals as the offline listing."""
    rows = admin.store_quarantine(store_root)
    for r in rows:
        start = max(s for s in snap if s <= r["offset"])
        pos = r["offset"] - start
        assert Path(r["path"]).read_bytes() == snap[start][pos:pos + r["bytes"]], r["name"]
        assert snap[start][pos + r["bytes"]:].strip(b"\x00") == b"", "non-zero bytes after the cut not kept"
    status = admin.broker_status(broker_addr)
    assert int(status["quarantinedFiles"]) == len(rows)
    assert int(status["quarantinedBytes"]) == sum(r["bytes"] for r in rows)
    assert int(status["quarantinedIntactRecords"]) == sum(r["intact_records"] for r in rows)
    return rows


@dataclass
class Outcome:
    log: str  # the broker's log since the restart
    quarantine: list[dict[str, Any]]  # admin.store_quarantine after the restart
    status: dict[str, str]  # the broker's runtime stats after the reads


def run_case(tmp_path: Path, do_damage: Callable[[Path, int], int | None], *, crash: bool = True) -> Outcome:
    """Produce, crash or stop, damage, restart, check.

    ``do_damage(store_root, data_end)`` returns the absolute commit-log offset of the first damaged byte, or
    None when the commit log is untouched. Whatever recovery cut must be in the quarantine, byte for byte,
    and no message read may fail its body CRC."""
    topo = topology(tmp_path / "topo")
    try:
        create_topic(topo)
        sent = produce(topo, N)
        broker = topo.brokers[0]
        data_end = int(admin.broker_status(broker.addr)["commitLogMaxOffset"])
        if crash:
            broker.kill()
        else:
            assert broker.stop() == 0
        first_bad = do_damage(broker.store_root, data_end)
        snap = _snapshot(broker.store_root)
        mark = len(broker_log(topo))
        try:
            broker.start()
        except LaunchError as e:
            pytest.fail(f"the broker did not come up on the damaged store: {e}")
        log = broker_log(topo)[mark:]
        quarantine = _check_quarantine(broker.store_root, snap, broker.addr)
        msgs = read_all(topo)
        assert all(rec.crc32(m.body) == m.body_crc for m in msgs), "a message failing its body CRC was served"
        good, bad = intact_keys(msgs)
        assert not bad, f"damaged messages served: {bad[:5]}"
        assert good <= set(sent), "served a key that was never sent"
        size = _record_size(sent)
        limit = data_end if first_bad is None else first_bad
        expected = {k for k, s in sent.items() if s.commit_log_offset + size <= limit}
        missing = expected - good
        assert not missing, (f"{len(missing)} messages before the damage at {limit} not served, "
                             f"e.g. {sorted(missing)[:3]}")
        after = produce(topo, 50, worker="after")
        good_after, bad_after = intact_keys(read_all(topo, "DAMAGE_READER_2"))
        assert not bad_after
        assert set(after) <= good_after, "messages sent after recovery are not served"
        return Outcome(log, quarantine, admin.broker_status(broker.addr))
    finally:
        topo.cleanup()


def test_zeroed_commit_log_tail(tmp_path):
    def hurt(root: Path, end: int) -> int:
        d = damage.zero_commit_log_tail(root, end, 3000)
        return end - 3000 if d.length else end
    log = run_case(tmp_path, hurt).log
    assert "recover commit log: stop at" in log


def test_random_bytes_in_the_last_commit_log_pages(tmp_path):
    def hurt(root: Path, end: int) -> int:
        d = damage.garble_commit_log_tail(root, end, 2, random.Random(7))
        return int(Path(d.path).name) + d.start
    out = run_case(tmp_path, hurt)
    assert "damaged record: cut after quarantine" in out.log and "ERROR" in out.log and "recovery cut" in out.log
    assert out.quarantine  # the garbled tail is kept (random bytes to the end of the data: no intact records)


def test_random_bytes_in_the_commit_log_without_abort_file(tmp_path):
    """A crash, then the abort file lost: normal recovery must still check CRCs and truncate."""
    def hurt(root: Path, end: int) -> int:
        d = damage.garble_commit_log_tail(root, end, 1, random.Random(8))
        damage.remove_abort(root)
        return int(Path(d.path).name) + d.start
    out = run_case(tmp_path, hurt)
    assert "last shutdown normally" in out.log
    assert "damaged record: cut after quarantine" in out.log and out.quarantine


def test_truncated_commit_log_file(tmp_path):
    def hurt(root: Path, end: int) -> int:
        d = damage.truncate_commit_log(root, end, cut_back=100)
        return int(Path(d.path).name) + d.start
    log = run_case(tmp_path, hurt).log
    assert "truncat" in log


def test_zeroed_consume_queue_tails(tmp_path):
    run_case(tmp_path, lambda root, end: (damage.zero_consume_queue_tails(root, "DamageTopic", 5), None)[1])


def test_random_bytes_in_the_last_consume_queue_pages(tmp_path):
    log = run_case(tmp_path, lambda root, end: (damage.garble_consume_queue_tails(root, "DamageTopic",
                                                                                   random.Random(9)), None)[1]).log
    assert "consume queue" in log.lower() and "truncat" in log


def test_truncated_consume_queue_files(tmp_path):
    run_case(tmp_path, lambda root, end: (damage.truncate_consume_queues(root, "DamageTopic"), None)[1])


def test_zeroed_consume_queue_tails_after_a_clean_shutdown(tmp_path):
    run_case(tmp_path, lambda root, end: (damage.zero_consume_queue_tails(root, "DamageTopic", 5), None)[1],
             crash=False)


def test_missing_checkpoint_after_a_crash(tmp_path):
    log = run_case(tmp_path, lambda root, end: (damage.remove_checkpoint(root), None)[1]).log
    assert "recover abnormally from file" in log


def test_corrupt_checkpoint_after_a_crash(tmp_path):
    run_case(tmp_path, lambda root, end: (damage.corrupt_checkpoint(root, random.Random(10)), None)[1])


def test_missing_abort_after_a_crash(tmp_path):
    log = run_case(tmp_path, lambda root, end: (damage.remove_abort(root), None)[1]).log
    assert "last shutdown normally" in log


def test_random_bytes_in_the_middle_of_a_cleanly_stopped_commit_log(tmp_path):
    """The reported defect: SIGTERM, 64 random bytes in the middle of the commit log, restart. RocketMQ 4.9.8
    truncates at the damaged record and every intact record after it is gone; here recovery cuts at the same
    place but keeps the cut bytes in the quarantine (checked byte for byte by run_case), says so at ERROR,
    and the admin tool reports it; no pull returns the damaged record."""
    def hurt(root: Path, end: int) -> int:
        d = damage.garble_commit_log_middle(root, end, 64, random.Random(64))
        return int(Path(d.path).name) + d.start
    out = run_case(tmp_path, hurt, crash=False)
    assert "last shutdown normally" in out.log
    assert "ERROR" in out.log and "recovery cut" in out.log
    assert len(out.quarantine) == 2  # the rest of the damaged file, and the whole file after it
    intact = sum(r["intact_records"] for r in out.quarantine)
    assert intact > N // 4, f"only {intact} intact records quarantined"
    assert int(out.status["quarantinedIntactRecords"]) == intact


def test_random_bytes_in_the_middle_with_the_abort_file_left(tmp_path):
    """The same damage, but the store believes it crashed (abort file present): abnormal recovery starts at
    the checkpoint's offset, past the damage, so nothing is cut; the damaged record stays in the log and its
    consume-queue unit in place. 4.9.8 serves it with a bad body CRC; here no pull returns it (run_case checks
    every message read), the consumer moves past it, and the broker counts it."""
    def hurt(root: Path, end: int) -> int:
        d = damage.garble_commit_log_middle(root, end, 64, random.Random(64))
        (root / "abort").touch()
        return int(Path(d.path).name) + d.start
    out = run_case(tmp_path, hurt, crash=False)
    assert "last shutdown abnormally" in out.log
    assert out.quarantine == []
    assert int(out.status["badRecordsSkipped"]) >= 1


def test_a_broker_that_cannot_quarantine_refuses_to_start_and_cuts_nothing(tmp_path):
    """The copy cannot be made (``quarantine`` is a plain file in the way, as a full disk would refuse it):
    the broker exits with the reason in its log, the commit log is untouched; with the obstacle gone it
    starts, quarantines and cuts."""
    topo = topology(tmp_path / "topo")
    try:
        create_topic(topo)
        produce(topo, 1000)
        broker = topo.brokers[0]
        end = int(admin.broker_status(broker.addr)["commitLogMaxOffset"])
        assert broker.stop() == 0
        damage.garble_commit_log_middle(broker.store_root, end, 64, random.Random(3))
        snap = _snapshot(broker.store_root)
        (broker.store_root / "quarantine").write_bytes(b"in the way")
        mark = len(broker_log(topo))
        with pytest.raises(LaunchError):
            broker.start()
        log = broker_log(topo)[mark:]
        assert "the broker cannot start" in log and "refuses to cut" in log
        assert _snapshot(broker.store_root) == snap
        (broker.store_root / "quarantine").unlink()
        broker.start()
        rows = _check_quarantine(broker.store_root, snap, broker.addr)
        assert rows and sum(r["intact_records"] for r in rows) > 0
    finally:
        topo.cleanup()
