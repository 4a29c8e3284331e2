"""What the coordinator (locust master or local runner) and the load processes (workers) tell each other.

``RunInfo`` travels to workers inside locust's spawn message (a custom attribute of ``parsed_options``, which
locust forwards to workers before their ``test_start``); ``Counts`` come back in progress reports and command
acknowledgements. Both are plain JSON so they cross locust's message bus unchanged.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Final

RUN_INFO_ATTR: Final = "rmq_lab_run"  # the parsed_options attribute that carries RunInfo to workers


@dataclass(frozen=True)
class Phase:
    """A stretch of the run that sends to one set of topics (queues.py has one per queue count)."""

    label: str
    topics: tuple[tuple[str, int], ...]  # (topic, queues per broker)

    @property
    def topic_names(self) -> list[str]:
        return [t for t, _q in self.topics]

    @property
    def queues(self) -> int:
        return sum(q for _t, q in self.topics)


@dataclass(frozen=True)
class RunInfo:
    run_dir: str
    run_id: str
    tag: str  # the run id's random part: in keys, topic and group names
    scenario: str
    namesrv: str
    group: str
    phases: tuple[Phase, ...]
    processes: int  # load processes sharing the rate
    from_timestamp_ms: int | None = None  # consume from this time (an existing topic), else from the first offset

    @property
    def all_topics(self) -> list[str]:
        return list(dict.fromkeys(t for p in self.phases for t in p.topic_names))

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> RunInfo:
        d = json.loads(text)
        d["phases"] = tuple(Phase(p["label"], tuple((str(t), int(q)) for t, q in p["topics"])) for p in d["phases"])
        return cls(**d)


@dataclass
class Counts:
    """A process's cumulative counts for one run (messages, not requests)."""

    worker: str = ""
    attempted: int = 0
    ok: int = 0
    fail: int = 0
    unknown: int = 0
    received: int = 0
    foreign: int = 0  # deliveries of messages not of this run (an existing topic's history), not recorded
    in_flight: int = 0
    rows: int = 0
    first_send_ns: int = 0  # start of the first send, 0 = none yet
    last_ack_ns: int = 0  # end of the last acknowledged send
    cpu_s: float = 0.0  # process CPU (all threads) since the run began here
    producing: bool = False
    finished: bool = False
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Counts:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    @property
    def send_rate(self) -> float | None:
        """Acknowledged messages per second over the span the sends took (with or without recording)."""
        span = (self.last_ack_ns - self.first_send_ns) / 1e9
        return self.ok / span if self.ok and span > 0 else None

    @classmethod
    def total(cls, parts: list[Counts]) -> Counts:
        t = cls(worker="*", producing=any(p.producing for p in parts), finished=all(p.finished for p in parts))
        for p in parts:
            t.attempted += p.attempted
            t.ok += p.ok
            t.fail += p.fail
            t.unknown += p.unknown
            t.received += p.received
            t.foreign += p.foreign
            t.in_flight += p.in_flight
            t.rows += p.rows
            t.cpu_s += p.cpu_s
            t.error = t.error or p.error
            if p.first_send_ns and (not t.first_send_ns or p.first_send_ns < t.first_send_ns):
                t.first_send_ns = p.first_send_ns
            t.last_ack_ns = max(t.last_ack_ns, p.last_ack_ns)
        return t
