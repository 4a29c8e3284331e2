"""The loss checker: Jepsen's total-queue accounting over a run's events, plus per-queue order rules.

Every message carries a unique key; a key's fate is read from its send rows, its accepted receive rows
(receive outcome "ok"; a "fail" receive is a delivery the listener declined, which will come again) and its
final-read rows (op "read": the harness read the message back from the broker at the end of the run, by the
position its send was acknowledged at; ``harness.final_read``). Per key:

==================  =====================================================================================
attempted           has at least one send row
acknowledged        has a send with outcome "ok"
failed              every send has outcome "fail"
unknown             attempted, not acknowledged, not failed (a timeout or a lost connection: maybe stored)
lost                acknowledged, never received, not found by the final read  -> invalid (unless allow_loss)
unread              acknowledged, never received, found by the final read: stored and served at the end, but
                    no consumer got it within the run (a consumer that fell behind, not a loss)
unexpected          received or read, never attempted                     -> invalid
acked_master_only   acknowledged, and every ok send was answered FLUSH_SLAVE_TIMEOUT (12) or SLAVE_NOT_AVAILABLE
                    (11): the master stored it (counted acknowledged, may be lost like any other) but it was
                    never promised on a slave (CommitLog.handleHA, 4.9.8: a SYNC_MASTER answers these when its
                    slave did not acknowledge in time or is absent or too far behind)
lost_promised       lost, with at least one ok send answered plain SEND_OK (0): under SYNC_MASTER that answer
                    came after a slave acknowledged the record, so a group that still has its slave must not
                    lose it even when the master's disk is destroyed. Always <= lost; ``lost`` stays the verdict
                    (a run whose loss is allowed, an ASYNC_MASTER's, reads this one beside it)
recovered           unknown, and received or read (the send did store it)
recovered_failed    failed, and received or read
duplicated          received more often than it could have been stored: more than max(1, number of sends
                    with outcome ok or unknown). Each send row counts, so a workload-level retry of the same
                    key is another possible copy; a client-internal retry inside one send call is not (one
                    row). Duplicates do not invalidate a run (at-least-once delivery).
==================  =====================================================================================

Transactional messages (keys with "tx" rows: the local decisions, op "tx", outcome ok = COMMIT_MESSAGE, fail
= ROLLBACK_MESSAGE, unknown = UNKNOW; the send row is the half message). A key is *committed* once any of its
decisions is a commit, *rolled back* when one is a rollback and none a commit, *unresolved* when every decision
was UNKNOW. The atomicity rule: only a committed transaction may be delivered.

==================  =====================================================================================
tx_committed        a transactional key committed; its acknowledged half message is "acknowledged" above, so a
                    committed message never received nor read is lost (at-least-once delivery holds for it)
tx_rolled_back      rolled back; like tx_unresolved, not acknowledged: it may never be delivered, and its
                    absence is no loss
tx_unresolved       every decision UNKNOW (never resolved by a check-back)
tx_leaked           received or read, and not committed: the atomicity rule broken             -> invalid
==================  =====================================================================================

Departures from Jepsen ``total-queue`` (checker.clj), deliberate:

- Copies allowed per key: Jepsen counts deliveries beyond the number of attempted enqueues as duplicates; here
  they are counted beyond the sends that may have stored the message (outcome ok or unknown), at least one.
  So, as in Jepsen, a received unknown-outcome send is ``recovered`` and its delivery is no duplicate (OpenChaos
  counts it as one, the mistake avoided here); unknown outcomes are never lost.
- A "fail" send that is nevertheless received is ``recovered_failed``, not ``unexpected``: a fail can still
  have stored the message; e.g. the RocketMQ producer's internal retries (retryTimesWhenSendFailed), where an
  earlier attempt timed out after the broker stored it and the last attempt was refused. It is worth a look in
  a report, not a bug in the store, so it does not invalidate the run. (SendStatus FLUSH_DISK_TIMEOUT,
  FLUSH_SLAVE_TIMEOUT and SLAVE_NOT_AVAILABLE are "ok" with their response codes: the master stored it. Every
  sender classifies its sends by one rule, ``harness.send_outcome``, so these counts do not depend on who sent.)
- ``duplicated`` counts keys; ``duplicate_deliveries`` counts the surplus deliveries. Final-read rows are
  never deliveries: they count for nothing but lost / unread, recovered and unexpected.
- Jepsen's final drain dequeues everything left and its dequeues join the history as ordinary ones, so a
  message only the drain saw counts as received. Here the final read is told apart (``unread``): a run whose
  consumers never caught up stays visible as such, without calling stored messages lost.

Ordered runs (``ordered=True``, from meta.json ``params.ordered`` in ``check_run``) are also invalid on any
order violation; order is always counted (rules in harness.ordering) but otherwise only reported.
"""

