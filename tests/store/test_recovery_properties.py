"""Crash recovery as a property: whatever was written and however the unflushed part was lost.

Each example forks a child that opens a store, runs a drawn sequence of puts, commit-log flushes and
checkpoint rounds, and leaves with ``os._exit`` — no shutdown, so ``abort`` stays and nothing more is
flushed. The page cache survives the exit, so the files then hold everything written (kill -9).
Before recovering, the parent emulates what a power loss could have left on disk (docs/design.md, Crash model):

- commit log ``keep``: nothing lost (kill -9); ``cut``: everything after the durable offset reads as
  zeros (files wholly past it may be gone); ``garble``: random bytes over part of the non-durable
  tail, starting at a record, in its body, or at any byte of it — header, topic and properties too,
  which only the whole-record CRC (on by default, record.py) detects: 4.9.8's BODYCRC covers the body;
- consume queues ``keep``, or lose their last units (``tail``) or every unit (``all``) that neither a
  checkpoint round flushed nor the checkpoint vouches for (see ``cut_consume_queues``);
- the checkpoint kept, zeroed or deleted.

The durable offset is what the store promised: the write position at the last flush (ASYNC_FLUSH), or
the end of the last PUT_OK message (SYNC_FLUSH: a PUT_OK is flushed). A stepping store clock in the
child spreads store timestamps over minutes, so the checkpoint lets abnormal recovery start past the
first commit-log file, as on a long-running broker.

After abnormal recovery (``load`` + ``start``): (a) every consume-queue unit points at a valid record
of its queue with that queue offset; (b) the log holds exactly a prefix of what was written; (c) the
prefix covers everything durable; (d) with nothing cut, everything acknowledged; (e) a put continues
its queue; (f) every recovered message is found by its key; then a normal
restart keeps exactly the same log.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from reference_broker.common.record import MessageExt, MessageExtBrokerInner
from reference_broker.store import commit_log as commit_log_module
from reference_broker.store.config import FlushDiskType, MessageStoreConfig
from reference_broker.store.consume_queue import CQ_STORE_UNIT_SIZE
from reference_broker.store.consume_queue import UNIT as CQ_UNIT
from reference_broker.store.flush import FlushRealTimeService
from reference_broker.store.message_store import MessageStore
from reference_broker.store.status import PutMessageStatus
from tests.store.durability_checks import BODY_POS, check_consume_queues, check_readable, make_config, scan_commit_log

TOPICS = ("TopicA", "TopicB")
QUEUES = 3
CQ_FILE = 8 * CQ_STORE_UNIT_SIZE
INDEX_NUM = 16  # 15 keys per index file: files fill, are flushed and advance the checkpoint
HOUR_MS = 3_600_000  # the child's flush threads sleep through it: only the drawn operations flush


def body_of(i: int, size: int) -> bytes:
    return (f"{i}.".encode() * (size // 2 + 1))[:size]


def key_of(i: int) -> str:
    return f"k{i}"


def store_config(root: Path, file_size: int, flush: FlushDiskType, index_safe: bool) -> MessageStoreConfig:
    cfg = make_config(root, commit_log_file=file_size, cq_file=CQ_FILE, flush=flush, index_num=INDEX_NUM)
    cfg.message_index_safe = index_safe
    return cfg


@dataclass(frozen=True)
class Put:
    topic: str
    queue_id: int
    body_size: int
    repeat: int = 1  # that many messages of this shape


@dataclass(frozen=True)
class Flush:
    """ASYNC_FLUSH: the real-time flusher's step until the commit log is on disk (SYNC_FLUSH: nothing)."""


@dataclass(frozen=True)
class Checkpoint:
    """A Flush, then a thorough round of the consume-queue flusher: queues flushed, checkpoint written."""


@dataclass(frozen=True)
class Pause:
    seconds: float


Op = Put | Flush | Checkpoint | Pause


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
    store_timestamp: int

    @property
    def end(self) -> int:
        return self.phys + self.size

    @property
    def ident(self) -> tuple[str, int, bytes, int, int]:
        return self.topic, self.queue_id, body_of(self.i, self.body_size), self.queue_offset, self.phys


