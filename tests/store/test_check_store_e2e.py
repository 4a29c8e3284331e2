"""``admin checkStore`` on stores this project's broker wrote, through real processes: a name server and a broker
(harness/launcher.py), keyed sends, SIGTERM; then the check as a user runs it (``python -m reference_broker admin
checkStore DIR``) on the store, and on copies of it with each kind of damage."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chaos import damage
from reference_broker.store.consume_queue import UNIT
from tests.chaos.store_helpers import Sent, create_topic, produce, topology

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
N = 3000  # ~1.5 MB of records: four 512 KiB commit-log files
LOG_FILE_SIZE = 512 * 1024
SLOTS, ENTRIES = 1000, 4000


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Sent]]]:
    """A store the broker wrote and was stopped cleanly (SIGTERM), and what was sent to it."""
    root = tmp_path_factory.mktemp("checkstore")
    topo = topology(root / "topo", mappedFileSizeCommitLog=LOG_FILE_SIZE, maxHashSlotNum=SLOTS, maxIndexNum=ENTRIES)
    try:
        create_topic(topo)
        sent = produce(topo, N)
        broker = topo.brokers[0]
        assert broker.stop() == 0
        yield broker.store_root, sent
    finally:
        topo.cleanup()


@pytest.fixture
def store(written: tuple[Path, dict[str, Sent]], tmp_path: Path) -> Path:
    """A copy of the written store, to damage."""
    dst = tmp_path / "store"
    shutil.copytree(written[0], dst)
    return dst


def check(store: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-m", "reference_broker", "admin", "checkStore", str(store), "--json", *extra],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.stdout, r.stderr
    return r.returncode, json.loads(r.stdout)


def reasons(out: dict[str, Any], kind: str) -> list[str]:
    return [p["reason"] for p in out["problems"] if p["kind"] == kind]


def _digest(root: Path) -> dict[str, tuple[int, str]]:
    return {str(p.relative_to(root)): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_clean_store_passes_and_is_left_untouched(written: tuple[Path, dict[str, Sent]]) -> None:
    root = written[0]
    before = _digest(root)
    code, out = check(root)
    assert code == 0, json.dumps(out, indent=2)[:3000]
    assert out["outcome"] == "clean" and out["clean_stop"] is True
    c = out["counts"]
    assert c["commitlog_records"] == N and c["cq_units"] == N
    assert c["index_entries"] == 2 * N  # UNIQ_KEY and KEYS of each
    assert c["commitlog_files"] >= 3 and c["index_files"] >= 1
    assert _digest(root) == before, "the check changed the store"
    assert not (root / "abort").exists()
    # The human summary says the same.
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-m", "reference_broker", "admin", "checkStore", str(root)],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and "CLEAN" in r.stdout and f"{N:,}" in r.stdout


def test_flipped_body_byte_is_a_body_crc_mismatch(store: Path, written: tuple[Path, dict[str, Sent]]) -> None:
    s = sorted(written[1].values(), key=lambda x: x.commit_log_offset)[1000]
    path, pos = damage.locate(store, s.commit_log_offset)
    with open(path, "r+b") as f:
        f.seek(pos + 91 + 10)  # inside the body (with IPv4 hosts it starts at 88)
        b = f.read(1)
        f.seek(pos + 91 + 10)
        f.write(bytes([b[0] ^ 0xFF]))
    code, out = check(store)
    assert code == 1
    problems = [p for p in out["problems"] if p["kind"] == "commitlog-record"]
    assert [(p["file"], p["offset"], p["reason"]) for p in problems] == [
        (f"commitlog/{path.name}", pos, "body CRC mismatch")]
    assert out["counts"]["commitlog_records"] == N - 1  # stepped over, the rest checked


def test_flipped_property_byte_is_a_whole_record_crc_mismatch(store: Path,
                                                             written: tuple[Path, dict[str, Sent]]) -> None:
    s = sorted(written[1].values(), key=lambda x: x.commit_log_offset)[2000]
    path, pos = damage.locate(store, s.commit_log_offset)
    data = path.read_bytes()
    (total,) = struct.unpack_from(">i", data, pos)
    at = pos + total - 40  # in the properties, before the CRC's own 20 bytes: BODYCRC cannot see it
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(bytes([data[at] ^ 0x01]))
    code, out = check(store)
    assert code == 1
    assert reasons(out, "commitlog-record") == ["whole-record CRC (__CRC32#) mismatch"]


def test_commit_log_file_removed_from_the_middle(store: Path) -> None:
    files = damage.commit_log_files(store)
    assert len(files) >= 3
    gone = files[1]
    gone.unlink()
    code, out = check(store)
    assert code == 1
    want = f"files missing before it: expected {gone.name} after {files[0].name} (file size {LOG_FILE_SIZE})"
    assert reasons(out, "commitlog-files") == [want]
    # The units that named records in it now name nothing.
    assert reasons(out, "consumequeue-unit")
    assert all("no commit-log file holds that offset" in r for r in reasons(out, "consumequeue-unit"))


def test_unit_pointing_at_another_record(store: Path) -> None:
    qfile = sorted((store / "consumequeue" / "DamageTopic" / "0").iterdir())[0]
    data = bytearray(qfile.read_bytes())
    data[5 * 20:6 * 20] = data[6 * 20:7 * 20]  # unit 5 names unit 6's record
    qfile.write_bytes(bytes(data))
    phy = UNIT.unpack_from(data, 6 * 20)[0]
    code, out = check(store)
    assert code == 1
    got = [(p["file"], p["offset"], p["reason"]) for p in out["problems"] if p["kind"] == "consumequeue-unit"]
    assert got == [(f"consumequeue/DamageTopic/0/{qfile.name}", 100, f"unit 5: the record at {phy} has queue offset 6"),
                   (f"consumequeue/DamageTopic/0/{qfile.name}", 120,
                    f"unit 6: offset {phy} is not after the previous unit's {phy}")]


def test_unit_pointing_at_a_record_of_another_queue(store: Path) -> None:
    q0 = sorted((store / "consumequeue" / "DamageTopic" / "0").iterdir())[0]
    q1 = sorted((store / "consumequeue" / "DamageTopic" / "1").iterdir())[0]
    d0, d1 = bytearray(q0.read_bytes()), q1.read_bytes()
    # Queue 0's last unit names a record of queue 1 past queue 0's unit before it: order holds, the record is
    # the wrong queue's.
    n0 = damage.last_unit_end(q0) // 20
    phy0 = UNIT.unpack_from(d0, (n0 - 2) * 20)[0]
    n1 = damage.last_unit_end(q1) // 20
    other = next(u for u in (UNIT.unpack_from(d1, i * 20) for i in range(n1)) if u[0] > phy0)
    d0[(n0 - 1) * 20:n0 * 20] = UNIT.pack(*other)
    q0.write_bytes(bytes(d0))
    code, out = check(store)
    assert code == 1
    assert reasons(out, "consumequeue-unit") == [f"unit {n0 - 1}: the record at {other[0]} belongs to DamageTopic/1"]


def test_consume_queues_short_of_the_log(store: Path, written: tuple[Path, dict[str, Sent]]) -> None:
    damage.zero_consume_queue_tails(store, "DamageTopic", units=5)
    last = {}
    for s in written[1].values():
        last[s.queue_id] = max(last.get(s.queue_id, (-1, -1)), (s.queue_offset, s.commit_log_offset))
    code, out = check(store)
    assert code == 1
    got = sorted((p["file"], p["reason"]) for p in out["problems"] if p["kind"] == "consumequeue-incomplete")
    assert got == [(f"consumequeue/DamageTopic/{q}", f"the queue ends at unit {qo - 4}, but the log holds its queue "
                    f"offset {qo} at {phy}") for q, (qo, phy) in sorted(last.items())]


def test_index_entry_with_a_wrong_hash(store: Path) -> None:
    ipath = sorted((store / "index").iterdir())[0]
    at = 40 + SLOTS * 4 + 10 * 20  # entry 10
    data = bytearray(ipath.read_bytes())
    (h,) = struct.unpack_from(">i", data, at)
    struct.pack_into(">i", data, at, (h + 1) & 0x7FFFFFFF)
    ipath.write_bytes(bytes(data))
    code, out = check(store)
    assert code == 1
    got = [(p["file"], p["offset"], p["reason"]) for p in out["problems"] if p["kind"] == "index-entry"]
    assert len(got) == 1 and got[0][:2] == (f"index/{ipath.name}", at)
    assert got[0][2].startswith(f"entry 10: hash {(h + 1) & 0x7FFFFFFF} matches no topic#key of the record at ")


def test_checkpoint_ahead_of_the_data(store: Path) -> None:
    cp = store / "checkpoint"
    data = bytearray(cp.read_bytes())
    (physic,) = struct.unpack_from(">q", data, 0)
    struct.pack_into(">q", data, 0, physic + 86_400_000)
    cp.write_bytes(bytes(data))
    code, out = check(store)
    assert code == 1
    (r,) = reasons(out, "checkpoint")
    assert r.startswith(f"physicMsgTimestamp {physic + 86_400_000} is after the newest record's store time")


def test_non_zero_bytes_after_the_data(store: Path) -> None:
    last = damage.commit_log_files(store)[-1]
    with open(last, "r+b") as f:
        f.seek(LOG_FILE_SIZE - 100)
        f.write(b"\x01")
    code, out = check(store)
    assert code == 1
    assert [(p["file"], p["offset"]) for p in out["problems"] if p["kind"] == "commitlog-tail"] == [
        (f"commitlog/{last.name}", LOG_FILE_SIZE - 100)]


def test_a_torn_tail_is_a_warning_with_slave_and_a_problem_without(store: Path) -> None:
    # The log's end inside a record (the first 100 bytes of its first record again): what a slave keeps when its
    # master stopped mid-transfer.
    files = damage.commit_log_files(store)
    last = next(f for f in reversed(files) if f.read_bytes().strip(b"\0"))
    data = bytearray(last.read_bytes())
    pos = len(bytes(data).rstrip(b"\0"))
    data[pos:pos + 100] = files[0].read_bytes()[:100]
    last.write_bytes(bytes(data))
    code, out = check(store, "--slave")
    assert code == 0, out["problems"]
    assert any("ends inside its last record" in w for w in out["warnings"]), out["warnings"]
    code, out = check(store)
    assert code == 1
    assert [(p["file"], p["offset"]) for p in out["problems"] if p["kind"] == "commitlog-tail"] == [
        (f"commitlog/{last.name}", pos)]


def test_abort_file_is_a_warning_and_quarantine_is_ignored(store: Path) -> None:
    (store / "abort").touch()
    (store / "quarantine").mkdir()
    (store / "quarantine" / "00000000000000000000.cut").write_bytes(b"\xff" * 4096)
    code, out = check(store)
    assert code == 0, out["problems"]
    assert out["clean_stop"] is False and out["relaxed"]
    assert any("not cleanly stopped" in w for w in out["warnings"])


def test_not_a_store(tmp_path: Path) -> None:
    code, out = check(tmp_path)
    assert code == 2 and out["outcome"] == "not_a_store"
    code, out = check(tmp_path / "missing")
    assert code == 2
