"""SQL92 filter bits and consumerFilter.json on a real name server and a real reference broker with
enablePropertyFilter, enableCalcFilterBitMap and enableConsumeQueueExt: a push consumer subscribed by SQL92
receives exactly what its selector matches, consumerFilter.json holds its filter in 4.9.8's shape, the
extension files on disk hold each message's bit map (the group's bits set exactly where the selector
matched, as the bloom filter allows), and a broker restarted over a hostile consumerFilter.json logs why,
starts with an empty table and keeps serving SQL92 pulls."""

from __future__ import annotations

import json
import struct
import threading
import time
from pathlib import Path

import pytest

from harness.launcher import Topology
from reference_broker.client import (
    ClientConfig,
    Message,
    Producer,
)
from reference_broker.filter.bloom import BloomFilter
from tests.client import sql92_flow
from tests.client.helpers import create_topic, wait_for

pytestmark = pytest.mark.e2e

TOPIC = "SqlBits"
GROUP = "SqlBitsGroup"
N = 40


def _cfg(topo: Topology, name: str) -> ClientConfig:
    return ClientConfig(topo.namesrv_addr, name, poll_name_server_interval_s=1.0, rebalance_interval_s=1.0,
                        persist_consumer_offset_interval_s=1.0)


def _bit_maps(ext_root: Path) -> list[bytes]:
    """Every ext unit's bit map, read from the files as 4.9.8 lays them out (size, tagsCode, msgStoreTime,
    bitMapSize, bit map; a size <= 0 ends a file)."""
    out = []
    for f in sorted(p for p in ext_root.rglob("*") if p.is_file() and len(p.name) == 20):
        data = f.read_bytes()
        pos = 0
        while pos + 20 <= len(data):
            size, _tags, _ts, n = struct.unpack_from(">hqqh", data, pos)
            if size <= 0:
                break
            out.append(data[pos + 20:pos + 20 + n])
            pos += size
    return out


def test_filter_bits_and_consumer_filter_json_on_a_real_broker(tmp_path: Path) -> None:
    with Topology(tmp_path, brokers=0) as topo:
        broker = topo.add_broker("broker-a", {
            "enablePropertyFilter": "true", "enableCalcFilterBitMap": "true", "enableConsumeQueueExt": "true",
            "mappedFileSizeConsumeQueueExt": str(1 << 20), "flushConsumerOffsetInterval": "500"})
        create_topic(topo, TOPIC, 2)
        consumer, got, lock = sql92_flow.start_selecting(_cfg(topo, "c"), TOPIC, GROUP)
        filter_json = broker.store_root / "config" / "consumerFilter.json"
        try:
            def persisted() -> bool:
                try:
                    doc = json.loads(filter_json.read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    return False
                return GROUP in doc.get("filterDataByTopic", {}).get(TOPIC, {}).get("groupFilterData", {})

            wait_for(persisted, 30, "consumerFilter.json with the group's filter")
            time.sleep(0.05)  # the messages are stored after the filter's birth: their bit maps include it
            sql92_flow.send(_cfg(topo, "p"), TOPIC, N)
            expected = {f"k{i}" for i in range(N) if (i > 5 and i % 2 == 1) or i % 4 == 0}
            wait_for(lambda: got >= expected, 60, "the selected messages")
            threading.Event().wait(1.0)
            with lock:
                assert got == expected
        finally:
            consumer.shutdown()
        entry = json.loads(filter_json.read_text(encoding="utf-8"))["filterDataByTopic"][TOPIC]
        data = entry["groupFilterData"][GROUP]
        assert entry["topic"] == TOPIC
        assert data["expression"] == sql92_flow.SELECTOR and data["expressionType"] == "SQL92"
        assert data["consumerGroup"] == GROUP and data["topic"] == TOPIC
        assert set(data) == {"bloomFilterData", "bornTime", "clientVersion", "consumerGroup", "dead", "deadTime",
                             "expression", "expressionType", "topic"}
        bloom = BloomFilter(20, 32)
        group_bits = bloom.generate(f"{GROUP}#{TOPIC}")
        assert data["bloomFilterData"] == group_bits.to_json()
        maps = _bit_maps(broker.store_root / "consumequeue_ext" / TOPIC)
        assert len(maps) == N and all(len(m) == bloom.byte_length for m in maps)
        hits = sum(bloom.is_hit(group_bits, m) for m in maps)
        # one group on the topic: its bits are set exactly on the messages its selector matched
        assert hits == len(expected)
        assert sum(1 for m in maps if not any(m)) == N - len(expected)

        broker.stop()
        for name in ("consumerFilter.json", "consumerFilter.json.bak"):
            (broker.store_root / "config" / name).write_text('{"filterDataByTopic": {"T": 7}}', encoding="utf-8")
        broker.start()
        log = (topo.root / "broker-a.log").read_text(encoding="utf-8", errors="replace")
        assert "consumerFilter.json not loaded" in log and "starting with no consumer filters" in log
        sql92_flow.pull_pulls_the_selected(_cfg(topo, "q"), TOPIC, N)
        with Producer("AfterRestart", topo.namesrv_addr, client_config=_cfg(topo, "p2")) as producer:
            assert producer.send(Message(TOPIC, b"x", keys="after", properties={"a": "9"})).msg_id
