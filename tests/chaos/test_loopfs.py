"""Loop-mounted images (root and loop devices): the power-loss recipe, the disk filler, and ``python -m chaos
cleanup`` after a run is SIGKILLed with its image mounted."""

from __future__ import annotations

import mmap
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.disk_fill import Filler, used_ratio
from chaos.leftovers import Ledger, is_mounted, loop_backing_file
from chaos.loopfs import LoopFs, unsupported_reason

REASON = unsupported_reason()
pytestmark = [pytest.mark.root, pytest.mark.skipif(REASON is not None, reason=f"loop images: {REASON}")]

PAGE = 4096


def test_a_crash_copy_holds_flushed_mmap_writes_and_not_unflushed_ones(tmp_path):
    ledger = Ledger(tmp_path / "state.json")
    fs = LoopFs.create(tmp_path / "disk.img", 64 << 20, tmp_path / "mnt", ledger)
    try:
        path = fs.mountpoint / "data"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        os.posix_fallocate(fd, 0, 2 * PAGE)
        os.fsync(fd)  # the file and its size are on the device; its pages are not yet
        with mmap.mmap(fd, 2 * PAGE) as mm:
            mm[0:PAGE] = b"F" * PAGE
            mm.flush(0, PAGE)  # msync: this page reaches the device
            mm[PAGE:2 * PAGE] = b"U" * PAGE  # this one stays in the page cache
            fs.crash_swap()  # the "power loss", with the unflushed page still dirty
        os.close(fd)
        data = path.read_bytes()
        assert data[:PAGE] == b"F" * PAGE
        assert data[PAGE:] == bytes(PAGE)
        assert fs.generation == 1 and fs.mounted
    finally:
        fs.close()
    assert not is_mounted(tmp_path / "mnt")
    assert not (tmp_path / "disk.img").exists() and not fs.image.exists()
    assert ledger.entries() == []


def test_the_filler_takes_the_disk_past_a_ratio_and_gives_it_back(tmp_path):
    with LoopFs.create(tmp_path / "small.img", 32 << 20, tmp_path / "mnt", Ledger(tmp_path / "s.json")) as fs:
        filler = Filler(fs.mountpoint)
        before = used_ratio(fs.mountpoint)
        filler.fill_to_ratio(0.92)
        assert 0.915 <= used_ratio(fs.mountpoint) <= 0.93
        filler.leave_free(4 << 20)
        assert abs(filler.free_bytes() - (4 << 20)) < 64 << 10
        filler.release()
        assert abs(used_ratio(fs.mountpoint) - before) < 0.01


_HOLDER = """
import sys, time
from pathlib import Path
from chaos.leftovers import Ledger
from chaos.loopfs import LoopFs
root = Path(sys.argv[1])
fs = LoopFs.create(root / "disk.img", 32 << 20, root / "mnt", Ledger(root / "state.json"))
print(fs.device, flush=True)
time.sleep(120)
"""


def test_cleanup_undoes_a_killed_runs_mount_loop_device_and_image(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parents[2])
    try:
        assert holder.stdout is not None
        device = holder.stdout.readline().strip()
        assert device.startswith("/dev/loop")
        holder.send_signal(signal.SIGKILL)  # no finally runs: the mount and the loop device stay
        holder.wait(10)
        assert is_mounted(tmp_path / "mnt") and loop_backing_file(device) is not None
        done = subprocess.run([sys.executable, "-m", "chaos", "cleanup", "--state-file", str(tmp_path / "state.json")],
                              capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
        assert done.returncode == 0, done.stdout + done.stderr
        assert "unmounted" in done.stdout and "detached" in done.stdout
        assert not is_mounted(tmp_path / "mnt")
        assert loop_backing_file(device) is None
        assert not (tmp_path / "disk.img").exists()
        assert not (tmp_path / "state.json").exists()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
        subprocess.run([sys.executable, "-m", "chaos", "cleanup", "--force", "--state-file",
                        str(tmp_path / "state.json")], capture_output=True, timeout=120,
                       cwd=Path(__file__).resolve().parents[2])


def test_crash_copies_keep_a_fixed_name_and_only_the_current_image(tmp_path):
    """Forty crashes (the name once grew by ".crashN" per crash and cp failed at crash 33): each copy is named
    from the original image, and only the current one is on disk."""
    ledger = Ledger(tmp_path / "state.json")
    fs = LoopFs.create(tmp_path / "disk.img", 16 << 20, tmp_path / "mnt", ledger)
    try:
        (fs.mountpoint / "marker").write_bytes(b"kept")
        os.sync()
        for _ in range(40):
            fs.crash_swap()
        assert fs.image == tmp_path / "disk.crash40.img"
        assert sorted(p.name for p in tmp_path.glob("*.img")) == ["disk.crash40.img"]
        assert (fs.mountpoint / "marker").read_bytes() == b"kept"
    finally:
        fs.close()
    assert ledger.entries() == [] and not list(tmp_path.glob("*.img"))
