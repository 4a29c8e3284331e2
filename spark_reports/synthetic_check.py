"""A small pure-Python total-queue count over a synthetic history, written to the run's check.json.

It follows Jepsen's total-queue definitions (jepsen.checker/total-queue), keyed by message key: attempted =
keys sent; acknowledged = keys with an "ok" send; lost = acknowledged keys never delivered;
recovered = delivered keys whose sends were never acknowledged; duplicated = deliveries beyond the
first; unexpected = delivered keys never sent. It exists so the synthetic records carry verdicts
computed from their own history; the harness's checker is the real one.
"""

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

SAMPLE_LIMIT: Final = 10


@dataclass(frozen=True)
class Send:
    key: str
    outcome: str  # "ok" | "fail" | "unknown"
    body_bytes: int


@dataclass(frozen=True)
class Delivery:
    key: str
    topic: str
    queue_id: int
    queue_offset: int


def check_history(sends: Iterable[Send], deliveries: Iterable[Delivery], *, allow_loss: bool = False) -> dict[str, Any]:
    """check.json (schema v1) for a history; ``deliveries`` in the order the consumers saw them."""
    outcomes: dict[str, set[str]] = {}
    body: dict[str, int] = {}
    for send in sends:
        outcomes.setdefault(send.key, set()).add(send.outcome)
        body[send.key] = send.body_bytes
    acknowledged = {k for k, o in outcomes.items() if "ok" in o}
    failed = {k for k, o in outcomes.items() if o == {"fail"}}
    unknown = {k for k, o in outcomes.items() if "ok" not in o and "unknown" in o}

    seen: Counter[str] = Counter()
    last_offset: dict[str, int] = {}
    order_violations: Counter[str] = Counter()
    for d in deliveries:
        seen[d.key] += 1
        if seen[d.key] > 1 or d.queue_offset < 0:
            continue  # a redelivery is not an ordering fault
        queue = f"{d.topic}/{d.queue_id}"
        if d.queue_offset < last_offset.get(queue, -1):
            order_violations[queue] += 1
        last_offset[queue] = max(d.queue_offset, last_offset.get(queue, -1))

    lost = sorted(acknowledged - seen.keys())
    unexpected = sorted(seen.keys() - outcomes.keys())
    recovered = sorted(k for k in seen if k in outcomes and k not in acknowledged)
    duplicated = sum(n - 1 for k, n in seen.items() if n > 1 and k in outcomes)
    return {
        "schema_version": 1,
        "attempted": len(outcomes),
        "acknowledged": len(acknowledged),
        "failed": len(failed),
        "unknown": len(unknown),
        "lost": len(lost),
        "lost_bytes": sum(body[k] for k in lost),
        "unexpected": len(unexpected),
        "duplicated": duplicated,
        "recovered": len(recovered),
        "order_violations": dict(sorted(order_violations.items())),
        "samples": {
            "lost": lost[:SAMPLE_LIMIT],
            "unexpected": unexpected[:SAMPLE_LIMIT],
            "recovered": recovered[:SAMPLE_LIMIT],
            "duplicated": sorted(k for k, n in seen.items() if n > 1 and k in outcomes)[:SAMPLE_LIMIT],
        },
        "valid": not unexpected and (allow_loss or not lost),
        "allow_loss": allow_loss,
    }
