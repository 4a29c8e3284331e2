"""The ledger of what chaos runs set up, and the cleanup of an interrupted run's leftovers (real processes)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from chaos.leftovers import Entry, Ledger, ResourceKind, cleanup, process_alive, process_start_time


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _write_foreign(ledger: Ledger, entry: Entry) -> None:
    """Put an entry owned by another process into the state file."""
    with ledger._locked() as entries:
        entries.append(entry)


def test_entries_are_recorded_and_removed(tmp_path):
    ledger = Ledger(tmp_path / "state.json")
    ledger.add(ResourceKind.PATH, tmp_path / "x", what="scratch")
    ledger.add(ResourceKind.LOOP, "/dev/loop9", backing="/img")
    assert [(e.kind, e.ident) for e in ledger.entries()] == [(ResourceKind.PATH, str(tmp_path / "x")),
                                                             (ResourceKind.LOOP, "/dev/loop9")]
    assert all(e.owner_alive for e in ledger.entries())
    ledger.remove(ResourceKind.LOOP, "/dev/loop9")
    ledger.remove(ResourceKind.PATH, tmp_path / "x")
    assert ledger.entries() == []
    assert not (tmp_path / "state.json").exists()  # an empty ledger leaves no file


def test_cleanup_undoes_a_dead_owners_process_and_directory_and_keeps_a_live_owners(tmp_path):
    ledger = Ledger(tmp_path / "state.json")
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        scratch = tmp_path / "scratch"
        scratch.mkdir()
        (scratch / "f").write_text("x")
        dead = _dead_pid()
        _write_foreign(ledger, Entry(ResourceKind.PROCESS, str(victim.pid), dead, None,
                                     {"what": "broker", "start_time": process_start_time(victim.pid)}))
        _write_foreign(ledger, Entry(ResourceKind.PATH, str(scratch), dead, None))
        mine = ledger.add(ResourceKind.PATH, tmp_path / "mine")
        report = cleanup(ledger, restore_sysctl=False)
        assert report.ok, report.failed
        assert victim.wait(10) is not None
        assert not scratch.exists()
        assert [e.ident for e in ledger.entries()] == [mine.ident]  # the live owner's entry stays
        assert report.kept
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait()


def test_a_recycled_pid_is_not_killed(tmp_path):
    ledger = Ledger(tmp_path / "state.json")
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        start = process_start_time(bystander.pid)
        assert start is not None
        # recorded with another start time: the pid now belongs to a different process
        _write_foreign(ledger, Entry(ResourceKind.PROCESS, str(bystander.pid), _dead_pid(), None,
                                     {"what": "broker", "start_time": start - 1}))
        assert cleanup(ledger, restore_sysctl=False).ok
        time.sleep(0.2)
        assert bystander.poll() is None and process_alive(bystander.pid, start)
        assert ledger.entries() == []
    finally:
        bystander.kill()
        bystander.wait()


def test_an_entry_of_an_unknown_kind_is_kept_and_reported_not_a_crash(tmp_path):
    """Two checkouts of the lab share one state file: an entry of a kind the other knows (a future
    ``container``) must neither crash this one's ledger nor be dropped when this one rewrites the file."""
    state = tmp_path / "state.json"
    alien = {"kind": "hologram", "ident": "h1", "owner_pid": 1, "owner_start": None, "detail": {}}
    state.write_text(json.dumps({"entries": [alien]}))
    ledger = Ledger(state)
    assert ledger.entries() == []
    ledger.add(ResourceKind.PATH, tmp_path / "x")
    ledger.remove(ResourceKind.PATH, tmp_path / "x")
    assert json.loads(state.read_text())["entries"] == [alien]  # still there after two rewrites
    report = cleanup(ledger, force=True, restore_sysctl=False)
    assert report.ok
    assert any("hologram h1" in k for k in report.kept)
    assert json.loads(state.read_text())["entries"] == [alien]
