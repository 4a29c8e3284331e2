"""Apache RocketMQ's C++ client (PyPI ``rocketmq`` 0.4.x, ``librocketmq.so``) sends to the reference broker:
sync, async, oneway, orderly (queue selector), oneway orderly, delay level and batch; each test checks what the
broker stored, through the admin functions, against what the client was told. Every test runs against the
reference broker and (slow) Apache RocketMQ 4.9.8, so each assertion is one both brokers hold.

The 0.4.x binding has no transactional producer and no async orderly send (the library's
``SendMessageOrderlyAsync`` is not wrapped); it sends bodies as C strings (no NUL bytes).
"""

from __future__ import annotations

import struct
from typing import Any

import pytest

from reference_broker.tools import admin
from tests.interop.conftest import Broker, Cpp
from tests.interop.helpers import create_topic, wait_stored

pytestmark = pytest.mark.e2e

# The reference broker's whole-record CRC (docs/design.md); 4.9.8 stores no such property.
OWN_PROPS = {"__CRC32#"}


def test_every_send_mode_is_stored_where_the_client_was_told(broker: Broker, cpp: Cpp) -> None:
    topic = "CppSendModes"
    create_topic(broker.ns, broker.addr, topic, 4)
    ops: list[dict[str, Any]] = (
        [{"how": "sync", "topic": topic, "key": f"s{i}", "tags": "TagA", "props": {"user": f"v{i}"}}
         for i in range(4)]
        + [{"how": "async", "topic": topic, "key": f"a{i}", "tags": "TagB"} for i in range(2)]
        + [{"how": "oneway", "topic": topic, "key": f"w{i}"} for i in range(2)]
        + [{"how": "orderly", "topic": topic, "key": f"o{i}", "arg": i} for i in range(4)]
        + [{"how": "oneway_orderly", "topic": topic, "key": "wo", "arg": 2},
           {"how": "sync", "topic": topic, "key": "d", "delay": 2}])
    results = {r["key"]: r for r in cpp("produce", {"ns": broker.ns, "group": "CPP_PG", "ops": ops})}
    assert [r.get("error") for r in results.values()] == [None] * len(ops)
    msgs = {m["keys"]: m for m in wait_stored(broker.ns, topic, len(ops))}
    assert sorted(msgs) == sorted(op["key"] for op in ops)
    for key, m in msgs.items():
        assert m["topic"] == topic and m["body"] == f"body-{key}"
        assert set(m["properties"]) - OWN_PROPS >= {"KEYS", "UNIQ_KEY", "CLUSTER"}
        assert m["properties"]["CLUSTER"] == "DefaultCluster"
        # 4.9.8's SendMessageProcessor stores no WAIT ("no need to store WAIT=true")
        if key != "d":
            assert "WAIT" not in m["properties"]
    answered = [k for k, r in results.items() if "status" in r]
    assert answered and all(results[k]["status"] == "OK" for k in answered)
    # the client's msgId is its own UNIQ_KEY, as stored; its offset the queue offset the broker answered
    assert all(results[k]["msgId"] == msgs[k]["properties"]["UNIQ_KEY"] for k in answered)
    assert all(results[k]["offset"] == msgs[k]["queueOffset"] for k in answered if k != "d")
    assert all(msgs[f"s{i}"]["tags"] == "TagA" and msgs[f"s{i}"]["properties"]["user"] == f"v{i}"
               for i in range(4))
    # hashing_queue_selector: arg % the topic's 4 write queues
    assert [msgs[f"o{i}"]["queueId"] for i in range(4)] == [0, 1, 2, 3] and msgs["wo"]["queueId"] == 2
    # the delayed one went through SCHEDULE_TOPIC_XXXX and reached its topic after its level's 1 s
    d = msgs["d"]
    assert d["properties"]["REAL_TOPIC"] == topic and d["storeTimestamp"] - d["bornTimestamp"] >= 1000
    # Known difference (docs/interop.md): 4.9.8's messageTimeup stores the schedule copy's properties text,
    # WAIT=true (and DELAY) still in it, while its map says WAIT=false; the reference broker stores its map.
    assert d["properties"]["WAIT"] == {"reference": "false", "rocketmq": "true"}[broker.impl]


def _batch_entries(body: bytes) -> list[tuple[bytes, dict[str, str]]]:
    """MessageDecoder.encodeMessages' layout (4.9.8): TOTALSIZE, MAGICCODE, BODYCRC, FLAG, BODY (int length),
    PROPERTIES (short length) per entry."""
    out, pos = [], 0
    while pos < len(body):
        total, _magic, _crc, _flag, body_len = struct.unpack_from(">iiiii", body, pos)
        entry_body = body[pos + 20:pos + 20 + body_len]
        (props_len,) = struct.unpack_from(">h", body, pos + 20 + body_len)
        raw = body[pos + 22 + body_len:pos + 22 + body_len + props_len].decode()
        out.append((entry_body, dict(p.split("\x01", 1) for p in raw.split("\x02") if p)))
        pos += total
    return out


def test_a_batch_is_stored_as_one_message_as_rocketmq_does(broker: Broker, cpp: Cpp) -> None:
    """The C++ client's SendBatchMessage encodes the batch but sends it as SEND_MESSAGE_V2 without the batch
    flag: 4.9.8 stores the encoded batch as one message's body, and so must the reference broker."""
    topic = "CppBatch"
    create_topic(broker.ns, broker.addr, topic, 4)
    batch = [{"how": "sync", "topic": topic, "key": f"b{i}", "tags": "TagB"} for i in range(3)]
    (res,) = cpp("produce", {"ns": broker.ns, "group": "CPP_PG", "ops": [{"how": "batch", "batch": batch}]})
    assert res["status"] == "OK" and res["msgId"] == ""  # the client builds no id for a batch
    (m,) = wait_stored(broker.ns, topic, 1)
    assert m["keys"] == "" and m["tags"] is None and set(m["properties"]) - OWN_PROPS == {"CLUSTER"}
    assert m["msgId"] == m["offsetMsgId"]  # no UNIQ_KEY of its own
    body = admin.message_at(broker.ns, topic, "broker-a", m["queueId"], m["queueOffset"]).body
    entries = _batch_entries(body)
    assert [(b, p["KEYS"], p["TAGS"]) for b, p in entries] == [(f"body-b{i}".encode(), f"b{i}", "TagB")
                                                              for i in range(3)]
    # and a consumer gets that one message (its body, read as a C string, ends at the batch's first NUL)
    *got, summary = cpp("push", {"ns": broker.ns, "group": "CPP_BATCH", "topic": topic, "expect": 1,
                                 "timeout": 40, "settle": 1})
    assert summary == {"done": True, "received": 1}
    assert [(d["key"], d["queueId"], d["queueOffset"]) for d in got] == [("", m["queueId"], m["queueOffset"])]

