"""This module owns the fuzzer's probe: a well-behaved client that, every 50 ms while the fuzzer runs, sends one
keyed message and reads it back with a pull, timing each round; and, afterwards, the check that every message
it got acknowledged is still pullable, findable by key (QUERY_MESSAGE) and by message id (VIEW_MESSAGE_BY_ID).

The probe runs in a process of its own: in the fuzzer's process it shared one interpreter lock with the case
generator and with decoding floods of answers, so a round could wait on the fuzzer rather than on the broker.
Its times are CLOCK_MONOTONIC, which every process on the machine shares, so the fuzzer can still name the
cases in flight at a stall.
"""

from __future__ import annotations

import multiprocessing
import time
from dataclasses import dataclass, field
from typing import Any

from harness.fuzz_cases import PROBE_TOPIC
from reference_broker.client.message_id import UniqIdGenerator
from reference_broker.common import message as mc
from reference_broker.common import record as rec
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import create_request
from reference_broker.remoting.errors import RemotingError
from reference_broker.remoting.headers import send_v1_to_v2

PROBE_GROUP = "FuzzProbeGroup"
PROBE_PERIOD_S = 0.05


@dataclass(frozen=True)
class Acked:
    key: str
    uniq_id: str
    offset_msg_id: str
    queue_offset: int


@dataclass
class ProbeStats:
    rounds: int = 0
    worst_stall_s: float = 0.0
    worst_at_s: float = 0.0  # seconds into the run when the worst round started
    worst_started: float = 0.0  # time.monotonic() when it started (to find the fuzz cases in flight)
    # The longest time without a successful round: a wedged broker makes every round time out after 5 s,
    # so the worst round alone would understate a wedge of minutes.
    longest_unanswered_s: float = 0.0
    unanswered_from: float = 0.0  # time.monotonic() of the last success before that longest gap
    over_limit: int = 0
    failures: list[str] = field(default_factory=list)
    acked: list[Acked] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"rounds": self.rounds, "worst_stall_ms": round(self.worst_stall_s * 1000, 1),
                "worst_at_s": round(self.worst_at_s, 1), "over_limit": self.over_limit,
                "longest_unanswered_ms": round(self.longest_unanswered_s * 1000, 1),
                "acked": len(self.acked), "failures": self.failures[:20]}


def create_probe_topic(port: int, timeout_s: float = 10.0) -> None:
    """Create the probe's topic before any case runs. Left to auto-creation from TBW102 it would depend on the
    fuzzer: a case may delete TBW102 or make it unwritable first (legitimate acts), and every probe send then
    fails with TOPIC_NOT_EXIST."""
    client = RemotingClient("127.0.0.1", port, timeout_s=timeout_s)
    try:
        resp = client.invoke(create_request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": PROBE_TOPIC, "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1",
            "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}))
    finally:
        client.close()
    if resp.code != ResponseCode.SUCCESS:
        raise RuntimeError(f"cannot create the probe topic {PROBE_TOPIC}: code {resp.code} {resp.remark}")


def _send_request(key: str, uniq: str) -> Any:
    props = {mc.PROPERTY_KEYS: key, mc.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: uniq, mc.PROPERTY_TAGS: "probe"}
    return create_request(RequestCode.SEND_MESSAGE_V2, send_v1_to_v2({
        "producerGroup": "FuzzProbeProducer", "topic": PROBE_TOPIC, "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "1", "queueId": "0", "sysFlag": "0", "bornTimestamp": str(time.time_ns() // 10**6),
        "flag": "0", "properties": mc.properties_to_bytes(props).decode(), "reconsumeTimes": "0",
        "unitMode": "false", "batch": "false"}), f"probe {key}".encode())


def _pull_request(offset: int, suspend_ms: int, max_nums: int = 32) -> Any:
    # PullSysFlag: suspend (2) + subscription (4); long polling answers as soon as the message is dispatched.
    return create_request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": PROBE_GROUP, "topic": PROBE_TOPIC, "queueId": "0", "queueOffset": str(offset),
        "maxMsgNums": str(max_nums), "sysFlag": "6" if suspend_ms else "4", "commitOffset": "0",
        "suspendTimeoutMillis": str(suspend_ms), "subscription": "*", "subVersion": "0", "expressionType": "TAG"})


