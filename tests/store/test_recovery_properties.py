"""Crash recovery as a property: whatever was written and however the unflushed tail was lost.

Each example forks a child that opens a store, runs a drawn sequence of puts and explicit commit-log
flushes, and leaves with ``os._exit`` — no shutdown, so ``abort`` stays and nothing more is flushed.
The page cache survives the exit, so the files then hold everything written (kill -9). Before
recovering, the parent emulates what a power loss could have left on disk (DESIGN.md §6):

- ``keep``: nothing lost (kill -9);
- ``cut``: everything after the last durable offset reads as zeros (files past it may be gone);
- ``garble``: random bytes over part of the unflushed tail, starting at a record or in a body — damage
  the record format can detect (the body CRC covers only the body; damage to unchecked header fields
  or properties is undetectable in RocketMQ too, so it is not drawn);

and, independently, the loss of consume-queue tails or of the whole consumequeue directory (then the
checkpoint too, as it is written only after the queues are flushed) and of the checkpoint.

The "durable offset" is what the store promised: the write position at the last explicit flush
(ASYNC_FLUSH), or the end of the last PUT_OK message (SYNC_FLUSH: a PUT_OK is flushed).

After abnormal recovery (``load`` + ``start``): (a) every consume-queue unit points at a valid record
of its queue with that queue offset; (b) the log holds exactly a prefix of what was written; (c) the
prefix covers everything durable; (d) with nothing cut, everything acknowledged; (e) a put continues
each queue; (f) every recovered message is found by its key; then a normal restart keeps all of it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from reference_broker.store.config import FlushDiskType
from reference_broker.store.consume_queue import CQ_STORE_UNIT_SIZE
from reference_broker.store.message_store import MessageStore
from reference_broker.store.record import MessageExt, MessageExtBrokerInner
from reference_broker.store.status import PutMessageStatus
from tests.store.durability_checks import BODY_POS, check_consume_queues, check_readable, make_config, scan_commit_log

TOPICS = ("TopicA", "TopicB")
QUEUES = 3
CQ_FILE = 8 * CQ_STORE_UNIT_SIZE
NO_BACKGROUND_FLUSH_MS = 3_600_000  # the async flusher sleeps through the child: only explicit flushes


def body_of(i: int, size: int) -> bytes:
    return (f"{i}.".encode() * (size // 2 + 1))[:size]


def key_of(i: int) -> str:
    return f"k{i}"


@dataclass(frozen=True)
class Put:
    topic: str
    queue_id: int
    body_size: int


@dataclass(frozen=True)
class Flush:
    pass


@dataclass
class Written:
    """One put the child made, with what the store answered."""

    i: int
    topic: str
    queue_id: int
    body_size: int
    status: str
    phys: int
    size: int
    queue_offset: int

    @property
    def end(self) -> int:
        return self.phys + self.size

    @property
    def ident(self) -> tuple[str, int, bytes, int, int]:
        return self.topic, self.queue_id, body_of(self.i, self.body_size), self.queue_offset, self.phys


def ident(m: MessageExt) -> tuple[str, int, bytes, int, int]:
    return m.topic, m.queue_id, m.body, m.queue_offset, m.commit_log_offset


# ---- the child: write, then vanish ------------------------------------------------------------------

def _child(root: Path, file_size: int, flush: FlushDiskType, ops: list[Put | Flush], wait_dispatch: bool,
           out: Path) -> None:
    store = MessageStore(make_config(root, commit_log_file=file_size, cq_file=CQ_FILE, flush=flush,
                                     flush_interval_ms=NO_BACKGROUND_FLUSH_MS))
    assert store.load()
    store.start()
    written: list[dict[str, object]] = []
    durable = 0
    mfq = store.commit_log.mapped_file_queue
    for op in ops:
        if isinstance(op, Put):
            i = len(written)
            msg = MessageExtBrokerInner(op.topic, body_of(i, op.body_size), op.queue_id,
                                        properties={"KEYS": key_of(i)}, born_timestamp=int(time.time() * 1000))
            r = store.put_message(msg)
            assert r.status.is_stored and r.append is not None, r
            written.append({"i": i, "topic": op.topic, "queue_id": op.queue_id, "body_size": op.body_size,
                            "status": r.status.name, "phys": r.append.wrote_offset, "size": r.append.wrote_bytes,
                            "queue_offset": r.append.logics_offset})
            if flush is FlushDiskType.SYNC_FLUSH and r.status is PutMessageStatus.PUT_OK:
                durable = max(durable, r.append.wrote_offset + r.append.wrote_bytes)
        elif flush is FlushDiskType.ASYNC_FLUSH:
            # The background flusher sleeps, so this thread is the only one flushing.
            target = store.commit_log.get_max_offset()
            while not mfq.flush(0):
                pass
            assert mfq.flushed_where >= target, (mfq.flushed_where, target)
            durable = target
        # SYNC_FLUSH: the group-commit thread owns flushing; PUT_OK already marks what is durable.
    if wait_dispatch:
        deadline = time.monotonic() + 10
        while store.reput.behind() > 0 and time.monotonic() < deadline:
            time.sleep(0.001)
    out.write_text(json.dumps({"written": written, "durable": durable}))


def run_child(root: Path, file_size: int, flush: FlushDiskType, ops: list[Put | Flush],
              wait_dispatch: bool) -> tuple[list[Written], int]:
    out = root.parent / "child.json"
    err = root.parent / "child.err"
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns
        code = 1
        try:
            _child(root, file_size, flush, ops, wait_dispatch, out)
            code = 0
        except BaseException:
            err.write_text(traceback.format_exc())
        finally:
            os._exit(code)  # abrupt: no shutdown, abort stays, nothing else is flushed
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, err.read_text() if err.exists() else f"child status {status}"
    data = json.loads(out.read_text())
    return [Written(**w) for w in data["written"]], int(data["durable"])


# ---- emulated loss -------------------------------------------------------------------------------

def _commit_log_files(root: Path) -> list[Path]:
    d = root / "commitlog"
    return sorted(p for p in d.iterdir() if p.name.isdigit()) if d.is_dir() else []


def _overwrite(root: Path, file_size: int, start: int, data: bytes) -> None:
    """Write ``data`` at absolute commit-log offset ``start`` (within one file)."""
    path = root / "commitlog" / f"{start - start % file_size:020d}"
    with open(path, "r+b") as f:
        f.seek(start % file_size)
        f.write(data)


def cut_commit_log(root: Path, file_size: int, durable: int, drop_files: bool) -> None:
    for path in _commit_log_files(root):
        begin = int(path.name)
        if begin >= durable and drop_files:
            path.unlink()
        elif begin + file_size > durable:
            lo = max(durable, begin)
            _overwrite(root, file_size, lo, bytes(begin + file_size - lo))


def cut_consume_queues(root: Path, lost_units: int) -> None:
    """Zero the last ``lost_units`` units of each queue, never before its third-from-last file.

    Queues recover from their third-from-last file (ConsumeQueue.recover); a hole further back is not
    seen, so it is not a state a crash of a flushed-in-order queue can leave.
    """
    base = root / "consumequeue"
    if not base.is_dir():
        return
    for qdir in sorted(p for t in base.iterdir() for p in t.iterdir()):
        files = sorted(p for p in qdir.iterdir() if p.name.isdigit())
        if not files:
            continue
        blob = b"".join(p.read_bytes() for p in files)
        units = 0
        while (units + 1) * CQ_STORE_UNIT_SIZE <= len(blob) and blob[units * 20 + 8 : units * 20 + 12] != bytes(4):
            units += 1
        first = int(files[0].name)
        window = first + max(0, len(files) - 3) * CQ_FILE
        cut_at = max(window, first + (units - lost_units) * CQ_STORE_UNIT_SIZE)
        for p in files:
            begin = int(p.name)
            if begin + CQ_FILE > cut_at:
                lo = max(cut_at, begin)
                with open(p, "r+b") as f:
                    f.seek(lo - begin)
                    f.write(bytes(begin + CQ_FILE - lo))


# ---- the property ---------------------------------------------------------------------------------

_put = st.builds(Put, st.sampled_from(TOPICS), st.integers(0, QUEUES - 1), st.integers(0, 300))
# 3 puts : 1 flush, then puts after the last flush (which a power loss may take).
ops_strategy = st.builds(lambda body, tail: body + tail,
                         st.lists(st.one_of(_put, _put, _put, st.just(Flush())), max_size=45),
                         st.lists(_put, min_size=1, max_size=12))


@dataclass(frozen=True)
class Damage:
    """How the crash treats the unflushed tail; seeds are mapped onto the layout the child wrote."""

    mode: str  # keep | cut | garble
    drop_files: bool  # cut: files wholly past the durable offset are gone, not zeroed
    record_seed: int  # garble: which non-durable record is hit first
    in_body: bool  # garble: the damage starts in that record's body (else at its first byte)
    byte_seed: int
    noise: bytes  # garble: XORed over the bytes, so its length is the damage's length
    cq_mode: str  # keep | tail | all
    cq_lost_units: int
    checkpoint: str  # keep | zero | delete


damage_strategy = st.builds(
    Damage,
    mode=st.sampled_from(["garble", "cut", "keep"]),
    drop_files=st.booleans(),
    record_seed=st.integers(0, 2**16),
    in_body=st.booleans(),
    byte_seed=st.integers(0, 2**16),
    noise=st.binary(min_size=1, max_size=600),
    cq_mode=st.sampled_from(["tail", "keep", "all"]),
    cq_lost_units=st.integers(1, 12),
    checkpoint=st.sampled_from(["keep", "zero", "delete"]),
)


def apply_damage(root: Path, file_size: int, written: list[Written], durable: int, d: Damage) -> int:
    """Leave on disk what the crash could have; return how many messages must then be recovered."""
    n_durable = sum(1 for w in written if w.end <= durable)
    expected = len(written)
    if d.mode == "cut":
        cut_commit_log(root, file_size, durable, d.drop_files)
        expected = n_durable
    elif d.mode == "garble" and n_durable < len(written):
        j = n_durable + d.record_seed % (len(written) - n_durable)
        w = written[j]
        start = w.phys + (BODY_POS + d.byte_seed % w.body_size if d.in_body and w.body_size else 0)
        length = min(len(d.noise), file_size - start % file_size)
        with open(root / "commitlog" / f"{start - start % file_size:020d}", "rb") as f:
            f.seek(start % file_size)
            old = f.read(length)
        # XOR with non-zero bytes: every damaged byte really changes.
        _overwrite(root, file_size, start, bytes(a ^ (b or 0x5A) for a, b in zip(old, d.noise, strict=False)))
        expected = j
    if d.cq_mode == "tail":
        cut_consume_queues(root, d.cq_lost_units)
    elif d.cq_mode == "all":
        shutil.rmtree(root / "consumequeue", ignore_errors=True)
    # The checkpoint is written only after the queues are flushed: lost queues mean a lost checkpoint.
    if d.checkpoint == "delete" or d.cq_mode != "keep":
        (root / "checkpoint").unlink(missing_ok=True)
    elif d.checkpoint == "zero":
        (root / "checkpoint").write_bytes(bytes(4096))
    event(f"{d.mode}: {'nothing lost' if expected == len(written) else 'messages lost'}")
    event(f"{'some' if n_durable < len(written) else 'no'} messages not durable")
    return expected


def probe_for(written: list[Written], k: int, topic_seed: int, queue_seed: int) -> MessageExtBrokerInner:
    """The put after recovery: shaped like the first lost message when there is one.

    Same topic, body size and key length make it exactly as long as the lost record, so it ends
    where the next stale record (if recovery left it on disk) begins: a later scan must not find it.
    """
    if k < len(written):
        w = written[k]
        return MessageExtBrokerInner(w.topic, b"p" * w.body_size, w.queue_id,
                                     properties={"KEYS": "p" * len(key_of(w.i))})
    return MessageExtBrokerInner(TOPICS[topic_seed % len(TOPICS)], b"after-recovery", queue_seed % QUEUES,
                                 properties={"KEYS": "probe"})


RECOVERY_STRATEGIES = {  # module level so a longer run can reuse them with other settings
    "file_size": st.sampled_from([2048, 3000, 4096, 8192]),
    "flush": st.sampled_from([FlushDiskType.ASYNC_FLUSH, FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH]),
    "ops": ops_strategy,
    "wait_dispatch": st.booleans(),
    "damage": damage_strategy,
    "probe_seeds": st.tuples(st.integers(0, 7), st.integers(0, 7)),
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**RECOVERY_STRATEGIES)
def test_recovery_keeps_a_prefix_covering_everything_durable(
    file_size: int, flush: FlushDiskType, ops: list[Put | Flush], wait_dispatch: bool, damage: Damage,
    probe_seeds: tuple[int, int],
) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="recovery-prop-"))
    try:
        root = tmp / "store"
        written, durable = run_child(root, file_size, flush, ops, wait_dispatch)
        assert (root / "abort").exists(), "the child's store did not create abort"
        n_durable = sum(1 for w in written if w.end <= durable)
        expected_k = apply_damage(root, file_size, written, durable, damage)

        cfg = make_config(root, commit_log_file=file_size, cq_file=CQ_FILE, flush=flush)
        store = MessageStore(cfg)
        assert store.load()
        assert not store.last_exit_ok
        store.start()
        try:
            records = scan_commit_log(store)
            k = len(records)
            # (b) a prefix of what was written, in write order, with the offsets the puts returned
            assert [ident(m) for m in records] == [w.ident for w in written[:k]]
            # (c) everything durable survived; (d) kill -9 keeps everything acknowledged
            assert k >= n_durable, f"lost durable messages: recovered {k}, durable {n_durable}"
            assert k == expected_k, f"recovered {k} messages, the damage leaves {expected_k}"
            # (a) the consume queues index exactly those records
            check_consume_queues(store, records)
            for m in records:
                check_readable(store, m)
                # (f) the index was rebuilt for every recovered message
                found = store.query_message(m.topic, m.keys, 64, 0, 2**62)
                assert [x.commit_log_offset for x in found] == [m.commit_log_offset], m.keys
            # (e) a put continues its queue at the next offset
            probe = probe_for(written, k, *probe_seeds)
            count = sum(1 for m in records if (m.topic, m.queue_id) == (probe.topic, probe.queue_id))
            before = store.get_max_phy_offset()
            r = store.put_message(probe)
            assert r.status is PutMessageStatus.PUT_OK and r.append is not None
            assert r.append.logics_offset == count
            assert r.append.wrote_offset >= before
            deadline = time.monotonic() + 10
            while store.dispatch_behind_bytes() > 0 and time.monotonic() < deadline:
                time.sleep(0.001)
            records = scan_commit_log(store)
            assert len(records) == k + 1 and records[-1].body == probe.body
            check_readable(store, records[-1])
            check_consume_queues(store, records)
        finally:
            store.shutdown()
        assert store.shutdown_normally

        # A normal restart keeps exactly the same log: nothing cut by recovery comes back.
        store = MessageStore(cfg)
        assert store.load()
        assert store.last_exit_ok
        store.start()
        try:
            again = scan_commit_log(store)
            assert [ident(m) for m in again] == [ident(m) for m in records]
            check_consume_queues(store, again)
        finally:
            store.shutdown()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
