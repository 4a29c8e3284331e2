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