# pyarrow ships no type information; its names are Any here.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from harness.ordering import FirstAcks, Receives, ack_order_violations, offset_violations
from harness.records.reader import RunRecordError, load_events, load_meta
from harness.records.run import write_json_atomic
from harness.records.schema import CHECK_FILE, EVENTS_FULL_SCHEMA, SCHEMA_VERSION, Op
from harness.records.validate import validate_run

I64 = npt.NDArray[np.int64]
Bool = npt.NDArray[np.bool_]

CHECK_COLUMNS = ["op", "key", "topic", "queue_id", "queue_offset", "start_ns", "end_ns", "outcome", "code",
                 "bytes", "worker", "session"]
# Response codes of an acknowledgement the master gave without a slave's (ResponseCode, 4.9.8).
MASTER_ONLY_CODES: Final = (11, 12)  # SLAVE_NOT_AVAILABLE, FLUSH_SLAVE_TIMEOUT
SEND_OK_CODE: Final = 0
# Defaults for hand-built histories that leave columns out (tests, other tools' adapters). A missing code is
# SEND_OK's, so such a history's ok sends are promised ones and its ``lost_promised`` equals ``lost``.
_DEFAULTS: dict[str, tuple[pa.DataType, object]] = {
    "topic": (pa.string(), ""), "queue_id": (pa.int32(), -1), "queue_offset": (pa.int64(), -1),
    "start_ns": (pa.int64(), 0), "end_ns": (pa.int64(), 0), "outcome": (pa.string(), "ok"),
    "code": (pa.int32(), SEND_OK_CODE), "bytes": (pa.int32(), 0), "worker": (pa.string(), ""),
    "session": (pa.string(), ""),
}
SAMPLE_SIZE = 20


class Category(StrEnum):
    """The named key sets of a check (keys of ``CheckResult.samples``)."""

    LOST = "lost"
    UNREAD = "unread"
    UNEXPECTED = "unexpected"
    DUPLICATED = "duplicated"
    RECOVERED = "recovered"
    RECOVERED_FAILED = "recovered_failed"
    FAILED = "failed"
    UNKNOWN = "unknown"
    ORDER = "order"
    ACKED_MASTER_ONLY = "acked_master_only"
    LOST_PROMISED = "lost_promised"
    TX_LEAKED = "tx_leaked"


class InvalidRunError(RunRecordError):
    """The run directory does not validate, so it cannot be checked."""

    def __init__(self, run_dir: Path, problems: list[str]) -> None:
        super().__init__(f"{run_dir}: not a valid run record:\n  " + "\n  ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class CheckResult:
    attempted: int
    acknowledged: int
    failed: int
    unknown: int
    lost: int
    lost_bytes: int
    unexpected: int
    duplicated: int
    recovered: int
    order_violations: dict[str, int]
    samples: dict[str, list[str]]
    allow_loss: bool
    # Optional fields beyond the v1 check.json contract.
    recovered_failed: int = 0
    duplicate_deliveries: int = 0
    sends: int = 0
    receives: int = 0
    declined_receives: int = 0
    ordered: bool = False
    run_id: str | None = None
    unread: int = 0
    reads: int = 0
    acked_master_only: int = 0
    lost_promised: int = 0
    tx_committed: int = 0
    tx_rolled_back: int = 0
    tx_unresolved: int = 0
    tx_leaked: int = 0

    @property
    def order_violation_count(self) -> int:
        return sum(self.order_violations.values())

    @property
    def valid(self) -> bool:
        return ((self.lost == 0 or self.allow_loss) and self.unexpected == 0 and self.tx_leaked == 0
                and not (self.ordered and self.order_violation_count))

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, **asdict(self), "valid": self.valid}


