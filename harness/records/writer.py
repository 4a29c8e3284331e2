"""Event and metric writers: cheap per-row recording, batched conversion to Arrow, Parquet (or JSONL) files.

Recording a row is one tuple built and one ``list.append`` (atomic under the GIL, so any thread may record
without a lock). Every ``rows_per_file`` rows the buffer is converted to Arrow and written as one Parquet file
of one row group, published under its final name only when complete (write to a hidden temporary, then
hard-link), so a reader or a crash never sees half a file, and an existing file is never overwritten.

The event writer converts and writes on a background OS thread, so a batch does not show up as one long stall
in the very latencies being recorded: the Parquet encode releases the GIL and runs on the other core, and the
conversion from Python tuples (which holds the GIL) goes in slices of ``_SLICE_ROWS``, letting the recording
thread in between at the interpreter's switch interval. On the 2-core VM, 400k sends of 64k-row batches: the
longest single ``record_send`` was ~20 ms with the flusher, ~60 ms inline; the mean cost was the same, ~1.1 us
(the conversion is paid by the process either way). Under gevent's monkey patching ``threading`` makes
greenlets, so the original ``_thread`` primitives are used to get a real thread. If the flusher falls behind by
``_MAX_PENDING_BATCHES`` batches, the recording thread writes inline (back-pressure, not unbounded memory).
A batch that fails to convert or write (a bad outcome value, a full disk) is dropped while later batches still
go; ``RecordWriteError`` is raised in the recording thread (at its next full batch) and again at ``close()``, so
a run with missing events cannot finish as if complete.
"""

# pyarrow and gevent ship no type information; their names are Any here.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

import atexit
import os
import secrets
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from harness.records.schema import (
    EVENTS_FULL_SCHEMA,
    METRICS_SCHEMA,
    OUTCOMES,
    PART_RE,
    file_safe,
)

_SLICE_ROWS = 4096
_MAX_PENDING_BATCHES = 4

# Tuple layout of a buffered event row: EVENTS_FULL_SCHEMA minus the per-writer constant "worker".
_EVENT_ROW = pa.struct([f for f in EVENTS_FULL_SCHEMA if f.name != "worker"])
_METRIC_ROW = pa.struct(list(METRICS_SCHEMA))
METRIC_DICTIONARY_COLUMNS = ["metric", "label"]
EVENT_DICTIONARY_COLUMNS = ["op", "topic", "outcome", "worker", "session"]


class RecordWriteError(RuntimeError):
    """A buffered batch could not be converted or written (raised in the recording thread or at close)."""


class _Sink(Protocol):
    def write(self, table: pa.Table) -> None: ...


class ParquetPartSink:
    """Writes ``<dir>/part-<name>-<n>.parquet``, n counting up from past the highest existing one."""

    def __init__(self, directory: Path, name: str, dictionary_columns: Sequence[str]) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.name = file_safe(name)
        self._dict_columns = list(dictionary_columns)
        taken = [int(m["n"]) for p in directory.iterdir()
                 if (m := PART_RE.fullmatch(p.name)) and m["name"] == self.name]
        self._next = max(taken, default=-1) + 1

    def write(self, table: pa.Table) -> None:
        tmp = self.directory / f".tmp-part-{self.name}-{os.getpid()}-{secrets.token_hex(6)}.parquet"
        pq.write_table(table, tmp, compression="zstd", row_group_size=max(1, table.num_rows),
                       use_dictionary=[c for c in self._dict_columns if c in table.column_names])
        try:
            while True:
                try:
                    os.link(tmp, self.directory / f"part-{self.name}-{self._next:06d}.parquet")
                    break
                except FileExistsError:  # another process writes under the same name: take the next n
                    self._next += 1
        finally:
            tmp.unlink()
        self._next += 1