@dataclass
class ChildResult:
    written: list[Written]
    durable: int  # commit-log bytes the store has promised are on disk
    cq_flushed: dict[str, int]  # "topic/queue" → consume-queue bytes flushed when the child vanished


def ident(m: MessageExt) -> tuple[str, int, bytes, int, int]:
    return m.topic, m.queue_id, m.body, m.queue_offset, m.commit_log_offset


# ---- the child: write, then vanish ------------------------------------------------------------------

class SteppingClock:
    """commit_log's ``time`` module in the child: each store-time reading (``time_ns``) is ``step_ms``
    after the last one, so store timestamps span minutes and the checkpoint's 3 s margin
    (getMinTimestamp) leaves older commit-log files behind it, as on a long-running broker."""

    def __init__(self, step_ms: int) -> None:
        self._ns = time.time_ns()
        self._step_ns = step_ms * 1_000_000

    def time_ns(self) -> int:
        self._ns += self._step_ns
        return self._ns

    def __getattr__(self, name: str) -> object:
        return getattr(time, name)


def _child(cfg: MessageStoreConfig, ops: list[Op], wait_dispatch: bool, clock_step_ms: int) -> dict[str, object]:
    if clock_step_ms:
        commit_log_module.time = SteppingClock(clock_step_ms)  # type: ignore[attr-defined,assignment]
    store = MessageStore(cfg)
    assert store.load()
    store.start()
    written: list[dict[str, object]] = []
    durable = 0
    mfq = store.commit_log.mapped_file_queue
    last_ts = 0
    for op in ops:
        for _ in range(op.repeat if isinstance(op, Put) else 0):
            assert isinstance(op, Put)
            i = len(written)
            msg = MessageExtBrokerInner(op.topic, body_of(i, op.body_size), op.queue_id,
                                        properties={"KEYS": key_of(i)}, born_timestamp=int(time.time() * 1000))
            r = store.put_message(msg)
            assert r.status.is_stored and r.append is not None, r
            if clock_step_ms and written:
                assert r.append.store_timestamp >= last_ts + clock_step_ms, (
                    "the stepping clock is not in effect: how does commit_log read the time now?")
            last_ts = r.append.store_timestamp
            written.append({"i": i, "topic": op.topic, "queue_id": op.queue_id, "body_size": op.body_size,
                            "status": r.status.name, "phys": r.append.wrote_offset, "size": r.append.wrote_bytes,
                            "queue_offset": r.append.logics_offset, "store_timestamp": r.append.store_timestamp})
            if cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH and r.status is PutMessageStatus.PUT_OK:
                durable = max(durable, r.append.wrote_offset + r.append.wrote_bytes)
        # Flush and Checkpoint call the flush services' own steps: their threads must be asleep.
        if isinstance(op, Flush | Checkpoint) and isinstance(store.flush_service, FlushRealTimeService):
            target = store.commit_log.get_max_offset()
            for _ in range(1000):
                if mfq.flushed_where >= target:
                    break
                store.flush_service.flush_once(0)  # one file a step; advances checkpoint.physicMsgTimestamp
            assert mfq.flushed_where >= target, (mfq.flushed_where, target)
            durable = target
        if isinstance(op, Checkpoint):
            store.flush_cq_service.do_flush(1)  # thorough: the thorough interval is 0
        if isinstance(op, Pause):
            time.sleep(op.seconds)
    if wait_dispatch:
        deadline = time.monotonic() + 10
        while store.reput.behind() > 0 and time.monotonic() < deadline:
            time.sleep(0.001)
    cq_flushed = {f"{cq.topic}/{cq.queue_id}": cq.mapped_file_queue.flushed_where for cq in store.iter_consume_queues()}
    return {"written": written, "durable": durable, "cq_flushed": cq_flushed}


