"""Properties as a real broker process stores them, for the inputs a hostile or sloppy client sends: the
stored pairs are those Apache RocketMQ 4.9.8 stored for the same requests (seen on 4.9.8 with the same
bytes: its answers are the expected maps below), and invalid UTF-8 in a batch entry is kept as it came
(4.9.8 keeps it too; readers decode it to U+FFFD)."""

from __future__ import annotations

import struct
import time

import pytest

from harness.launcher import Topology
from reference_broker.common import message as mc
from reference_broker.common.crc import crc32
from reference_broker.common.record import decode_messages
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import create_request
from reference_broker.remoting.headers import send_v1_to_v2
from tests.broker.broker_helpers import pull_request, send_request
from tests.compiled_paths import broker_path  # noqa: F401 - the fixture, used by pytestmark

# each test against a broker on the pure and on the compiled path (tests/compiled_paths.py)
pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("broker_path")]

CLUSTER = {"CLUSTER": "DefaultCluster"}
# header properties sent -> the pairs RocketMQ 4.9.8 stored
SINGLE = [
    ("KEYS\x01k1\x02TAGS\x01t\x02", {"KEYS": "k1", "TAGS": "t"}),
    ("a\x01b\x02a\x01c", {"a": "c"}),
    ("noseparator", {}),
    ("x\x01\x02\x01y", {}),
    ("\x02", {}),
    ("k\x01v", {"k": "v"}),
    ("CLUSTER\x01mine\x02k\x01v", {"k": "v"}),
    # WAIT is not stored, whatever its value or place ("no need to store WAIT=true", SendMessageProcessor)
    ("WAIT\x01true\x02KEYS\x01k1", {"KEYS": "k1"}),
    ("KEYS\x01k2\x02WAIT\x01false", {"KEYS": "k2"}),
    ("WAIT\x01true\x02a\x01b\x02a\x01c", {"a": "c"}),
    ("WAIT\x01true", {}),
]


def _entry(body: bytes, props: bytes) -> bytes:
    total = 22 + len(body) + len(props)
    return struct.pack(">iiiii", total, 0, crc32(body), 0, len(body)) + body + struct.pack(">h", len(props)) + props


def _stored_props(c: RemotingClient, topic: str, n: int) -> list[bytes]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        r = c.invoke(pull_request(topic, 0, 0, max_nums=64))
        if r.code == ResponseCode.SUCCESS and r.body:
            msgs = decode_messages(r.body)
            if len(msgs) >= n:
                return [mc.properties_to_bytes(m.properties) for m in msgs]
        time.sleep(0.05)
    raise AssertionError("messages not pullable")


def _raw_props(c: RemotingClient, topic: str) -> list[bytes]:
    """Each pulled record's bytes, as stored."""
    r = c.invoke(pull_request(topic, 0, 0, max_nums=64))
    out, raw, i = [], r.body or b"", 0
    while i < len(raw):
        size = struct.unpack_from(">i", raw, i)[0]
        out.append(raw[i:i + size])
        i += size
    return out


def test_single_send_properties_are_stored_as_4_9_8_stores_them(tmp_path):
    with Topology(tmp_path / "topo") as topo, RemotingClient("127.0.0.1", topo.brokers[0].port, timeout_s=10) as c:
        for i, (text, _) in enumerate(SINGLE):
            assert c.invoke(send_request("PROPS", b"s%d" % i, properties=text)).code == ResponseCode.SUCCESS
        deadline = time.monotonic() + 10
        msgs = []
        while time.monotonic() < deadline and len(msgs) < len(SINGLE):
            r = c.invoke(pull_request("PROPS", 0, 0, max_nums=64))
            msgs = decode_messages(r.body) if r.code == ResponseCode.SUCCESS else []
            time.sleep(0.05)
        assert len(msgs) == len(SINGLE)
        for m, (text, want) in zip(msgs, SINGLE, strict=True):
            got = {k: v for k, v in m.properties.items() if k != mc.PROPERTY_CRC32}
            assert got == {**want, **CLUSTER}, repr(text)
        for rec in _raw_props(c, "PROPS"):
            assert b"\x02\x02" not in rec and rec.count(b"CLUSTER\x01") == 1


def test_batch_entry_properties_keep_their_bytes_and_get_one_separator(tmp_path):
    body = _entry(b"b1", b"KEYS\x01k\xff\xfe1\x02TAGS\x01t\xc3\x02") + _entry(b"b2", b"k\x01v")
    fields = {"producerGroup": "pg", "topic": "PROPB", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
              "queueId": "0", "sysFlag": "0", "bornTimestamp": str(int(time.time() * 1000)), "flag": "0",
              "properties": "", "reconsumeTimes": "0", "unitMode": "false", "batch": "true"}
    with Topology(tmp_path / "topo") as topo, RemotingClient("127.0.0.1", topo.brokers[0].port, timeout_s=10) as c:
        r = c.invoke(create_request(RequestCode.SEND_BATCH_MESSAGE, send_v1_to_v2(fields), body))
        assert r.code == ResponseCode.SUCCESS, r.remark
        props = _stored_props(c, "PROPB", 2)
        recs = _raw_props(c, "PROPB")
    # as 4.9.8 stored them: the entry's bytes, then CLUSTER with no second separator
    assert b"KEYS\x01k\xff\xfe1\x02TAGS\x01t\xc3\x02CLUSTER\x01DefaultCluster" in recs[0]
    assert b"k\x01v\x02CLUSTER\x01DefaultCluster" in recs[1]
    assert mc.bytes_to_properties(props[0])["KEYS"] == "k\ufffd\ufffd1"