class JsonlSink:
    """Appends one JSON object per row to a file; one ``write(2)`` per batch with O_APPEND."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path

    def write(self, table: pa.Table) -> None:
        data = b"".join(orjson.dumps(row) + b"\n" for row in table.to_pylist())
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)


def _native_thread_api() -> tuple[Callable[..., Any], Callable[[], Any]]:
    """(start_new_thread, allocate_lock) of real OS threads, even when gevent has patched ``_thread``."""
    import _thread

    if "gevent.monkey" in sys.modules:
        from gevent import monkey

        if monkey.is_module_patched("_thread"):
            return monkey.get_original("_thread", "start_new_thread"), monkey.get_original("_thread",
                                                                                            "allocate_lock")
    return _thread.start_new_thread, _thread.allocate_lock


class _Flusher:
    """A real OS thread running ``work`` each time it is poked, and once more when stopped."""

    def __init__(self, work: Callable[[], None]) -> None:
        start_new_thread, allocate_lock = _native_thread_api()
        self._work = work
        self._wake = allocate_lock()
        self._wake.acquire()
        self._done = allocate_lock()
        self._done.acquire()
        self._stop = False
        self.error: BaseException | None = None
        start_new_thread(self._run, ())

    def poke(self) -> None:
        if not self._wake.locked():  # already poked and not yet woken (the common case while a batch waits)
            return
        try:
            self._wake.release()
        except RuntimeError:  # lost a race with another poke
            pass

    def _run(self) -> None:
        try:
            while True:
                self._wake.acquire()
                stop = self._stop
                self._work()
                if stop:
                    break
        except BaseException as e:  # noqa: BLE001 - the recording thread's top: surfaced by close()
            self.error = e
        finally:
            self._done.release()

    def stop(self) -> None:
        self._stop = True
        self.poke()
        self._done.acquire()


class _RowBuffer:
    """Rows appended by any thread; drained ``batch`` rows at a time into ``sink`` by one drainer at a time."""

    def __init__(self, to_table: Callable[[list[tuple[Any, ...]]], pa.Table], sink: _Sink, batch: int,
                 background: bool) -> None:
        if batch < 1:
            raise ValueError("rows_per_file must be >= 1")
        self.rows: list[tuple[Any, ...]] = []
        self.batch = batch
        self._to_table = to_table
        self._sink = sink
        self._drain_lock = _native_thread_api()[1]()
        self.error: RecordWriteError | None = None  # the first batch ever dropped
        self._unreported: RecordWriteError | None = None  # a flusher failure the recorder has not heard of
        self._flusher = _Flusher(self._background_drain) if background else None
        self._pid = os.getpid()
        self.closed = False
        self.rows_written = 0
        atexit.register(self.close)

    def full(self) -> None:
        """Called by the recorder when ``len(rows) >= batch``."""
        self._same_process()
        flusher = self._flusher
        if flusher is None or len(self.rows) >= _MAX_PENDING_BATCHES * self.batch:
            self._drain()
        else:
            flusher.poke()
        if flusher is not None and flusher.error is not None:  # the flusher thread itself died
            raise RecordWriteError(f"the writer thread failed: {flusher.error!r}") from flusher.error
        unreported, self._unreported = self._unreported, None
        if unreported is not None:
            raise RecordWriteError(str(unreported)) from unreported

    def _drain(self, final: bool = False) -> None:
        """Write full batches (and with ``final`` the rest); a failed batch is dropped, the others still go,
        and the first failure is raised at the end."""
        error: RecordWriteError | None = None
        with self._drain_lock:
            rows = self.rows
            while rows:
                n = min(len(rows), self.batch)
                if n < self.batch and not final:
                    break
                # Other threads only append, so rows[:n] stays put between the copy and the delete.
                taken = rows[:n]
                del rows[:n]
                try:
                    self._sink.write(self._to_table(taken))
                    self.rows_written += n
                except Exception as e:  # noqa: BLE001 - the sink's boundary: surfaced as RecordWriteError
                    if error is None:
                        error = RecordWriteError(f"writing {n} rows failed, they are dropped: {e}")
                        error.__cause__ = e
        if error is not None:
            self.error = self.error or error
            raise error

    def _background_drain(self) -> None:
        try:
            self._drain()
        except RecordWriteError as e:  # kept in self.error for close(); the recorder hears of it in full()
            self._unreported = e

    def flush(self) -> None:
        """Write everything buffered now (a short last file), in the calling thread."""
        self._same_process()
        self._drain(final=True)

    def _same_process(self) -> None:
        if os.getpid() != self._pid:
            raise RuntimeError("a writer was used in a process forked after its creation: create writers in the "
                               "recording process, after any fork (locust --processes)")

    def close(self) -> None:
        """Stop the flusher and write what is left; raises if any batch was ever dropped, so a run with missing
        events cannot finish as if complete."""
        if self.closed:
            return
        self.closed = True
        atexit.unregister(self.close)
        if os.getpid() != self._pid:
            return  # a forked child's copy: the rows are the parent's to write, and the flusher stayed there
        if self._flusher is not None:
            self._flusher.stop()
            if self._flusher.error is not None:
                raise RecordWriteError(f"the writer thread failed: {self._flusher.error!r}") from self._flusher.error
        try:
            self._drain(final=True)
        except RecordWriteError:
            pass  # recorded in self.error
        if self.error is not None:
            raise RecordWriteError(str(self.error)) from self.error.__cause__


def _closed(_row: tuple[Any, ...]) -> None:
    raise ValueError("record on a closed writer")


def _struct_rows_to_batches(rows: list[tuple[Any, ...]], row_type: pa.StructType) -> pa.Table:
    # Converting in slices bounds how long one C call holds the GIL (see the module docstring).
    batches = [pa.RecordBatch.from_struct_array(pa.array(rows[i:i + _SLICE_ROWS], type=row_type))
               for i in range(0, len(rows), _SLICE_ROWS)]
    return pa.Table.from_batches(batches, schema=pa.schema(list(row_type)))


def _require_no_nulls(t: pa.Table) -> None:
    nulls = [name for name, col in zip(t.column_names, t.columns, strict=True) if col.null_count]
    if nulls:
        raise ValueError(f"None recorded in column(s) {nulls}: every column has a value (-1 or '' when unknown)")


class EventWriter:
    """Buffers one worker's events and writes them under ``events/`` (or appends to ``events.jsonl``).

    Thread-safe for recording. ``close()`` (or the owning ``RunRecord.finish()``) writes the last rows;
    an unclosed writer is closed at interpreter exit. Create writers after any fork: the flusher thread does not
    survive one, so a forked child's copy refuses to write.
    """

    def __init__(self, sink: _Sink, worker: str, rows_per_file: int = 65536, background: bool = True) -> None:
        self.worker = worker
        self._buf = _RowBuffer(self._to_table, sink, rows_per_file, background)
        self._rows = self._buf.rows
        self._append: Callable[[tuple[Any, ...]], None] = self._rows.append
        self._batch = rows_per_file

    def record_send(self, key: str, topic: str, queue_id: int, queue_offset: int, start_ns: int, end_ns: int,
                    outcome: str, code: int = -1, nbytes: int = 0, intended_ns: int = -1) -> None:
        """One send. ``outcome`` is an ``Outcome`` value; ``intended_ns`` -1 means = ``start_ns`` (closed loop)."""
        self._append(("send", key, topic, queue_id, queue_offset, intended_ns, start_ns, end_ns, outcome, code,
                      nbytes, -1, -1, ""))
        if len(self._rows) >= self._batch:
            self._buf.full()

    def record_receive(self, key: str, topic: str, queue_id: int, queue_offset: int, start_ns: int, end_ns: int,
                       born_ns: int = -1, store_ns: int = -1, nbytes: int = 0, outcome: str = "ok", code: int = -1,
                       session: str = "") -> None:
        """One delivery to a consumer. ``outcome`` "fail" = the listener declined it (it will come again)."""
        self._append(("receive", key, topic, queue_id, queue_offset, start_ns, start_ns, end_ns, outcome, code,
                      nbytes, born_ns, store_ns, session))
        if len(self._rows) >= self._batch:
            self._buf.full()

    def record_read(self, key: str, topic: str, queue_id: int, queue_offset: int, start_ns: int, end_ns: int,
                    born_ns: int = -1, store_ns: int = -1, nbytes: int = 0, session: str = "final-read") -> None:
        """A message the harness read back from the broker after the run (``harness.final_read``): stored and
        served, but not a delivery to a consumer."""
        self._append(("read", key, topic, queue_id, queue_offset, start_ns, start_ns, end_ns, "ok", -1, nbytes,
                      born_ns, store_ns, session))
        if len(self._rows) >= self._batch:
            self._buf.full()

    def record_tx(self, key: str, topic: str, decision: str, start_ns: int, end_ns: int, session: str = "") -> None:
        """A transactional message's decision (op "tx"): ``decision`` "ok" COMMIT_MESSAGE, "fail"
        ROLLBACK_MESSAGE, "unknown" UNKNOW; ``session`` says who decided ("local": the local transaction,
        "check": an answer to the broker's check-back)."""
        self._append(("tx", key, topic, -1, -1, start_ns, start_ns, end_ns, decision, -1, 0, -1, -1, session))
        if len(self._rows) >= self._batch:
            self._buf.full()

    def record_ack(self, topic: str, queue_id: int, queue_offset: int, start_ns: int, end_ns: int,
                   outcome: str = "ok", code: int = -1, session: str = "") -> None:
        """An offset commit (``key`` is empty)."""
        self._append(("ack", "", topic, queue_id, queue_offset, start_ns, start_ns, end_ns, outcome, code, 0, -1,
                      -1, session))
        if len(self._rows) >= self._batch:
            self._buf.full()

    @property
    def rows_written(self) -> int:
        return self._buf.rows_written

    def flush(self) -> None:
        self._buf.flush()

    def close(self) -> None:
        if not self._buf.closed:
            self._append = _closed
        self._buf.close()

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _to_table(self, rows: list[tuple[Any, ...]]) -> pa.Table:
        t = _struct_rows_to_batches(rows, _EVENT_ROW)
        _require_no_nulls(t)
        bad = pc.invert(pc.is_in(t["outcome"], value_set=pa.array(sorted(OUTCOMES))))
        if pc.any(bad).as_py():
            values = sorted(set(t["outcome"].filter(bad).to_pylist()), key=str)[:5]
            raise ValueError(f"outcome must be one of {sorted(OUTCOMES)}, got {values}")
        start = t["start_ns"]
        intended = pc.if_else(pc.less(t["intended_ns"], 0), start, t["intended_ns"])
        t = t.set_column(t.schema.get_field_index("intended_ns"), "intended_ns", intended)
        t = t.append_column("worker", pa.repeat(pa.scalar(self.worker, pa.string()), t.num_rows))
        return t.select(EVENTS_FULL_SCHEMA.names).cast(EVENTS_FULL_SCHEMA)


class MetricsWriter:
    """Broker-side samples in long format (``ts_ns, metric, value, label``); written inline, ``rows_per_file``
    at a time, plus whatever is buffered at ``flush()``/``close()``."""

    def __init__(self, sink: _Sink, clock: Callable[[], int], rows_per_file: int = 4096) -> None:
        self._buf = _RowBuffer(self._to_table, sink, rows_per_file, background=False)
        self._clock = clock

    def record(self, metric: str, value: float, label: str = "", ts_ns: int | None = None) -> None:
        """One sample; ``metric`` is a ``MetricName`` value (others are allowed), ``ts_ns`` defaults to now."""
        if self._buf.closed:
            raise ValueError("record on a closed writer")
        self._buf.rows.append((self._clock() if ts_ns is None else ts_ns, metric, float(value), label))
        if len(self._buf.rows) >= self._buf.batch:
            self._buf.full()

    def flush(self) -> None:
        self._buf.flush()

    def close(self) -> None:
        self._buf.close()

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @staticmethod
    def _to_table(rows: list[tuple[Any, ...]]) -> pa.Table:
        t = _struct_rows_to_batches(rows, _METRIC_ROW)
        _require_no_nulls(t)
        return t.cast(METRICS_SCHEMA)
