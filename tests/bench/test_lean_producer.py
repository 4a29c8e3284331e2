"""``bench producer --lean``: its pre-encoded frames are the frames the client library sends, with each
message's own opaque, born time, UNIQ_KEY and send stamp; and against a real broker every message is stored."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.launcher import Topology
from reference_broker.bench.lean_producer import build_template, fill_frame
from reference_broker.bench.producer_stats import SEND_NS_PROPERTY
from reference_broker.client.message_id import UniqIdGenerator
from reference_broker.common import message as mc
from reference_broker.common.message_batch import decode_batch
from reference_broker.remoting.codec import FrameDecoder
from reference_broker.remoting.codes import RequestCode
from reference_broker.tools import admin


def _decode(frame: bytes):
    dec = FrameDecoder()
    dec.feed(frame)
    cmd = dec.next_frame()
    assert cmd is not None and dec.next_frame() is None
    return cmd


def test_single_message_frame_carries_its_own_fields() -> None:
    body = bytes(range(256)) * 4
    tpl = build_template("g", "TopicA", 3, body, 1, "tag0")
    ids = UniqIdGenerator()
    uid = ids.create()
    frames = [fill_frame(tpl, 1_000_000_000 + n, 1_763_000_000_000 + n, [uid if n == 0 else ids.create()],
                         1_763_000_000_000_000_000 + n) for n in range(2)]
    assert len(frames[0]) == len(frames[1]) == len(tpl.frame)
    cmd = _decode(frames[0])
    assert cmd.code == RequestCode.SEND_MESSAGE_V2 and cmd.opaque == 1_000_000_000 and cmd.body == body
    ext = cmd.ext_fields
    assert (ext["a"], ext["b"], ext["e"], ext["g"], ext["m"]) == ("g", "TopicA", "3", "1763000000000", "false")
    props = mc.bytes_to_properties(ext["i"].encode())
    assert props[mc.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] == uid
    assert props[SEND_NS_PROPERTY] == "1763000000000000000" and props[mc.PROPERTY_TAGS] == "tag0"
    assert _decode(frames[1]).opaque == 1_000_000_001


def test_batch_frame_gives_every_message_its_own_uniq_key() -> None:
    tpl = build_template("g", "TopicB", 0, b"x" * 100, 8, None)
    ids = UniqIdGenerator()
    uids = [ids.create() for _ in range(8)]
    cmd = _decode(fill_frame(tpl, 1_000_000_007, 1_763_000_000_000, uids, 1_763_000_000_000_000_000))
    assert cmd.code == RequestCode.SEND_BATCH_MESSAGE and cmd.ext_fields["m"] == "true"
    entries = decode_batch(cmd.body)
    assert [e.properties[mc.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] for e in entries] == uids
    assert all(e.body == b"x" * 100 for e in entries)


@pytest.mark.e2e
@pytest.mark.parametrize("batch", [1, 10])
def test_lean_producer_stores_every_acknowledged_message(tmp_path: Path, batch: int) -> None:
    with Topology(tmp_path / "t") as topo:
        topic = f"Lean{batch}"
        p = subprocess.run([sys.executable, "-m", "reference_broker", "bench", "producer", "-n", topo.namesrv_addr,
                            "-t", topic, "--lean", "-b", str(batch), "-s", "200", "-q", "500", "-d", "30",
                            "--in-flight", "8", "--json"], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        s = json.loads(p.stdout)
        assert s["messages"] == 500 and s["send_failed"] == 0 and s["response_failed"] == 0
        assert s["client_cpu_us_per_msg"] > 0
        stats = admin.topic_status(topo.namesrv_addr, topic)
        stored = sum(q["maxOffset"] - q["minOffset"] for q in stats)
        assert stored == 501  # + the library's warm-up send


@pytest.mark.e2e
def test_paced_lean_producer_keeps_its_rate_and_reports_its_lag(tmp_path: Path) -> None:
    """Open loop: sends go out on schedule, never ahead of it, and every one is stored."""
    with Topology(tmp_path / "t") as topo:
        p = subprocess.run([sys.executable, "-m", "reference_broker", "bench", "producer", "-n", topo.namesrv_addr,
                            "-t", "Paced", "--lean", "-r", "200", "-s", "200", "-q", "300", "-d", "30", "--json"],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        s = json.loads(p.stdout)
        assert s["messages"] == 300 and s["send_failed"] == 0 and s["response_failed"] == 0
        assert s["elapsed_s"] >= 299 / 200  # the 300th send is due 1.495 s after the first
        assert 0 <= s["pace_lag_p99_ms"] <= s["pace_lag_max_ms"]
        stats = admin.topic_status(topo.namesrv_addr, "Paced")
        assert sum(q["maxOffset"] - q["minOffset"] for q in stats) == 301  # + the library's warm-up send


def test_lean_refuses_keys() -> None:
    p = subprocess.run([sys.executable, "-m", "reference_broker", "bench", "producer", "--lean", "-k"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--lean" in p.stderr
