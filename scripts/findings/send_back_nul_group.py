"""Reproduce finding F1 (docs/findings.md) against any broker: one CONSUMER_SEND_MSG_BACK whose consumer group
holds a NUL byte, then a send on another topic; prints whether that send became pullable.

    python scripts/findings/send_back_nul_group.py 127.0.0.1:10911

Exit 0: the send-back was refused and later messages are pullable; 1: dispatch stopped (the defect).
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid

from reference_broker.common.record import decode_messages
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode
from reference_broker.remoting.command import RemotingCommand, create_request


def _pull(topic: str) -> RemotingCommand:
    return create_request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": "finding_probe", "topic": topic, "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
        "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0",
        "expressionType": "TAG"})


def _send(topic: str, body: bytes) -> RemotingCommand:
    return create_request(RequestCode.SEND_MESSAGE, {
        "producerGroup": "finding_probe", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "1",
        "queueId": "0", "sysFlag": "0", "bornTimestamp": str(int(time.time() * 1000)), "flag": "0",
        "properties": "", "reconsumeTimes": "0", "unitMode": "false", "batch": "false"}, body)


def _first_offset(c: RemotingClient, topic: str, body: bytes, timeout_s: float) -> int | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        r = c.invoke(_pull(topic))
        if r.code == 0 and r.body:
            for m in decode_messages(r.body):
                if m.body == body:
                    return m.commit_log_offset
        time.sleep(0.1)
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("broker", help="HOST:PORT of the broker")
    ap.add_argument("--wait", type=float, default=10.0, help="seconds to wait for the second message")
    args = ap.parse_args()
    host, _, port = args.broker.rpartition(":")
    tag = uuid.uuid4().hex[:8]
    with RemotingClient(host, int(port), timeout_s=10) as c:
        first, second = f"FINDING_A_{tag}", f"FINDING_B_{tag}"
        print("send", first, c.invoke(_send(first, b"first")).code)
        phys = _first_offset(c, first, b"first", args.wait)
        if phys is None:
            print("the first message never became pullable")
            return 2
        r = c.invoke(create_request(RequestCode.CONSUMER_SEND_MSG_BACK, {
            "offset": str(phys), "group": "a\0b", "delayLevel": "-1", "originMsgId": "", "originTopic": first,
            "unitMode": "false", "maxReconsumeTimes": "16"}))
        print("send-back with group 'a\\0b': code", r.code, r.remark or "")
        print("send", second, c.invoke(_send(second, b"after")).code)
        ok = _first_offset(c, second, b"after", args.wait) is not None
        print("second message pullable:", ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