def _as_table(events: pa.Table | Mapping[str, Sequence[Any]] | Sequence[Mapping[str, Any]]) -> pa.Table:
    if isinstance(events, pa.Table):
        table = events
    elif isinstance(events, Mapping):
        table = pa.table(dict(events))
    else:
        rows = list(events)
        names = list(dict.fromkeys(name for row in rows for name in row))  # Table.from_pylist reads row 0 only
        table = (pa.table({n: [row.get(n) for row in rows] for n in names}) if rows
                 else EVENTS_FULL_SCHEMA.empty_table())
    for name in ("op", "key"):
        if name not in table.column_names or table[name].null_count:
            raise ValueError(f"every event needs an {name!r}")
    for name, (typ, default) in _DEFAULTS.items():
        fill = pa.scalar(default, typ)
        if name not in table.column_names:
            table = table.append_column(name, pa.repeat(fill, table.num_rows))
        elif table[name].null_count:  # row dicts that leave a field out
            table = table.set_column(table.schema.get_field_index(name), name, table[name].fill_null(fill))
    return table


def _codes(column: pa.ChunkedArray | pa.Array) -> tuple[I64, pa.Array]:
    """Dictionary codes (int64 numpy) and the dictionary of a string column."""
    if isinstance(column, pa.ChunkedArray):
        # One array first: encoding chunk by chunk hands every chunk a copy of the whole dictionary.
        if column.nbytes >= 2**31 - 1:
            column = column.cast(pa.large_string())
        column = column.combine_chunks()
    encoded = pc.dictionary_encode(column)
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    return codes.astype(np.int64, copy=False), encoded.dictionary


def _np(column: pa.ChunkedArray) -> npt.NDArray[Any]:
    return np.asarray(column.to_numpy())


def _is(column: pa.ChunkedArray, value: str) -> npt.NDArray[np.bool_]:
    return np.asarray(pc.equal(column, value).to_numpy(zero_copy_only=False), np.bool_)


@dataclass(frozen=True)
class _Fates:
    """Per key code, the sets of the module docstring as boolean masks; plus surplus deliveries and lost bytes."""

    attempted: Bool
    acknowledged: Bool
    failed: Bool
    unknown: Bool
    lost: Bool
    unread: Bool
    unexpected: Bool
    duplicated: Bool
    recovered: Bool
    recovered_failed: Bool
    acked_master_only: Bool
    lost_promised: Bool
    surplus: I64  # deliveries beyond the copies a key may have
    lost_bytes: int


def _fates(key: I64, n_keys: int, send: Bool, ok_send: Bool, fail_send: Bool, accepted: Bool, read: Bool,
           nbytes: npt.NDArray[Any], code: I64) -> _Fates:
    n_send = np.bincount(key[send], minlength=n_keys)
    n_ok = np.bincount(key[ok_send], minlength=n_keys)
    n_master_only = np.bincount(key[ok_send & np.isin(code, MASTER_ONLY_CODES)], minlength=n_keys)
    n_promised = np.bincount(key[ok_send & (code == SEND_OK_CODE)], minlength=n_keys)
    n_fail = np.bincount(key[fail_send], minlength=n_keys)
    n_recv = np.bincount(key[accepted], minlength=n_keys)
    attempted = n_send > 0
    acked = n_ok > 0
    failed = attempted & (n_fail == n_send)
    unknown = attempted & ~acked & ~failed
    received = n_recv > 0
    stored = received | (np.bincount(key[read], minlength=n_keys) > 0)
    lost = acked & ~stored
    copies = np.maximum(n_send - n_fail, 1)  # sends that may have stored the key: ok or unknown
    duplicated = attempted & (n_recv > copies)
    lost_bytes = 0
    if lost.any():
        # Retries of one key carry one body, so the mean size of its ok sends is that body's size.
        ok_bytes = np.bincount(key[ok_send], weights=nbytes[ok_send], minlength=n_keys)
        lost_bytes = round(float(np.sum(ok_bytes[lost] / n_ok[lost])))
    return _Fates(attempted=attempted, acknowledged=acked, failed=failed, unknown=unknown, lost=lost,
                  unread=acked & ~received & stored, unexpected=~attempted & stored, duplicated=duplicated,
                  recovered=unknown & stored, recovered_failed=failed & stored,
                  acked_master_only=acked & (n_master_only == n_ok), lost_promised=lost & (n_promised > 0),
                  surplus=np.where(duplicated, n_recv - copies, 0), lost_bytes=lost_bytes)


