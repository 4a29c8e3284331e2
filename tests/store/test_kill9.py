"""kill -9 of a real writer process: no acknowledged message is lost, nothing half-written is served.

``writer_proc.py`` puts messages and acknowledges each on stdout after its put returns. The test
SIGKILLs it mid-stream at a random moment, then recovers a copy of the directory (``abort`` present:
abnormal recovery) and checks every message acknowledged in any cycle so far. The writer itself is
restarted on the killed directory, so each cycle after the first also recovers a recovered store.
The page cache survives a kill -9, so both flush modes must keep every acknowledged message.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from reference_broker.common import record as rec
from reference_broker.common.record import MessageExt, MessageExtBrokerInner, decode_message
from reference_broker.store.config import FlushDiskType
from reference_broker.store.message_store import MessageStore
from reference_broker.store.quarantine import list_quarantine
from reference_broker.store.status import PutMessageStatus
from tests.store import writer_proc as wp
from tests.store.durability_checks import check_consume_queues, check_readable, scan_commit_log

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
CYCLE_SPAN = 1_000_000  # message indexes of cycle c start at c * CYCLE_SPAN
FLUSH = {"sync": FlushDiskType.SYNC_FLUSH, "async": FlushDiskType.ASYNC_FLUSH}


@dataclass(frozen=True)
class Ack:
    i: int
    queue_id: int
    queue_offset: int
    phys: int


class Writer:
    """A running writer_proc.py whose acknowledgements are read as they come."""

    def __init__(self, root: Path, flush: str, threads: int, start: int, stderr: Path) -> None:
        self.stderr_path = stderr
        with open(stderr, "wb") as err:  # a file, not a pipe: a chatty writer must never block on it
            self.proc = subprocess.Popen(
                [sys.executable, str(Path(wp.__file__)), "--dir", str(root), "--flush", flush,
                 "--threads", str(threads), "--start", str(start)],
                stdout=subprocess.PIPE, stderr=err, cwd=REPO)
        self.acks: list[Ack] = []
        self.nacks: list[str] = []
        self.ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            parts = raw.decode().split()
            if not parts or not raw.endswith(b"\n"):
                continue  # a line cut by the kill was never acknowledged
            if parts[0] == "ready":
                self.ready.set()
            elif parts[0] == "ack":
                self.acks.append(Ack(*(int(x) for x in parts[1:5])))
            else:
                self.nacks.append(raw.decode().strip())

    def errors(self) -> str:
        return self.stderr_path.read_text(errors="replace")[-3000:]

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        self._reader.join(30)  # whatever the pipe still holds was acknowledged before the kill
        assert self.proc.stdout is not None
        self.proc.stdout.close()


def run_until_killed(root: Path, flush: str, threads: int, cycle: int, rng: random.Random,
                     tmp: Path) -> list[Ack]:
    w = Writer(root, flush, threads, cycle * CYCLE_SPAN, tmp / f"writer-{cycle}.err")
    try:
        deadline = time.monotonic() + 60
        while not w.acks and time.monotonic() < deadline and w.proc.poll() is None:
            time.sleep(0.005)
        assert w.acks, f"writer produced no acknowledgement (exit {w.proc.poll()}):\n{w.errors()}"
        run_s = rng.uniform(0.3, 1.0)
        cap = rng.randint(500, 6000)
        stop = time.monotonic() + run_s
        while time.monotonic() < stop and len(w.acks) < cap and w.proc.poll() is None:
            time.sleep(0.002)
        assert w.proc.poll() is None, f"writer died on its own:\n{w.errors()}"
    finally:
        w.kill()
    assert not w.nacks, w.nacks[:5]
    return w.acks


def verify(root: Path, flush: str, acked: dict[int, Ack], known: dict[int, int], threads: int,
           cycles_done: int) -> None:
    """Recover ``root`` abnormally and check it against everything acknowledged so far."""
    store = MessageStore(wp.config(root, FLUSH[flush]))
    assert store.load()
    assert not store.last_exit_ok, "a killed writer must leave abort behind"
    store.start()
    try:
        # A kill cuts at most the record being copied: never a complete record (one once lost its whole-record
        # CRC when the writer was killed between writing it and sealing it).
        cut_intact = [e for e in list_quarantine(root) if e.intact_records]
        assert not cut_intact, f"recovery cut intact records after a kill -9: {cut_intact}"
        records = scan_commit_log(store)  # every record decodes with its CRC
        check_consume_queues(store, records)  # every unit points at its own record
        by_index: dict[int, MessageExt] = {}
        for m in records:
            i = int(m.keys[1:])
            assert m.keys == wp.key_of(i) and i not in by_index, f"duplicate or foreign record {m.keys}"
            assert (m.topic, m.queue_id, m.body) == (wp.TOPIC, i % wp.QUEUES, wp.body_of(i)), m.keys
            by_index[i] = m
        lost = sorted(i for i in acked if i not in by_index)
        assert not lost, f"{len(lost)} acknowledged messages lost, first {lost[:10]}"
        for i, a in acked.items():
            m = by_index[i]
            assert (m.queue_id, m.queue_offset, m.commit_log_offset) == (a.queue_id, a.queue_offset, a.phys), (
                f"message {i}: acknowledged at {a}, recovered at {m.queue_id}/{m.queue_offset}/{m.commit_log_offset}")
            check_readable(store, m)
        # Recovered once, kept forever: what an earlier recovery found is still there, where it was.
        gone = sorted(i for i, phys in known.items() if i not in by_index or by_index[i].commit_log_offset != phys)
        assert not gone, f"messages recovered before are gone now: {gone[:10]}"
        # Beyond the acknowledged ones there can only be the puts in flight at the kill: one per thread.
        unacked = Counter(i // CYCLE_SPAN for i in by_index if i not in acked)
        assert all(n <= threads for n in unacked.values()), f"unacknowledged records per cycle: {unacked}"
        assert set(unacked) <= set(range(cycles_done)), unacked
        known.update({i: m.commit_log_offset for i, m in by_index.items()})
        for q in range(wp.QUEUES):
            assert store.get_max_offset_in_queue(wp.TOPIC, q) >= sum(1 for a in acked.values() if a.queue_id == q)
        # The recovered store takes new messages where each queue left off.
        expected_offset = store.get_max_offset_in_queue(wp.TOPIC, 1)
        r = store.put_message(MessageExtBrokerInner(wp.TOPIC, b"after-recovery", 1,
                                                    properties={"KEYS": "probe"}))
        assert r.status is PutMessageStatus.PUT_OK and r.append is not None
        assert r.append.logics_offset == expected_offset
        deadline = time.monotonic() + 10
        while store.dispatch_behind_bytes() > 0 and time.monotonic() < deadline:
            time.sleep(0.001)
        got = store.get_message("kill9", wp.TOPIC, 1, expected_offset, 1)
        assert got.queue_offsets == [expected_offset]
        assert decode_message(got.messages[0], check_crc=True).body == b"after-recovery"
    finally:
        store.shutdown()


def run_cycles(tmp_path: Path, flush: str, threads: int, cycles: int) -> None:
    root = tmp_path / "store"
    rng = random.Random()
    acked: dict[int, Ack] = {}
    known: dict[int, int] = {}
    for cycle in range(cycles):
        for a in run_until_killed(root, flush, threads, cycle, rng, tmp_path):
            assert a.i not in acked
            acked[a.i] = a
        # Check a copy: the writer's next run must recover the killed directory itself.
        snap = tmp_path / f"snapshot-{cycle}"
        shutil.copytree(root, snap)
        verify(snap, flush, acked, known, threads, cycle + 1)
        shutil.rmtree(snap)


@pytest.mark.parametrize("flush", ["sync", "async"])
def test_kill9_loses_no_acknowledged_message(tmp_path: Path, flush: str) -> None:
    run_cycles(tmp_path, flush, threads=1, cycles=3)


def test_kill9_under_load_from_four_writer_threads(tmp_path: Path) -> None:
    run_cycles(tmp_path, "async", threads=4, cycles=2)


def _torn_page_start(root: Path) -> tuple[int, int]:
    """(page start, phys of the record it cuts): the last 4 KiB page boundary that falls inside a record's
    topic or properties, where BODYCRC cannot see a tear (common/record.py's field table: the body starts at @88)."""
    path = sorted((root / "commitlog").iterdir())[0]
    buf = path.read_bytes()
    reqs, _end, _why = rec.scan_records(buf, 0, len(buf), False)
    assert len(reqs) > 50, f"the writer wrote only {len(reqs)} records"
    for r in reversed(reqs):
        m = decode_message(buf, r.commit_log_offset, r.commit_log_offset + r.msg_size)
        after_body = r.commit_log_offset + 88 + len(m.body)
        page = (r.commit_log_offset + r.msg_size - 1) // 4096 * 4096
        if after_body < page:
            return page, r.commit_log_offset
    pytest.fail("no page boundary falls inside a record's topic or properties")


def test_a_torn_page_inside_a_records_properties_truncates_it(tmp_path: Path) -> None:
    """The chaos suite's torn-page case, placed where it once got through: after a kill -9, a 4 KiB page
    that starts inside a record's properties reads back as zeros (a power loss that wrote the page
    before it but not this one). Recovery must stop at that record; everything before it stays intact."""
    root = tmp_path / "store"
    acks = run_until_killed(root, "async", 1, 0, random.Random(11), tmp_path)
    page, cut_phys = _torn_page_start(root)
    path = sorted((root / "commitlog").iterdir())[0]
    with open(path, "r+b") as f:
        f.seek(page)
        f.write(bytes(4096))
    store = MessageStore(wp.config(root, FLUSH["async"]))
    assert store.load()
    store.start()
    try:
        records = scan_commit_log(store)  # each decodes with its whole-record CRC
        assert store.commit_log.get_max_offset() == cut_phys
        assert [m.keys for m in records] == [wp.key_of(a.i) for a in acks if a.phys < cut_phys]
        for m in records:
            assert m.body == wp.body_of(int(m.keys[1:])), m.keys
        check_consume_queues(store, records)
    finally:
        store.shutdown()
