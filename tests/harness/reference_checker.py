"""A deliberately naive, per-row reimplementation of the checker's rules, to test the vectorised one against."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any


def reference_totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    sends: dict[str, list[dict[str, Any]]] = defaultdict(list)
    received: Counter[str] = Counter()
    read: set[str] = set()  # found by the final read: stored, but no delivery
    for r in rows:
        if r["op"] == "send":
            sends[r["key"]].append(r)
        elif r["op"] == "receive" and r.get("outcome", "ok") == "ok":
            received[r["key"]] += 1
        elif r["op"] == "read" and r.get("outcome", "ok") == "ok":
            read.add(r["key"])
    out: Counter[str] = Counter()
    lost_bytes = 0
    surplus = 0
    for key, ss in sends.items():
        outcomes = [s["outcome"] for s in ss]
        n_ok, n_fail = outcomes.count("ok"), outcomes.count("fail")
        out["attempted"] += 1
        got = received[key]
        stored = got > 0 or key in read
        if n_ok:
            out["acknowledged"] += 1
            ok_codes = [s.get("code", 0) for s in ss if s["outcome"] == "ok"]
            if all(c in (11, 12) for c in ok_codes):
                out["acked_master_only"] += 1
            if not stored:
                out["lost"] += 1
                out["lost_promised"] += 0 in ok_codes
                lost_bytes += next(s["bytes"] for s in ss if s["outcome"] == "ok")
            elif not got:
                out["unread"] += 1
        elif n_fail == len(ss):
            out["failed"] += 1
            out["recovered_failed"] += stored
        else:
            out["unknown"] += 1
            out["recovered"] += stored
        copies = max(1, len(ss) - n_fail)
        if got > copies:
            out["duplicated"] += 1
            surplus += got - copies
    out["unexpected"] = sum(1 for k in set(received) | read if k not in sends)
    keys = ("attempted", "acknowledged", "failed", "unknown", "lost", "unexpected", "duplicated", "recovered",
            "recovered_failed", "unread", "acked_master_only", "lost_promised")
    return {k: out[k] for k in keys} | {"lost_bytes": lost_bytes, "duplicate_deliveries": surplus}


def reference_order(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Rules A and B of harness.ordering, by brute force over pairs."""
    first_ack: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r["op"] == "send" and r["outcome"] == "ok":
            best = first_ack.get(r["key"])
            if best is None or r["end_ns"] < best["end_ns"]:
                first_ack[r["key"]] = r
    first_ack = {k: s for k, s in first_ack.items() if s["queue_id"] >= 0}
    by_session: dict[tuple[str, str], list[tuple[int, dict[str, Any]]]] = defaultdict(list)
    for i, r in enumerate(rows):
        if r["op"] == "receive" and r.get("outcome", "ok") == "ok":
            by_session[(r["worker"], r.get("session", ""))].append((i, r))
    counts: Counter[str] = Counter()
    for deliveries in by_session.values():
        deliveries.sort(key=lambda ir: (ir[1]["end_ns"], ir[0]))
        for n, (_, r) in enumerate(deliveries):
            earlier = [e for _, e in deliveries[:n]]
            late_a = r["queue_id"] >= 0 and r["queue_offset"] >= 0 and any(
                e["topic"] == r["topic"] and e["queue_id"] == r["queue_id"] and e["queue_offset"] > r["queue_offset"]
                for e in earlier if e["queue_offset"] >= 0)
            late_b = False
            mine = first_ack.get(r["key"])
            if mine is not None:
                for e in earlier:
                    theirs = first_ack.get(e["key"])
                    if (theirs is not None and (theirs["worker"], theirs["topic"], theirs["queue_id"])
                            == (mine["worker"], mine["topic"], mine["queue_id"])
                            and theirs["start_ns"] > mine["end_ns"]):
                        late_b = True
                        break
            if late_a or late_b:
                if r["queue_id"] >= 0:
                    counts[f"{r['topic']}/{r['queue_id']}"] += 1
                else:
                    assert mine is not None
                    counts[f"{mine['topic']}/{mine['queue_id']}"] += 1
    return dict(counts)
