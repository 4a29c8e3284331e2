"""What a scenario run shows about Apache RocketMQ: consumers that needed longer than the lab's bound to catch
up once the producers stopped. A STALL finding (harness/records/findings.py) for ``runs/findings.jsonl``, so
the reports' findings page lists it with the run record; docs/findings.md F10 explains the one seen so far
(10,000 new queues: RocketMQ's single dispatch thread falls a minute behind). Pure: the coordinator records it.
"""

from __future__ import annotations

import re
from typing import Any, Final

from harness.records.findings import Finding, FindingKind

DRAIN_BOUND_S: Final = 30.0  # consumers still behind this long after the producers stopped: a stall
_ROCKETMQ_VERSION: Final = re.compile(r"V\d+_\d+_\d+")  # MQVersion's name, RocketMQ's brokerVersionDesc
MIB: Final = 1 << 20


def drain_stall(summary: dict[str, Any], reproduce: str) -> Finding | None:
    """The finding for a RocketMQ run (``summary`` as scenarios.summary.summarize gives it) whose end-of-run
    drain took more than ``DRAIN_BOUND_S`` or never caught up; None otherwise (and for the reference broker,
    whose runs the checker and the claims judge)."""
    impl = summary.get("broker_impl")
    drain = (summary.get("results") or {}).get("drain_at_end")
    if not (isinstance(impl, str) and _ROCKETMQ_VERSION.fullmatch(impl)) or not drain:
        return None
    if drain.get("caught_up") and drain.get("waited_s", 0.0) <= DRAIN_BOUND_S:
        return None
    lag = (summary.get("metrics") or {}).get("dispatch_lag_max_bytes")
    queues = max((ph.get("queues", 0) for ph in summary.get("phases") or []), default=None)
    queues = queues or (summary.get("params") or {}).get("queues")
    read = (summary.get("results") or {}).get("final_read") or {}
    caught = (f"caught up {drain['waited_s']:.1f} s after the producers stopped" if drain.get("caught_up")
              else f"had not caught up {drain['waited_s']:.1f} s after the producers stopped ({drain['reason']})")
    detail = (f"The consumers {caught}, with up to {queues:,} queues; the broker's dispatch lag (commit log not "
              f"yet in a consume queue) reached {'?' if lag is None else f'{lag / MIB:.1f} MiB'}."
              if queues else f"The consumers {caught}.")
    if read.get("wanted"):
        detail += (f" The final read found {read['found']:,} of the {read['wanted']:,} acknowledged messages no "
                   f"consumer had received still stored (unread, not lost).")
    return Finding(key=f"scenario/{summary.get('scenario')}: consumers behind at the end", kind=FindingKind.STALL,
                   broker=impl, title=f"Consumers still behind more than {DRAIN_BOUND_S:g} s after the producers "
                   f"stopped ({summary.get('scenario')} workload; docs/findings.md F10)", detail=detail,
                   reproduce=reproduce, source=f"scenarios/{summary.get('scenario')}.py",
                   run_dir=summary.get("run_dir"))
