"""This module owns the control of the dispatch-cost measurement: the reference broker with no dispatch at all.

``python -m harness.no_dispatch_broker -m reference_broker broker …`` runs the broker exactly as
``python -m reference_broker broker …`` would, except that its store never starts the ReputMessageService: no
consume-queue unit, no index entry and no dispatch hook runs, and nothing else is taken away. Sends are
answered as usual (a send needs no dispatch); pulls find nothing. It is not a broker anyone should run: it is
the upper bound of "dispatch out of the broker's interpreter" (harness/dispatch_cost.py, docs/dispatch.md), the
broker's CPU per message with the dispatch thread's own work and its contention for the interpreter lock both
gone, which a dispatch process could approach but not pass (the broker would still read the offset the process
publishes and refresh its consume-queue views).

It is started through a one-line launcher script in place of the Python executable (``Topology(python=…)``),
so the launcher, its readiness checks and its shutdown are the ones every other broker in the harness uses.
The caller must set ``putMsgIndexHightWater`` far above the run's message count: with nothing dispatched, the
put throttle (docs/claims.md `dispatch-throttle`) would otherwise sleep every put after 600,000 messages.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

from reference_broker.store.reput import ReputMessageService
from reference_broker.store.service_thread import ServiceThread


def launcher(directory: Path) -> Path:
    """An executable in ``directory`` that runs its arguments (``-m reference_broker …``) as this module does;
    pass it as ``Topology(python=…)``. The name server it also starts is unaffected (it has no store)."""
    path = directory / "python-no-dispatch"
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m harness.no_dispatch_broker "$@"\n', encoding="utf-8")
    path.chmod(0o755)
    return path


def _no_reput(self: ServiceThread) -> None:
    """ReputMessageService.start, replaced: the thread is never started (``behind()`` stays what it is)."""


def main(argv: list[str]) -> None:
    if argv[:2] != ["-m", "reference_broker"]:
        raise SystemExit("usage: python -m harness.no_dispatch_broker -m reference_broker (broker|namesrv) ...")
    ReputMessageService.start = _no_reput  # type: ignore[method-assign]
    sys.argv = ["reference_broker", *argv[2:]]
    runpy.run_module("reference_broker", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
