"""Hostile requests held against both brokers: each is sent to a fresh broker, and then the broker is asked
whether it still works (a message sent afterwards, on another topic, becomes pullable). The wire differential
(harness/wire_diff.py) compares answers; this compares what a broker is like *after* an answer.

On the reference broker a hazard that leaves the broker broken is our defect (the command exits 1, the test
fails). On Apache RocketMQ it is a finding (harness/records/findings.py), with the command that shows it again:
``python -m harness hazards --broker-impl rocketmq``.

The first hazard is docs/findings.md F1: one CONSUMER_SEND_MSG_BACK whose group holds a NUL byte. RocketMQ
4.9.8 answers it with code 0 and its dispatch then stops for every topic; the reference broker refuses it
(common/names.py).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from harness.driver import RUNTIME_INFO_BOOT_S
from harness.launcher import Topology
from harness.records.findings import Finding, FindingKind
from harness.rocketmq import BrokerImpl
from reference_broker.client import protocol
from reference_broker.client.message import MessageQueue
from reference_broker.common.record import MessageExt, RecordError, decode_messages
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import RemotingCommand, create_request, fastjson_loads
from reference_broker.remoting.errors import RemotingError
from reference_broker.remoting.headers import PULL_FLAG_SUBSCRIPTION

PULLABLE_WAIT_S: Final = 10.0  # how long a message may take to become pullable before the broker counts as stuck
PROBE_GROUP: Final = "hazard_probe"
REPRODUCE: Final = "python -m harness hazards --broker-impl rocketmq"
NO_FIRST_MESSAGE: Final = "the first message never became pullable"  # the probe could not start


def send_request(topic: str, body: bytes) -> RemotingCommand:
    return protocol.send_request(PROBE_GROUP, topic, 0, body, "", born_timestamp=int(time.time() * 1000))


def pulled(client: RemotingClient, topic: str, body: bytes, timeout_s: float) -> MessageExt | None:
    """The message with ``body`` once a pull of ``topic`` (queue 0, from offset 0) returns it, or None."""
    deadline = time.monotonic() + timeout_s
    # With the subscription in the request (PULL_FLAG_SUBSCRIPTION): the probe group registers nothing.
    pull = protocol.pull_request(PROBE_GROUP, MessageQueue(topic, "", 0), "*", "TAG", 0, 0, 32,
                                 PULL_FLAG_SUBSCRIPTION, 0, 0)
    while time.monotonic() < deadline:
        r = client.invoke(pull)
        if r.code == ResponseCode.SUCCESS and r.body:
            try:
                msgs = decode_messages(r.body)
            except (RecordError, ValueError):
                msgs = []
            for m in msgs:
                if m.body == body:
                    return m
        time.sleep(0.1)
    return None


def broker_version(client: RemotingClient) -> str:
    """The broker's brokerVersionDesc (GET_BROKER_RUNTIME_INFO), or "" when it does not say. Asked again for up
    to RUNTIME_INFO_BOOT_S: 4.9.8 answers SYSTEM_ERROR until its stats service's first sample (F4)."""
    deadline = time.monotonic() + RUNTIME_INFO_BOOT_S
    while True:
        try:
            r = client.invoke(create_request(RequestCode.GET_BROKER_RUNTIME_INFO, {}))
            if r.code == ResponseCode.SUCCESS and r.body:
                return str(fastjson_loads(r.body).get("table", {}).get("brokerVersionDesc", ""))
        except (RemotingError, ValueError, AttributeError):
            return ""
        if time.monotonic() >= deadline:
            return ""
        time.sleep(0.2)


@dataclass(frozen=True)
class Outcome:
    hazard: str
    broker: str  # "reference" or "rocketmq"
    answer: int  # the hostile request's response code (-1: none)
    remark: str
    healthy: bool  # a message sent afterwards became pullable
    note: str
    version: str = ""  # the broker's brokerVersionDesc


@dataclass(frozen=True)
class Hazard:
    name: str
    title: str  # what the finding says when a broker does not survive it
    hostile: Callable[[MessageExt], RemotingCommand]  # the request, given a stored message


def _send_back_nul_group(msg: MessageExt) -> RemotingCommand:
    return protocol.send_back_request(msg, "a\0b", -1, 16)


HAZARDS: Final = (
    Hazard("send-back with a NUL byte in its group",
           "one CONSUMER_SEND_MSG_BACK whose group holds a NUL byte stops dispatch of every topic "
           "(docs/findings.md F1)", _send_back_nul_group),
)


def probe(addr: str, hazard: Hazard, impl: str, wait_s: float = PULLABLE_WAIT_S) -> Outcome:
    """Store a message, send the hostile request about it, then send another message on a new topic and see
    whether it becomes pullable within ``wait_s``."""
    host, _, port = addr.rpartition(":")
    tag = uuid.uuid4().hex[:8]
    first, second = f"HAZARD_A_{tag}", f"HAZARD_B_{tag}"
    with RemotingClient(host, int(port), timeout_s=10.0) as c:
        c.invoke(send_request(first, b"first"))
        stored = pulled(c, first, b"first", wait_s)
        if stored is None:
            return Outcome(hazard.name, impl, -1, "", False, NO_FIRST_MESSAGE)
        version = broker_version(c)
        try:
            r = c.invoke(hazard.hostile(stored))
            answer, remark = r.code, r.remark or ""
        except RemotingError as exc:
            answer, remark = -1, f"no answer: {exc}"
    with RemotingClient(host, int(port), timeout_s=10.0) as c:  # a fresh connection: the last may be closed
        c.invoke(send_request(second, b"after"))
        healthy = pulled(c, second, b"after", wait_s) is not None
    note = "a later message was pullable" if healthy else \
        f"a message sent afterwards on another topic was not pullable within {wait_s:g} s"
    return Outcome(hazard.name, impl, answer, remark, healthy, note, version)


def run(root: Path, impls: Sequence[BrokerImpl], rocketmq_home: Path | None = None,
        hazards: Sequence[Hazard] = HAZARDS, progress: Callable[[str], None] = lambda _l: None) -> list[Outcome]:
    """Each hazard against a fresh broker of each implementation."""
    out = []
    for impl in impls:
        for n, hazard in enumerate(hazards):
            with Topology(root / f"{impl}-{n}", impl=impl, rocketmq_home=rocketmq_home,
                          broker_conf={"mappedFileSizeCommitLog": 64 << 20}) as topo:
                progress(f"{impl}: {hazard.name}")
                out.append(probe(topo.brokers[0].addr, hazard, impl))
                topo.kill()
    return out


def findings(outcomes: Sequence[Outcome]) -> list[Finding]:
    """A WEDGE finding per RocketMQ outcome that left the broker broken, under the version the broker gave."""
    by_name = {h.name: h for h in HAZARDS}
    return [Finding(key=f"hazard/{o.hazard}: wedge", kind=FindingKind.WEDGE, broker=o.version or "RocketMQ",
                    title=by_name[o.hazard].title if o.hazard in by_name else o.hazard,
                    detail=f"answered code {o.answer}{f' ({o.remark})' if o.remark else ''}; {o.note}",
                    reproduce=REPRODUCE, source="hazards (harness/hazards.py)")
            for o in outcomes if o.broker == "rocketmq" and not o.healthy]


def format_outcomes(outcomes: Sequence[Outcome]) -> str:
    return "\n".join(f"{'ok' if o.healthy else 'BROKEN':6}  {o.broker:9}  {o.hazard}: answered {o.answer}; {o.note}"
                     for o in outcomes)