def run_child(cfg: MessageStoreConfig, ops: list[Op], wait_dispatch: bool, clock_step_ms: int) -> ChildResult:
    """Run ``ops`` on a store in a forked child that then vanishes without shutting it down."""
    out = cfg.store_path_root_dir.parent / "child.json"
    err = cfg.store_path_root_dir.parent / "child.err"
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns
        code = 1
        try:
            out.write_text(json.dumps(_child(cfg, ops, wait_dispatch, clock_step_ms)))
            code = 0
        except BaseException:  # noqa: BLE001 - the forked child's top: reported to the parent
            err.write_text(traceback.format_exc())
        finally:
            os._exit(code)  # abrupt: no shutdown, abort stays, nothing else is flushed
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, err.read_text() if err.exists() else f"child status {status}"
    data = json.loads(out.read_text())
    return ChildResult([Written(**w) for w in data["written"]], int(data["durable"]), data["cq_flushed"])


def quiet_flushers(cfg: MessageStoreConfig) -> MessageStoreConfig:
    """Flush threads that sleep through the child: only Flush and Checkpoint operations flush."""
    cfg.flush_interval_commit_log_ms = HOUR_MS
    cfg.flush_interval_consume_queue_ms = HOUR_MS
    cfg.flush_consume_queue_thorough_interval_ms = 0  # so every round of the queue flusher is thorough
    return cfg


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


def read_checkpoint(root: Path) -> tuple[int, int, int]:
    """(physicMsgTimestamp, logicsMsgTimestamp, indexMsgTimestamp) as on disk; zeros if absent."""
    raw = (root / "checkpoint").read_bytes() if (root / "checkpoint").exists() else b""
    return struct.unpack_from(">qqq", raw) if len(raw) >= 24 else (0, 0, 0)


def cut_consume_queues(root: Path, child: ChildResult, lost_units: int | None, vouched_ts: int) -> None:
    """Zero the last ``lost_units`` units of each queue (None: all) that may not be on disk.

    Spared: units flushed (``child.cq_flushed``), units of messages stored at or before
    ``vouched_ts`` (abnormal recovery re-dispatches only from a file older than the checkpoint, so it
    takes those as being on disk), and everything before the third-from-last file (a queue recovers
    from there, ConsumeQueue.recover, so a hole further back is not seen; a queue flushed in order
    cannot have one).
    """
    ts_at = {w.phys: w.store_timestamp for w in child.written}
    base = root / "consumequeue"
    if not base.is_dir():
        return
    for qdir in sorted(p for t in base.iterdir() for p in t.iterdir()):
        files = sorted(p for p in qdir.iterdir() if p.name.isdigit())
        if not files:
            continue
        first = int(files[0].name)
        blob = b"".join(p.read_bytes() for p in files)
        units = []
        for pos in range(0, len(blob) - CQ_STORE_UNIT_SIZE + 1, CQ_STORE_UNIT_SIZE):
            phy, size, _tags = CQ_UNIT.unpack_from(blob, pos)
            if size <= 0:
                break
            units.append(phy)
        vouched = 0
        while vouched < len(units) and ts_at.get(units[vouched], vouched_ts + 1) <= vouched_ts:
            vouched += 1
        keep = max(vouched, len(units) - lost_units) if lost_units is not None else vouched
        flushed = child.cq_flushed.get(f"{qdir.parent.name}/{qdir.name}", 0)
        cut_at = max(first + max(0, len(files) - 3) * CQ_FILE, flushed, first + keep * CQ_STORE_UNIT_SIZE)
        for p in files:
            begin = int(p.name)
            if begin + CQ_FILE > cut_at:
                lo = max(cut_at, begin)
                with open(p, "r+b") as f:
                    f.seek(lo - begin)
                    f.write(bytes(begin + CQ_FILE - lo))


# ---- the property ---------------------------------------------------------------------------------