def _first_acks(codes: I64, ok_send: Bool, worker: I64, topic: I64, queue_id: I64, start_ns: I64, end_ns: I64,
                n_keys: int) -> FirstAcks:
    """Per key: the ok send acknowledged first; all -1 for keys without one or whose queue is unknown."""
    idx = np.flatnonzero(ok_send)
    if len(idx) and np.bincount(codes[idx]).max() > 1:  # a key acknowledged more than once: keep the first ack
        order = idx[np.lexsort((end_ns[idx], codes[idx]))]
        first = np.ones(len(order), np.bool_)
        first[1:] = codes[order][1:] != codes[order][:-1]
        idx = order[first]
    idx = idx[queue_id[idx] >= 0]
    arrays = []
    for src in (worker, topic, queue_id, start_ns, end_ns):
        a = np.full(n_keys, -1, np.int64)
        a[codes[idx]] = src[idx]
        arrays.append(a)
    return FirstAcks(*arrays)


def _order(table: pa.Table, key: I64, n_keys: int, ok_send: Bool, accepted: Bool) -> tuple[dict[str, int], I64]:
    """Order violations per "topic/queue" and the codes of the keys delivered late (rules in harness.ordering)."""
    worker, _ = _codes(table["worker"])
    session, sessions = _codes(table["session"])
    topic, topics = _codes(table["topic"])
    queue_id = _np(table["queue_id"]).astype(np.int64)
    end_ns = _np(table["end_ns"])
    first = _first_acks(key, ok_send, worker, topic, queue_id, _np(table["start_ns"]), end_ns, n_keys)
    rx = Receives(key=key[accepted], session=(worker * max(1, len(sessions)) + session)[accepted],
                  topic=topic[accepted], queue_id=queue_id[accepted],
                  queue_offset=_np(table["queue_offset"])[accepted], end_ns=end_ns[accepted])
    late = offset_violations(rx) | ack_order_violations(rx, first)
    return _order_summary(late, rx, first, topics.to_pylist())


def check_events(events: pa.Table | Mapping[str, Sequence[Any]] | Sequence[Mapping[str, Any]], *,
                 allow_loss: bool = False, ordered: bool = False, sample_size: int = SAMPLE_SIZE) -> CheckResult:
    """Check a history: an events table (``EVENTS_FULL_SCHEMA`` or a subset with at least op and key), a dict of
    columns, or a list of row dicts. Pure: reads nothing, writes nothing."""
    table = _as_table(events)
    send, receive = _is(table["op"], Op.SEND), _is(table["op"], Op.RECEIVE)
    ok, fail = _is(table["outcome"], "ok"), _is(table["outcome"], "fail")
    accepted, read = receive & ok, _is(table["op"], Op.READ) & ok
    key, keys = _codes(table["key"])
    t = _transactions(key, len(keys), _is(table["op"], Op.TX), ok, fail, accepted | read)
    if t is not None:  # the rows of transactions not committed are judged by the atomicity rule only
        kept = ~t.uncommitted[key]
        send, accepted, read = send & kept, accepted & kept, read & kept
    f = _fates(key, len(keys), send, send & ok, send & fail, accepted, read, _np(table["bytes"]),
               _np(table["code"]).astype(np.int64))
    order_violations, late_keys = _order(table, key, len(keys), send & ok, accepted)

    def sample(codes: I64) -> list[str]:
        return sorted(keys.take(pa.array(codes[:sample_size])).to_pylist())

    named = {Category.LOST: f.lost, Category.UNREAD: f.unread, Category.UNEXPECTED: f.unexpected,
             Category.DUPLICATED: f.duplicated, Category.RECOVERED: f.recovered,
             Category.RECOVERED_FAILED: f.recovered_failed, Category.FAILED: f.failed, Category.UNKNOWN: f.unknown,
             Category.ACKED_MASTER_ONLY: f.acked_master_only, Category.LOST_PROMISED: f.lost_promised}
    if t is not None:
        named[Category.TX_LEAKED] = t.leaked
    samples = {str(c): sample(np.flatnonzero(m)) for c, m in named.items() if m.any()}
    if len(late_keys):
        samples[Category.ORDER] = sample(late_keys)
    result = CheckResult(
        attempted=int(f.attempted.sum()), acknowledged=int(f.acknowledged.sum()), failed=int(f.failed.sum()),
        unknown=int(f.unknown.sum()), lost=int(f.lost.sum()), lost_bytes=f.lost_bytes,
        unexpected=int(f.unexpected.sum()), duplicated=int(f.duplicated.sum()), recovered=int(f.recovered.sum()),
        order_violations=order_violations, samples=samples, allow_loss=allow_loss,
        recovered_failed=int(f.recovered_failed.sum()), duplicate_deliveries=int(f.surplus.sum()),
        sends=int(send.sum()), receives=int(accepted.sum()), declined_receives=int((receive & ~ok).sum()),
        ordered=ordered, unread=int(f.unread.sum()), reads=int(read.sum()),
        acked_master_only=int(f.acked_master_only.sum()), lost_promised=int(f.lost_promised.sum()))
    if t is None:
        return result
    return replace(result, tx_committed=int(t.committed.sum()), tx_rolled_back=int(t.rolled_back.sum()),
                   tx_unresolved=int(t.unresolved.sum()), tx_leaked=int(t.leaked.sum()))


