"""Reproduce finding F1 (docs/findings.md) against any running broker: one CONSUMER_SEND_MSG_BACK whose consumer
group holds a NUL byte, then a send on another topic; prints whether that send became pullable.

    python scripts/findings/send_back_nul_group.py 127.0.0.1:10911

Exit 0: later messages are pullable; 1: dispatch stopped (the defect); 2: the broker never served a first message.
``python -m harness hazards`` runs the same probe on fresh brokers of both kinds (harness/hazards.py).
"""

from __future__ import annotations

import argparse
import sys

from harness.hazards import HAZARDS, NO_FIRST_MESSAGE, PULLABLE_WAIT_S, probe


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("broker", help="HOST:PORT of the broker")
    ap.add_argument("--wait", type=float, default=PULLABLE_WAIT_S, help="seconds to wait for each message")
    args = ap.parse_args()
    outcome = probe(args.broker, HAZARDS[0], "broker", args.wait)
    print(f"send-back with group 'a\\0b': code {outcome.answer} {outcome.remark}".rstrip())
    print(outcome.note)
    if outcome.note == NO_FIRST_MESSAGE:
        return 2
    return 0 if outcome.healthy else 1


if __name__ == "__main__":
    sys.exit(main())