_put = st.builds(Put, st.sampled_from(TOPICS), st.integers(0, QUEUES - 1), st.integers(0, 300), st.integers(1, 12))
# 4 puts : 1 flush : 1 checkpoint; often two checkpoints some puts apart after them (the checkpoint
# offsets are those durable 3 s earlier: the second one vouches for what the first flushed); then
# puts a power loss may take.
ops_strategy = st.builds(lambda body, n, between, tail: body + [Checkpoint()] * n + between + [Checkpoint()] * n + tail,
                         st.lists(st.one_of(_put, _put, _put, _put, st.just(Flush()), st.just(Checkpoint())),
                                  min_size=2, max_size=30),
                         st.sampled_from([1, 1, 0]),
                         st.lists(_put, min_size=1, max_size=3),
                         st.lists(_put, min_size=1, max_size=4))


@dataclass(frozen=True)
class Damage:
    """How the crash treats what was not flushed; seeds are mapped onto the layout the child wrote."""

    mode: str  # keep | cut | garble: the commit log's tail
    drop_files: bool  # cut: files wholly past the durable offset are gone, not zeroed
    record_seed: int  # garble: which non-durable record is hit first
    where: str  # garble: the damage starts at that record's first byte | in its body | at any of its bytes
    byte_seed: int
    noise: bytes  # garble: XORed over the bytes, so its length is the damage's length
    cq_mode: str  # keep | tail | all: the consume queues' unflushed units
    cq_lost_units: int
    checkpoint: str  # keep | zero | delete


damage_strategy = st.builds(
    Damage,
    mode=st.sampled_from(["garble", "cut", "keep"]),
    drop_files=st.booleans(),
    record_seed=st.integers(0, 2**16),
    where=st.sampled_from(["start", "body", "anywhere"]),
    byte_seed=st.integers(0, 2**16),
    noise=st.binary(min_size=1, max_size=600),
    cq_mode=st.sampled_from(["tail", "keep", "all"]),
    cq_lost_units=st.integers(1, 12),
    checkpoint=st.sampled_from(["keep", "keep", "keep", "zero", "delete"]),
)


def apply_damage(root: Path, file_size: int, child: ChildResult, d: Damage) -> int:
    """Leave on disk what the crash could have; return how many messages must then be recovered."""
    written, durable = child.written, child.durable
    n_durable = sum(1 for w in written if w.end <= durable)
    expected = len(written)
    if d.mode == "cut":
        cut_commit_log(root, file_size, durable, d.drop_files)
        expected = n_durable
    elif d.mode == "garble" and n_durable < len(written):
        j = n_durable + d.record_seed % (len(written) - n_durable)
        w = written[j]
        if d.where == "body" and w.body_size:
            start = w.phys + BODY_POS + d.byte_seed % w.body_size
        elif d.where == "anywhere":
            start = w.phys + d.byte_seed % w.size
        else:
            start = w.phys
        length = min(len(d.noise), file_size - start % file_size)
        with open(root / "commitlog" / f"{start - start % file_size:020d}", "rb") as f:
            f.seek(start % file_size)
            old = f.read(length)
        # XOR with non-zero bytes: every damaged byte really changes.
        _overwrite(root, file_size, start, bytes(a ^ (b or 0x5A) for a, b in zip(old, d.noise, strict=False)))
        expected = j
    _physic, logics, _index = read_checkpoint(root)
    vouched_ts = logics - 3000 if logics > 0 else -1  # StoreCheckpoint.getMinTimestamp's margin
    if d.cq_mode == "all" and vouched_ts < 0 and not any(child.cq_flushed.values()):
        shutil.rmtree(root / "consumequeue", ignore_errors=True)  # nothing flushed: maybe not even created
    elif d.cq_mode != "keep":
        cut_consume_queues(root, child, d.cq_lost_units if d.cq_mode == "tail" else None, vouched_ts)
    if d.checkpoint == "delete":
        (root / "checkpoint").unlink(missing_ok=True)
    elif d.checkpoint == "zero":
        (root / "checkpoint").write_bytes(bytes(4096))
    return expected