@dataclass(frozen=True)
class _Transactions:
    """Per key code, the transactional sets of the module docstring."""

    committed: Bool
    rolled_back: Bool
    unresolved: Bool
    leaked: Bool

    @property
    def uncommitted(self) -> Bool:
        return self.rolled_back | self.unresolved


def _transactions(key: I64, n_keys: int, tx: Bool, ok: Bool, fail: Bool, delivered: Bool) -> _Transactions | None:
    """The atomicity rule's sets, or None for a history without transactions."""
    if not tx.any():
        return None
    transactional = np.bincount(key[tx], minlength=n_keys) > 0
    commit = np.bincount(key[tx & ok], minlength=n_keys) > 0
    rollback = np.bincount(key[tx & fail], minlength=n_keys) > 0
    stored = np.bincount(key[delivered], minlength=n_keys) > 0
    uncommitted = transactional & ~commit
    return _Transactions(committed=transactional & commit, rolled_back=uncommitted & rollback,
                         unresolved=uncommitted & ~rollback, leaked=uncommitted & stored)


def _order_summary(late: Bool, rx: Receives, first: FirstAcks, topics: list[str]) -> tuple[dict[str, int], I64]:
    """Violations per "topic/queue" (the receive's queue, else the acknowledged send's) and the late keys."""
    idx = np.flatnonzero(late)
    if len(idx) == 0:
        return {}, np.zeros(0, np.int64)
    keys = rx.key[idx]
    known = rx.queue_id[idx] >= 0
    queue = np.where(known, rx.queue_id[idx], first.queue_id[keys])
    topic = np.where(known, rx.topic[idx], first.topic[keys])
    pairs, counts = np.unique(np.stack([topic, queue], axis=1), axis=0, return_counts=True)
    summary = {f"{topics[t]}/{q}": int(n) for (t, q), n in zip(pairs.tolist(), counts.tolist(), strict=True)}
    return summary, np.unique(keys)


def check_run(run_dir: str | os.PathLike[str], allow_loss: bool = False, ordered: bool | None = None,
              sample_size: int = SAMPLE_SIZE) -> CheckResult:
    """Validate ``run_dir``, check its events, write ``check.json``; ``ordered`` None = meta params.ordered.

    Raises ``InvalidRunError`` (a ``RunRecordError``) when the directory is not a valid run record.
    """
    root = Path(run_dir)
    problems = validate_run(root, include_check=False)
    if problems:
        raise InvalidRunError(root, problems)
    meta = load_meta(root)
    if ordered is None:
        ordered = bool(meta.get("params", {}).get("ordered", False))
    events = load_events(root, columns=CHECK_COLUMNS)
    result = check_events(events, allow_loss=allow_loss, ordered=ordered, sample_size=sample_size)
    result = replace(result, run_id=meta.get("run_id"))
    write_json_atomic(root / CHECK_FILE, result.to_json())
    return result
