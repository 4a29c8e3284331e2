"""Helpers for the chaos tests that run a real broker: a topology with small files, keyed sends, full reads."""

from __future__ import annotations

import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from chaos.payload import BodyVerdict, classify, make_body, make_key
from harness.launcher import Topology
from reference_broker.client import ClientConfig, Message, MessageExt, Producer, PullConsumer, PullStatus, SendResult
from reference_broker.common.record import decode_message_id
from reference_broker.tools import admin

TOPIC = "DamageTopic"


@dataclass(frozen=True)
class Sent:
    queue_id: int
    queue_offset: int
    commit_log_offset: int


def topology(root: Path, **conf: object) -> Topology:
    base = {"mappedFileSizeCommitLog": 1 << 20, "maxHashSlotNum": 1000, "maxIndexNum": 4000}
    base.update(conf)
    return Topology(root, broker_conf=base).start()


def create_topic(topo: Topology, queues: int = 4) -> None:
    admin.update_topic(topo.namesrv_addr, TOPIC, queues, queues, broker_addr=topo.brokers[0].addr)
    deadline = time.monotonic() + 20
    while True:
        try:
            if admin.read_queues(topo.namesrv_addr, TOPIC):
                return
        except admin.AdminError:  # TOPIC_NOT_EXIST until the broker's registration reaches the name server
            pass
        assert time.monotonic() < deadline, "no route"
        time.sleep(0.05)


def _cfg(topo: Topology, name: str) -> ClientConfig:
    return ClientConfig(topo.namesrv_addr, name, poll_name_server_interval_s=1.0)


def produce(topo: Topology, n: int, size: int = 300, worker: str = "d", window: int = 64) -> dict[str, Sent]:
    """Send ``n`` keyed messages (async, ``window`` at a time); every one must be acknowledged."""
    out: dict[str, Sent] = {}
    with Producer("DAMAGE_PG", topo.namesrv_addr, client_config=_cfg(topo, f"dp-{worker}")) as p:
        pending: list[tuple[str, Future[SendResult]]] = []
        for i in range(n):
            key = make_key(worker, i)
            fut = p.send_async(Message(TOPIC, make_body(key, size), keys=key))
            assert fut is not None
            pending.append((key, fut))
            if len(pending) >= window or i == n - 1:
                for k, f in pending:
                    r = f.result(10)
                    out[k] = Sent(r.message_queue.queue_id, r.queue_offset,
                                  decode_message_id(r.offset_msg_id or "")[2])
                pending = []
    return out


def read_all(topo: Topology, group: str = "DAMAGE_READER") -> list[MessageExt]:
    """Every message of the topic, each queue read from its min offset to its max offset."""
    out: list[MessageExt] = []
    with PullConsumer(group, topo.namesrv_addr, client_config=_cfg(topo, f"dr-{group}")) as pc:
        for mq in sorted(pc.fetch_message_queues(TOPIC)):
            offset, high = pc.min_offset(mq), pc.max_offset(mq)
            while offset < high:
                r = pc.pull(mq, "*", offset, 32)
                if r.pull_status is PullStatus.FOUND:
                    out += r.msg_found_list
                if r.next_begin_offset <= offset:
                    break
                offset = r.next_begin_offset
    return out


def intact_keys(msgs: list[MessageExt]) -> tuple[set[str], list[str]]:
    """(keys delivered intact, descriptions of deliveries that are not)."""
    good, bad = set(), []
    for m in msgs:
        d = classify(m.keys, m.body, m.offset_msg_id)
        if d.verdict is BodyVerdict.INTACT:
            good.add(d.key)
        else:
            bad.append(f"{d.verdict.value} at {m.commit_log_offset}: {d.key[:40]!r}")
    return good, bad


def broker_log(topo: Topology) -> str:
    return (topo.root / f"{topo.brokers[0].name}.log").read_text(errors="replace")