def recovery_start(root: Path, file_size: int, written: list[Written], index_safe: bool) -> str:
    """For statistics only: where abnormal recovery will start re-dispatching, by the checkpoint."""
    physic, logics, index = read_checkpoint(root)
    raw = (root / "checkpoint").read_bytes() if (root / "checkpoint").exists() else b""
    offsets = struct.unpack_from(">qq", raw, 40) if len(raw) >= 56 else (0, 0)
    if not index_safe and min(offsets) > 0:
        return "past offset 0 (checkpoint offsets)"
    min_ts = max(0, min(physic, logics) - 3000)
    if index_safe:
        min_ts = min(min_ts, index)
    if any(w.phys % file_size == 0 and w.phys > 0 and w.store_timestamp <= min_ts for w in written):
        return "past the first file (checkpoint time)"
    return "at offset 0"


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
    "clock_step_ms": st.sampled_from([2500, 1000, 0]),
    "index_safe": st.booleans(),
    "damage": damage_strategy,
    "probe_seeds": st.tuples(st.integers(0, 7), st.integers(0, 7)),
}


_LONG_RUN: list[Op] = [Put("TopicA", 0, 150, 20), Checkpoint(), Put("TopicB", 1, 10, 3), Checkpoint(),
                       Put("TopicB", 1, 10, 2), Put("TopicA", 0, 50, 3)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**RECOVERY_STRATEGIES)
# Always run: recovery from the checkpoint's offsets, then from its time (messageIndexSafe).
@example(file_size=2048, flush=FlushDiskType.ASYNC_FLUSH, ops=_LONG_RUN, wait_dispatch=True, clock_step_ms=2500,
         index_safe=False, damage=Damage("cut", False, 0, "start", 0, b"\0", "all", 0, "keep"), probe_seeds=(0, 0))
@example(file_size=2048, flush=FlushDiskType.SYNC_FLUSH, ops=_LONG_RUN, wait_dispatch=False, clock_step_ms=2500,
         index_safe=True, probe_seeds=(0, 0),
         damage=Damage("garble", False, 1, "body", 7, b"\1" * 9, "tail", 3, "keep"))
# One byte of the last record's properties: only the whole-record CRC sees it.
@example(ops=[Put("t0", 0, 40, 3)], flush=FlushDiskType.ASYNC_FLUSH, file_size=1024, wait_dispatch=False,
         clock_step_ms=0, index_safe=False, probe_seeds=(0, 0),
         damage=Damage("garble", False, 2, "anywhere", 40 + 91 + 2, b"\xff", "keep", 0, "keep"))
def test_recovery_keeps_a_prefix_covering_everything_durable(
    file_size: int, flush: FlushDiskType, ops: list[Op], wait_dispatch: bool, clock_step_ms: int,
    index_safe: bool, damage: Damage, probe_seeds: tuple[int, int],
) -> None:
    with tempfile.TemporaryDirectory(prefix="recovery-prop-") as tmp:
        cfg = store_config(Path(tmp) / "store", file_size, flush, index_safe)
        child = run_child(quiet_flushers(cfg), ops, wait_dispatch, clock_step_ms)
        expected_k = apply_damage(cfg.store_path_root_dir, file_size, child, damage)
        event(f"{damage.mode}: {'nothing lost' if expected_k == len(child.written) else 'messages lost'}")
        event(f"recovery starts {recovery_start(cfg.store_path_root_dir, file_size, child.written, index_safe)}")
        recover_and_check(store_config(cfg.store_path_root_dir, file_size, flush, index_safe), child, expected_k,
                          probe_seeds)


