"""State file format, the apply lock, and the run-record writers (files in tmp; no root needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sysctl_profiles.errors import LockedError, StateFileError
from sysctl_profiles.record import sysctl_entry, update_run_meta, write_record
from sysctl_profiles.state_file import ApplyLock, SavedState, decode_state, encode_state, load_state, save_state


def test_state_round_trip_keeps_order(tmp_path: Path) -> None:
    state = SavedState("seed-qa", 123, 456, {"vm.dirty_bytes": "0", "vm.dirty_ratio": "20", "vm.swappiness": "60"})
    save_state(tmp_path / "s.json", state)
    loaded = load_state(tmp_path / "s.json")
    assert loaded == state
    assert list(loaded.saved) == ["vm.dirty_bytes", "vm.dirty_ratio", "vm.swappiness"]
    assert not list(tmp_path.glob(".*tmp")), "temporary file left behind"


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"[]",
        b'{"format": "other/1"}',
        b'{"format": "sysctl_profiles.state/1", "profile": "p", "pid": 1, "created_ns": 1, "saved": {"a.b": 1}}',
        b'{"format": "sysctl_profiles.state/1", "saved": {}}',
    ],
)
def test_bad_state_files_are_rejected(data: bytes) -> None:
    with pytest.raises(StateFileError):
        decode_state(data)


def test_state_file_encoding_is_json() -> None:
    doc = json.loads(encode_state(SavedState("p", 1, 2, {"vm.swappiness": "60"})))
    assert doc["format"] == "sysctl_profiles.state/1" and doc["saved"] == {"vm.swappiness": "60"}


def test_lock_is_exclusive_and_released(tmp_path: Path) -> None:
    first, second = ApplyLock(tmp_path / "lock"), ApplyLock(tmp_path / "lock")
    first.acquire()
    with pytest.raises(LockedError, match="pid"):
        second.acquire()
    first.release()
    second.acquire()
    assert second.held
    second.release()


def test_record_file(tmp_path: Path) -> None:
    entry = sysctl_entry("seed-qa", False, "not root", {"vm.swappiness": "60", "vm.dirty_ratio": "20"})
    write_record(tmp_path / "rec.json", entry)
    doc = json.loads((tmp_path / "rec.json").read_text())
    assert doc == {
        "profile": "seed-qa",
        "applied": False,
        "reason": "not root",
        "values": {"vm.dirty_ratio": "20", "vm.swappiness": "60"},
    }
    assert list(doc["values"]) == sorted(doc["values"])


def test_run_meta_created_minimal_when_absent(tmp_path: Path) -> None:
    entry = sysctl_entry("default", True, None, {"vm.swappiness": "60"})
    path = update_run_meta(tmp_path, entry)
    assert json.loads(path.read_text()) == {"sysctl": entry}


def test_run_meta_keeps_other_keys(tmp_path: Path) -> None:
    (tmp_path / "meta.json").write_text(json.dumps({"schema_version": 1, "run_id": "r1", "sysctl": {"old": 1}}))
    entry = sysctl_entry("rocketmq-os", True, None, {"vm.swappiness": "1"})
    update_run_meta(tmp_path, entry)
    assert json.loads((tmp_path / "meta.json").read_text()) == {"schema_version": 1, "run_id": "r1", "sysctl": entry}