class Probe:
    """Runs in its own process (see the module's docstring); ``stop()`` ends it and returns its stats."""

    def __init__(self, port: int, limit_s: float, run_id: str) -> None:
        self.port = port
        self.limit_s = limit_s
        self.run_id = run_id
        self.stats = ProbeStats()
        ctx = multiprocessing.get_context("spawn")  # nothing of the fuzzer's threads or sockets is inherited
        self._stop: Any = ctx.Event()
        self._results, child = ctx.Pipe(duplex=False)
        self._process = ctx.Process(target=_probe_main, args=(port, limit_s, run_id, self._stop, child),
                                    name="fuzz-probe", daemon=True)
        self._ids = UniqIdGenerator()
        self._t0 = time.monotonic()

    def start(self) -> None:
        self._process.start()

    def stop(self) -> ProbeStats:
        self._stop.set()
        if self._results.poll(60):
            self.stats = self._results.recv()
        else:
            self.stats.failures.append("the probe process sent no figures")
        self._process.join(30)
        if self._process.is_alive():
            self._process.kill()
        return self.stats

    def run_here(self, stop: Any) -> ProbeStats:
        """The probe's loop in the calling process until ``stop`` is set (what the probe process runs)."""
        self._stop = stop
        self._t0 = time.monotonic()
        self._run()
        return self.stats

    def _run(self) -> None:
        client: RemotingClient | None = None
        n = 0
        last_ok = time.monotonic()
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                if client is None:
                    client = RemotingClient("127.0.0.1", self.port, timeout_s=max(5.0, 3 * self.limit_s))
                ok = self._round(client, f"probe-{self.run_id}-{n}")
            except (RemotingError, OSError, ValueError) as exc:
                ok = False
                self._fail(f"round {n} at {started - self._t0:.1f}s: {exc!r}")
                if client is not None:
                    client.close()
                client = None
            took = time.monotonic() - started
            self.stats.rounds += 1
            if took > self.stats.worst_stall_s:
                self.stats.worst_stall_s, self.stats.worst_at_s = took, started - self._t0
                self.stats.worst_started = started
            if took > self.limit_s:
                self.stats.over_limit += 1
            now = time.monotonic()
            gap = now - last_ok  # since the last answered round, this one included
            if gap > self.stats.longest_unanswered_s:
                self.stats.longest_unanswered_s, self.stats.unanswered_from = gap, last_ok
            if ok:
                last_ok = now
            n += 1
            self._stop.wait(max(0.0, PROBE_PERIOD_S - took))
        if client is not None:
            client.close()

    def _fail(self, text: str) -> None:
        if len(self.stats.failures) < 100:
            self.stats.failures.append(text)

    def _round(self, client: RemotingClient, key: str) -> bool:
        """One send + pull; True when both succeeded."""
        uniq = self._ids.create()
        resp = client.invoke(_send_request(key, uniq))
        if resp.code != ResponseCode.SUCCESS:
            self._fail(f"send {key}: code {resp.code} {resp.remark}")
            return False
        acked = Acked(key, uniq, resp.ext_fields.get("msgId", ""), int(resp.ext_fields.get("queueOffset", "-1")))
        self.stats.acked.append(acked)
        suspend_ms = max(100, int(self.limit_s * 1000))
        got = client.invoke(_pull_request(acked.queue_offset, suspend_ms), timeout_s=suspend_ms / 1000 + 5)
        if got.code != ResponseCode.SUCCESS:
            self._fail(f"pull {key} at offset {acked.queue_offset}: code {got.code} {got.remark}")
            return False
        msgs = rec.decode_messages(got.body)
        if not msgs or msgs[0].properties.get(mc.PROPERTY_KEYS) != key:
            self._fail(f"pull {key} at offset {acked.queue_offset}: got another message")
            return False
        return True


def _probe_main(port: int, limit_s: float, run_id: str, stop: Any, results: Any) -> None:
    results.send(Probe(port, limit_s, run_id).run_here(stop))


def verify_acked(port: int, acked: list[Acked], settle_s: float = 10.0) -> list[str]:
    """Every acknowledged probe message is pullable, findable by key and by offsetMsgId. Lookups are retried
    for ``settle_s`` (the index is built by dispatch, after the send was acknowledged). Returns problems."""
    problems: list[str] = []
    if not acked:
        return problems
    try:
        _verify(port, acked, settle_s, problems)
    except (RemotingError, OSError) as exc:  # a wedged broker: report it rather than wait on every message
        problems.append(f"the lookups stopped: the broker did not answer ({exc!r})")
    return problems


def _verify(port: int, acked: list[Acked], settle_s: float, problems: list[str]) -> None:
    with RemotingClient("127.0.0.1", port, timeout_s=10) as c:
        pulled: set[str] = set()
        offset, deadline = 0, time.monotonic() + settle_s
        want = {a.uniq_id for a in acked}
        while not want <= pulled and time.monotonic() < deadline:
            r = c.invoke(_pull_request(offset, 0))
            if r.code == ResponseCode.SUCCESS:
                for m in rec.decode_messages(r.body):
                    pulled.add(m.msg_id)
                offset = int(r.ext_fields["nextBeginOffset"])
            elif r.code == ResponseCode.PULL_OFFSET_MOVED:
                offset = int(r.ext_fields["nextBeginOffset"])
            else:
                time.sleep(0.05)
        missing = [a for a in acked if a.uniq_id not in pulled]
        problems += [f"acknowledged {a.key} ({a.uniq_id}) is not pullable" for a in missing[:20]]
        if len(missing) > 20:
            problems.append(f"... {len(missing)} acknowledged messages not pullable in all")
        end_ts = str(time.time_ns() // 10**6 + 3_600_000)
        # One settling window for all lookups (dispatch builds the index after the acknowledgement): past it,
        # each lookup is tried once, so a broken index costs one request per message, not settle_s each.
        deadline = time.monotonic() + settle_s
        for a in acked:
            if len(problems) > 60:
                problems.append("(further lookups skipped)")
                break
            while True:
                r = c.invoke(create_request(RequestCode.QUERY_MESSAGE, {
                    "topic": PROBE_TOPIC, "key": a.key, "maxNum": "32", "beginTimestamp": "0",
                    "endTimestamp": end_ts}))
                found = r.code == ResponseCode.SUCCESS and any(
                    m.properties.get(mc.PROPERTY_KEYS) == a.key for m in rec.decode_messages(r.body))
                if found or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            if not found:
                problems.append(f"acknowledged {a.key} not found by key (code {r.code} {r.remark})")
            try:
                _host, _port, phy = rec.decode_message_id(a.offset_msg_id)
            except rec.MessageIdError as exc:
                problems.append(f"acknowledged {a.key}: bad offsetMsgId {a.offset_msg_id!r}: {exc}")
                continue
            r = c.invoke(create_request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(phy)}))
            msgs = rec.decode_messages(r.body) if r.code == ResponseCode.SUCCESS else []
            if not msgs or msgs[0].properties.get(mc.PROPERTY_KEYS) != a.key:
                problems.append(f"acknowledged {a.key} not found by id {a.offset_msg_id} (code {r.code} {r.remark})")