def test_thorough_queue_flush_leaves_no_unit_in_memory() -> None:
    """The round that writes the checkpoint flushes every queue whole, not one file of each.

    The checkpoint it writes covers every unit dispatched before the round; with TopicA/0 three files
    (20 units of 8 per file) behind, RocketMQ's single flush try per queue left two of them in memory.
    """
    with tempfile.TemporaryDirectory(prefix="recovery-thorough-") as tmp:
        cfg = quiet_flushers(store_config(Path(tmp) / "store", 2048, FlushDiskType.ASYNC_FLUSH, False))
        store = MessageStore(cfg)
        assert store.load()
        store.start()
        try:
            for i in range(20):
                msg = MessageExtBrokerInner("TopicA", body_of(i, 10), 0, properties={"KEYS": key_of(i)})
                r = store.put_message(msg)
                assert r.status is PutMessageStatus.PUT_OK
            deadline = time.monotonic() + 10
            while store.dispatch_behind_bytes() > 0 and time.monotonic() < deadline:
                time.sleep(0.001)
            cq = store.find_consume_queue("TopicA", 0, create=False)
            assert cq is not None and len(cq.mapped_file_queue.mapped_files) == 3
            store.flush_cq_service.do_flush(1)  # a thorough round (thorough interval 0)
            assert cq.mapped_file_queue.flushed_where == cq.mapped_file_queue.get_max_offset() == 20 * 20
        finally:
            store.shutdown()


def test_power_loss_keeps_the_consume_queue_of_a_quiet_queue() -> None:
    """Real clock, RocketMQ's flush intervals: a quiet queue's units must survive a power loss.

    RocketMQ 4.9.8 loses them: dispatch advances logicsMsgTimestamp in memory for every unit, and any
    checkpoint flush (here the index flush thread's) persists it while the quiet queue's units are not
    yet flushed, so recovery starts past them. The store keeps the dispatched time apart and persists
    it only after a full consume-queue flush (checkpoint.py), which this test pins.

    After the queue flusher's first round (thorough, like RocketMQ's: lastFlushTimestamp starts at 0),
    TopicA/0 takes 3 messages and TopicB/1 enough to roll the commit log; 3.5 s later TopicB/1 fills
    an index file, whose flush writes the checkpoint. The power then fails: consume-queue units that
    were never flushed are lost; the commit log (SYNC_FLUSH) is whole.
    """
    with tempfile.TemporaryDirectory(prefix="recovery-quiet-") as tmp:
        cfg = store_config(Path(tmp) / "store", 2048, FlushDiskType.SYNC_FLUSH, False)
        ops: list[Op] = [Pause(1.5), Put("TopicA", 0, 100, 3), Put("TopicB", 1, 300, 6), Pause(3.5),
                         Put("TopicB", 1, 300, 16), Pause(0.3)]
        child = run_child(cfg, ops, True, 0)
        assert child.cq_flushed.get("TopicA/0", 0) == 0, "the quiet queue was flushed after all"
        # The index flush wrote the checkpoint; its logics time must not cover the quiet queue's units.
        quiet_since = min(w.store_timestamp for w in child.written if w.topic == "TopicA")
        assert read_checkpoint(cfg.store_path_root_dir)[1] < quiet_since, "logics time persisted before its units"
        cut_consume_queues(cfg.store_path_root_dir, child, None, -1)  # the power loss: unflushed units are gone
        recover_and_check(store_config(cfg.store_path_root_dir, 2048, FlushDiskType.SYNC_FLUSH, False), child,
                          len(child.written), (0, 0))


def recover_and_check(cfg: MessageStoreConfig, child: ChildResult, expected_k: int,
                      probe_seeds: tuple[int, int]) -> None:
    """Abnormal recovery, invariants (a)-(f), then a normal restart that must keep the same log."""
    written = child.written
    assert (cfg.store_path_root_dir / "abort").exists(), "the child's store did not create abort"
    n_durable = sum(1 for w in written if w.end <= child.durable)
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
            if cfg.message_index_enable:  # (f) every recovered message is found by its key, messageIndexSafe
                # or not: the index is cut back to its safe point and the replay rebuilds the rest.
                # A set: like RocketMQ (buildIndex skips offsets *below* the file's endPhyOffset), recovery
                # indexes the safe point's last message again, so a query can return it twice.
                found = store.query_message(m.topic, m.keys, 64, 0, 2**62)
                assert {x.commit_log_offset for x in found} == {m.commit_log_offset}, m.keys
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
