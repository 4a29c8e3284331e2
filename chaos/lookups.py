"""This module owns the chaos lookup check: after each restart after a crash, a sample of the messages
acknowledged before the crash is looked up through the live broker by key (QUERY_MESSAGE with the KEYS
value), by UNIQ_KEY (QUERY_MESSAGE with the client's message id: what queryMsgById does for an id that is not
an offsetMsgId) and by offsetMsgId (VIEW_MESSAGE_BY_ID at the offset the send was answered with).

Pulls alone do not show that the index survived recovery: consume queues and the index are rebuilt by the
same replay but kept apart on disk, and an index file lost on restart leaves every message pullable and none
findable (reference_broker/store/index_recovery.py).

The sample (``choose_sample``, pure) is up to ``SAMPLE_LIMIT`` acknowledged keys spread evenly over the run,
always with the ``NEWEST`` last acknowledged before the crash — the ones the crash caught in the unflushed
tail. A key missed here counts against the verdict only if the final drain found it in the broker (still
pullable): one a power loss took under ASYNC_FLUSH is judged by the loss rules instead (chaos/verdict.py).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from reference_broker.client import protocol
from reference_broker.common import message as mc
from reference_broker.common.record import MessageExt, RecordError, decode_messages
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import ResponseCode
from reference_broker.remoting.errors import RemotingError

SAMPLE_LIMIT = 200
NEWEST = 50
MAX_NUM = 32  # QUERY_MESSAGE maxNum: a key is unique per send, so one hit is expected
_END_MS = 2**62  # the whole time range: the sample spans the run


class AckedLike(Protocol):
    @property
    def commit_log_offset(self) -> int: ...

    @property
    def end_ns(self) -> int: ...

    @property
    def uniq_id(self) -> str: ...


class Way(enum.StrEnum):
    """How a message is looked up."""

    KEY = "key"  # QUERY_MESSAGE by the KEYS value
    UNIQ = "uniq"  # QUERY_MESSAGE by UNIQ_KEY (the client's msgId)
    ID = "id"  # VIEW_MESSAGE_BY_ID at the acknowledged offset (offsetMsgId)


@dataclass
class LookupCheck:
    """One probe after one restart: how many sampled keys each way found, and which it missed."""

    cycle: int
    sampled: int = 0
    found: dict[str, int] = field(default_factory=lambda: {w.value: 0 for w in Way})
    missing: dict[str, list[str]] = field(default_factory=lambda: {w.value: [] for w in Way})
    error: str | None = None  # the probe itself failed (broker unreachable): nothing was judged
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"cycle": self.cycle, "sampled": self.sampled, "seconds": round(self.seconds, 3),
                "found": dict(self.found),
                "missing": {w: len(keys) for w, keys in self.missing.items()},
                "missing_examples": {w: keys[:5] for w, keys in self.missing.items()}, "error": self.error}


def choose_sample(acks: Mapping[str, AckedLike], before_ns: int, limit: int = SAMPLE_LIMIT,
                  newest: int = NEWEST) -> list[str]:
    """Keys acknowledged by ``before_ns`` with a known offset: the ``newest`` last ones plus an even spread
    over the rest, ``limit`` in all, oldest first."""
    known = sorted((a.end_ns, k) for k, a in acks.items() if a.end_ns <= before_ns and a.commit_log_offset >= 0)
    if len(known) <= limit:
        return [k for _, k in known]
    tail = known[-newest:] if newest > 0 else []
    rest = known[: len(known) - len(tail)]
    want = limit - len(tail)
    step = len(rest) / want
    spread = [rest[int(i * step)] for i in range(want)]
    return [k for _, k in spread + tail]


def _matches(m: MessageExt, key: str, way: Way) -> bool:
    if way is Way.UNIQ:
        return m.properties.get(mc.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) == key
    return key in (m.keys.split(mc.KEY_SEPARATOR) if m.keys else [])


def _decoded(body: bytes | None) -> list[MessageExt]:
    try:
        return decode_messages(body or b"")
    except (RecordError, ValueError):
        return []


def _query(client: RemotingClient, topic: str, query: str, key: str, way: Way) -> bool:
    resp = client.invoke(protocol.query_message_request(topic, query, MAX_NUM, 0, _END_MS))
    if resp.code != ResponseCode.SUCCESS:
        return False
    return any(m.topic == topic and _matches(m, key, way) for m in _decoded(resp.body))


def _view(client: RemotingClient, offset: int, key: str) -> bool:
    resp = client.invoke(protocol.view_message_request(offset))
    if resp.code != ResponseCode.SUCCESS:
        return False
    msgs = _decoded(resp.body)
    return bool(msgs) and _matches(msgs[0], key, Way.KEY)


def probe(addr: str, topic: str, cycle: int, keys: Sequence[str], acks: Mapping[str, AckedLike],
          timeout_s: float = 10.0) -> LookupCheck:
    """Look each of ``keys`` up the three ways through the broker at ``addr``."""
    check = LookupCheck(cycle, sampled=len(keys))
    t0 = time.monotonic()
    try:
        with RemotingClient.from_addr(addr, timeout_s) as client:
            for key in keys:
                ack = acks[key]
                results = {Way.KEY: _query(client, topic, key, key, Way.KEY),
                           Way.UNIQ: bool(ack.uniq_id) and _query(client, topic, ack.uniq_id, ack.uniq_id, Way.UNIQ),
                           Way.ID: _view(client, ack.commit_log_offset, key)}
                for way, ok in results.items():
                    if ok:
                        check.found[way.value] += 1
                    else:
                        check.missing[way.value].append(key)
    except (RemotingError, OSError) as e:
        check.error = f"{type(e).__name__}: {e}"
    check.seconds = time.monotonic() - t0
    return check


@dataclass
class LookupTotals:
    """The lookup checks of a run, as the verdict judges them."""

    probes: int = 0
    sampled: int = 0
    found: dict[str, int] = field(default_factory=lambda: {w.value: 0 for w in Way})
    missed: dict[str, int] = field(default_factory=lambda: {w.value: 0 for w in Way})  # still pullable: gate
    excused: dict[str, int] = field(default_factory=lambda: {w.value: 0 for w in Way})  # gone from the broker
    errors: list[str] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)

    @property
    def missed_total(self) -> int:
        return sum(self.missed.values())


def total(checks: Sequence[LookupCheck], absent: Mapping[str, object]) -> LookupTotals:
    """Sum the probes; a miss of a key the final drain did not find (``absent``) is excused: the loss rules
    judge whether it could be lost at all."""
    t = LookupTotals(probes=len(checks))
    for c in checks:
        if c.error is not None:
            t.errors.append(f"cycle {c.cycle}: {c.error}")
            continue
        t.sampled += c.sampled
        for way, n in c.found.items():
            t.found[way] += n
        for way, keys in c.missing.items():
            for k in keys:
                if k in absent:
                    t.excused[way] += 1
                else:
                    t.missed[way] += 1
                    if len(t.examples) < 5:
                        t.examples.append(f"{k} by {way} (cycle {c.cycle})")
    return t
