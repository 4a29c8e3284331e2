"""Heartbeats that register many new consumer groups, sent to a real broker while a probe connection keeps
sending one message every 50 ms: how long the heartbeats take, and how long the probe's worst send waited.

Run as a script for the figures (``python -m tests.broker.heartbeat_load --groups 2000``); the end-to-end
test uses ``run_load``.
"""

from __future__ import annotations

import argparse
import threading
import time
from dataclasses import dataclass, field

from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import RemotingCommand, create_request, json_dumps
from tests.broker.broker_helpers import send_request

PROBE_PERIOD_S = 0.05


def many_groups_heartbeat(client_id: str, groups: list[str], topic: str = "HB_T") -> RemotingCommand:
    """One HEART_BEAT registering ``groups`` as clustering consumers of ``topic`` (HeartbeatData's JSON)."""
    body = {"clientID": client_id, "producerDataSet": [], "consumerDataSet": [{
        "groupName": g, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": topic, "subString": "*", "subVersion": 1}]} for g in groups]}
    return create_request(RequestCode.HEART_BEAT, {}, json_dumps(body))


@dataclass
class LoadResult:
    heartbeat_codes: list[int] = field(default_factory=list)
    heartbeat_s: list[float] = field(default_factory=list)  # each heartbeat's time to answer
    probe_latencies_s: list[float] = field(default_factory=list)
    probe_failures: list[str] = field(default_factory=list)

    @property
    def worst_probe_s(self) -> float:
        return max(self.probe_latencies_s, default=0.0)


def _probe(port: int, stop: threading.Event, result: LoadResult) -> None:
    with RemotingClient("127.0.0.1", port, timeout_s=600) as c:
        next_t = time.monotonic()
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                r = c.invoke(send_request("HB_PROBE", b"probe"))
                if r.code != ResponseCode.SUCCESS:
                    result.probe_failures.append(f"code {r.code}: {r.remark}")
            except Exception as exc:  # noqa: BLE001 - a probe: reported, the probe goes on
                result.probe_failures.append(repr(exc))
            result.probe_latencies_s.append(time.monotonic() - t0)
            next_t += PROBE_PERIOD_S
            stop.wait(max(0.0, next_t - time.monotonic()))


def run_load(port: int, heartbeats: list[RemotingCommand], settle_s: float = 0.5) -> LoadResult:
    """Send ``heartbeats`` back to back on one connection while the probe runs on another."""
    result = LoadResult()
    stop = threading.Event()
    probe = threading.Thread(target=_probe, args=(port, stop, result), daemon=True)
    probe.start()
    time.sleep(settle_s)
    try:
        with RemotingClient("127.0.0.1", port, timeout_s=600) as c:
            for hb in heartbeats:
                t0 = time.monotonic()
                r = c.invoke(hb)
                result.heartbeat_s.append(time.monotonic() - t0)
                result.heartbeat_codes.append(r.code)
        time.sleep(settle_s)
    finally:
        stop.set()
        probe.join(700)
    return result


def main() -> None:
    import tempfile
    from pathlib import Path

    from harness.launcher import Topology

    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=1000, help="new groups per heartbeat")
    ap.add_argument("--heartbeats", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, Topology(Path(tmp)) as topo:
        port = topo.brokers[0].port
        hbs = [many_groups_heartbeat(f"client-{h}", [f"G{h}_{i}" for i in range(args.groups)])
               for h in range(args.heartbeats)]
        r = run_load(port, hbs)
        lat = sorted(r.probe_latencies_s)
        print(f"groups/heartbeat={args.groups} heartbeats={args.heartbeats} codes={r.heartbeat_codes} "
              f"answer_s={[round(s, 3) for s in r.heartbeat_s]} probes={len(lat)} "
              f"worst_probe_s={r.worst_probe_s:.3f} p50_probe_ms={1000 * lat[len(lat) // 2]:.1f} "
              f"probe_failures={len(r.probe_failures)}")


if __name__ == "__main__":
    main()
