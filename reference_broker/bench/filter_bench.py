"""``python -m reference_broker bench sql92``: what SQL92 filtering costs the broker per message it looks at —
reading the record's properties (common/record.record_properties) and evaluating a compiled selector
(filter/sql92.py), for a few selectors over one stored 1 KiB record with six properties. Best of several
rounds, in microseconds; both run on the broker's event loop, once per message a filtered pull reads."""

from __future__ import annotations

import timeit
from typing import Final

from reference_broker.common import message as mc
from reference_broker.common.record import prepare_record, record_properties, write_record
from reference_broker.filter.sql92 import compile_selector

SELECTORS: Final = (
    "a > 5",
    "region = 'eu' AND amount > 100 AND TAGS = 'TagA'",
    "TAGS IN ('TagA', 'TagB') OR (region <> 'us' AND amount BETWEEN 10 AND 1000)",
    "amount > 100.5 AND missing IS NULL AND NOT (region IN ('us', 'ap'))",
)
PROPERTIES: Final = {"KEYS": "order-1", "TAGS": "TagA", "WAIT": "true",
                     "UNIQ_KEY": "7F00000100002A9F0000000000000001", "region": "eu", "amount": "250"}


def sample_record(body_size: int = 1024) -> bytes:
    r = prepare_record(b"TopicTest", b"x" * body_size, mc.properties_to_bytes(PROPERTIES), 0, 0, 0, 1, bytes(4), 1,
                       bytes(4), 2)
    out = bytearray(r.size)
    write_record(out, 0, r, 0, 0, 3, False)
    return bytes(out)


def run(number: int = 20_000, repeat: int = 7) -> list[tuple[str, float]]:
    """(what, microseconds per message), best of ``repeat`` rounds of ``number``."""
    raw = sample_record()
    props = record_properties(raw)

    def best(fn: object) -> float:
        return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6  # type: ignore[arg-type]

    rows = [("read the properties (record_properties)", best(lambda: record_properties(raw)))]
    for expr in SELECTORS:
        selector = compile_selector(expr)
        assert isinstance(selector.matches(props), bool)
        rows.append((f"evaluate {expr}", best(lambda s=selector: s.matches(props))))
    return rows


# ---- the FilterServer's sandbox -------------------------------------------------------------------------

FILTER_SOURCE: Final = ("def match(message):\n"
                        "    return message.tags == 'TagA' and int(message.properties.get('amount', '0')) > 100\n")


def run_sandbox(batches: int = 200, batch_size: int = 32, body_size: int = 1024) -> list[tuple[str, float]]:
    """(what, microseconds per message): a batch of ``batch_size`` messages through a sandboxed filter worker
    (filtersrv/filter_worker.py: marshal, a pipe each way, the worker's per-message alarm) against the same
    ``match`` called in this process; and a worker's start (interpreter, confinement, compile), per start."""
    import time

    from reference_broker.filtersrv.controller import split_records
    from reference_broker.filtersrv.filter_worker import FilterWorker, Outcome, SandboxLimits
    from reference_broker.filtersrv.sandbox import compile_filter

    _, messages = split_records(sample_record(body_size) * batch_size)
    t0 = time.perf_counter()
    starts = 5
    for _ in range(starts):
        w = FilterWorker(FILTER_SOURCE, SandboxLimits())
        w.start()
        w.kill()
    start_us = (time.perf_counter() - t0) / starts * 1e6
    worker = FilterWorker(FILTER_SOURCE, SandboxLimits())
    try:
        worker.start()
        assert worker.match(messages).outcome is Outcome.OK
        t0 = time.perf_counter()
        for _ in range(batches):
            worker.match(messages)
        sandboxed_us = (time.perf_counter() - t0) / (batches * batch_size) * 1e6
    finally:
        worker.kill()

    class _Msg:
        def __init__(self, m: tuple[str, str | None, str, bytes, dict[str, str]]) -> None:
            self.topic, self.tags, self.keys, self.body, self.properties = m

    match = compile_filter(FILTER_SOURCE)
    t0 = time.perf_counter()
    for _ in range(batches):
        for m in messages:
            match(_Msg(m))
    direct_us = (time.perf_counter() - t0) / (batches * batch_size) * 1e6
    return [(f"match() in a sandboxed worker, batches of {batch_size} ({body_size} B bodies)", sandboxed_us),
            ("the same match() in this process", direct_us),
            ("a worker's start (interpreter, confinement, compile), per start", start_us)]
