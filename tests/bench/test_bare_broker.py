"""The broker benchmark's baseline: a real bare-broker process registered with a real name server answers the
project's producers, and what it appends are RocketMQ records and consume-queue units (so the baseline does
the work the comparison says it does)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.launcher import Process, Topology
from harness.ports import free_port
from reference_broker.bench.bare_broker import CQ_UNIT
from reference_broker.client import Message, Producer
from reference_broker.common import message as mc
from reference_broker.common import record as rec

TOPIC = "BareTest"


@pytest.fixture()
def bare(tmp_path: Path) -> Iterator[tuple[Topology, Path]]:
    with Topology(tmp_path / "topo", brokers=0) as topo:
        root = tmp_path / "bare"
        proc = Process("bare-broker", [sys.executable, "-m", "reference_broker", "bench", "bare-broker", "-n",
                                       topo.namesrv_addr, "-p", str(free_port()), "--root", str(root), "-t", TOPIC],
                       tmp_path / "bare.log", "bare broker boot success")
        proc.start()
        try:
            yield topo, root
        finally:
            assert proc.stop() == 0


def test_the_bare_broker_serves_lean_and_library_sends_and_writes_rocketmq_records(
        bare: tuple[Topology, Path]) -> None:
    topo, root = bare
    with Producer("bare_test_group", topo.namesrv_addr) as producer:
        sent = producer.send(Message(TOPIC, b"from the library", tags="T"))
    assert sent.send_status.name == "SEND_OK" and sent.queue_offset == 0
    assert sent.offset_msg_id is not None
    assert rec.decode_message_id(sent.offset_msg_id)[2] == 0  # the first record, at commit-log offset 0

    out = subprocess.run([sys.executable, "-m", "reference_broker", "bench", "producer", "-n", topo.namesrv_addr,
                          "-t", TOPIC, "--lean", "-q", "64", "-s", "100", "-d", "20", "--json"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["messages"] >= 64 and summary["send_failed"] == 0 and summary["response_failed"] == 0

    data = (root / "commitlog").read_bytes()
    first = rec.decode_message(data, 0)
    assert (first.topic, first.body, first.tags) == (TOPIC, b"from the library", "T")
    assert first.properties[mc.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] == sent.msg_id
    # Every record after it parses with its BODYCRC, and each queue's units point at its records in order.
    records, pos = [], 0
    while len(records) < 1 + summary["messages"]:
        msg = rec.decode_message(data, pos, check_crc=True)
        records.append((pos, msg))
        pos += msg.store_size
    units: dict[int, list[tuple[int, int]]] = {}
    for pos, msg in records:
        assert msg.commit_log_offset == pos
        assert msg.queue_offset == len(units.setdefault(msg.queue_id, []))
        units[msg.queue_id].append((pos, msg.store_size))
    for queue_id, expected in units.items():
        cq = (root / f"cq-{TOPIC.encode().hex()}-{queue_id}").read_bytes()
        got = [CQ_UNIT.unpack_from(cq, i * CQ_UNIT.size)[:2] for i in range(len(expected))]
        assert got == expected
