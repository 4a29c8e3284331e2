"""harness/memory_cgroup.py: the plan on fake /proc texts and a fake cgroup tree, then a real group as root."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from harness.memory_cgroup import (
    CgroupError,
    CgroupVersion,
    MemoryCgroup,
    Plan,
    Skip,
    detect,
    group_dir,
    major_faults,
    parse_memory_stat,
    parse_mountinfo,
    parse_proc_cgroup,
    parse_size,
    plan,
    stats_from,
)

# This lab's machine: cgroup v1 with memory at /sys/fs/cgroup/memory, an empty cgroup2 at .../unified.
PROC_CGROUP_V1 = """9:name=systemd:/
4:memory:/process_api/abc
3:cpuset:/
0::/
"""
MOUNTINFO_HYBRID = """31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
PROC_CGROUP_V2 = "0::/user.slice/lab\n"
MOUNTINFO_V2 = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


def test_v1_memory_line_and_v2_line_are_told_apart() -> None:
    assert parse_proc_cgroup(PROC_CGROUP_V1) == {CgroupVersion.V1: "/process_api/abc", CgroupVersion.V2: "/"}
    assert parse_proc_cgroup("5:cpu,memory:/a\n") == {CgroupVersion.V1: "/a"}


def test_mountinfo_finds_the_memory_hierarchy_not_another_v1_controller() -> None:
    mounts = parse_mountinfo(MOUNTINFO_HYBRID)
    assert mounts[CgroupVersion.V1].mount_point == Path("/sys/fs/cgroup/memory")
    assert mounts[CgroupVersion.V2].mount_point == Path("/sys/fs/cgroup/unified")


def test_v1_is_planned_under_the_processes_own_group() -> None:
    p = plan(PROC_CGROUP_V1, MOUNTINFO_HYBRID, 1 << 30, "child", euid=0, v2_subtree_control="")
    assert isinstance(p, Plan)
    assert p.version is CgroupVersion.V1
    assert p.path == Path("/sys/fs/cgroup/memory/process_api/abc/child")
    assert p.limit_file.name == "memory.limit_in_bytes"


def test_a_mount_of_a_sub_tree_maps_the_path_relative_to_its_root() -> None:
    mounts = parse_mountinfo("35 31 0:32 /process_api /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n")
    assert group_dir(mounts[CgroupVersion.V1], "/process_api/abc") == Path("/sys/fs/cgroup/memory/abc")
    assert group_dir(mounts[CgroupVersion.V1], "/elsewhere") is None


def test_v2_needs_memory_delegated_to_the_children() -> None:
    p = plan(PROC_CGROUP_V2, MOUNTINFO_V2, 1 << 30, "child", euid=0, v2_subtree_control="cpu memory io")
    assert isinstance(p, Plan) and p.version is CgroupVersion.V2
    assert p.path == Path("/sys/fs/cgroup/user.slice/lab/child") and p.limit_file.name == "memory.max"
    skip = plan(PROC_CGROUP_V2, MOUNTINFO_V2, 1 << 30, "child", euid=0, v2_subtree_control="cpu io")
    assert isinstance(skip, Skip) and "subtree_control" in skip.reason


def test_hybrid_without_v1_memory_falls_back_to_v2_reasons() -> None:
    skip = plan("0::/\n", MOUNTINFO_HYBRID, 1 << 30, "child", euid=0, v2_subtree_control="")
    assert isinstance(skip, Skip) and "v2" in skip.reason


def test_not_root_is_a_skip_with_the_reason() -> None:
    skip = plan(PROC_CGROUP_V1, MOUNTINFO_HYBRID, 1 << 30, "child", euid=1000)
    assert isinstance(skip, Skip) and "not root" in skip.reason


def test_stats_read_cache_per_version() -> None:
    v1 = parse_memory_stat("cache 100\nrss 7\npgmajfault 3\ntotal_cache 120\ntotal_rss 8\ntotal_pgmajfault 4\n",
                           CgroupVersion.V1)
    assert stats_from(CgroupVersion.V1, v1, 200, 300).to_json() == {
        "usage_bytes": 200, "peak_bytes": 300, "cache_bytes": 120, "rss_bytes": 8, "pgmajfault": 4}
    v2 = parse_memory_stat("anon 5\nfile 50\npgmajfault 2\n", CgroupVersion.V2)
    s = stats_from(CgroupVersion.V2, v2, 55, None)
    assert (s.cache_bytes, s.rss_bytes, s.pgmajfault) == (50, 5, 2)


def test_sizes_and_proc_stat() -> None:
    assert parse_size("4GiB") == 4 << 30 and parse_size("384MiB") == 384 << 20 and parse_size("1024") == 1024
    with pytest.raises(ValueError):
        parse_size("lots")
    stat = "42 (a b) c) S 1 42 42 0 -1 4194560 100 0 7 0 5 6 0 0 20 0 1 0 1 1 1"
    assert major_faults(stat) == 7


def _fake_tree(tmp_path: Path, version: CgroupVersion) -> tuple[Path, Path]:
    """A /proc/self and a cgroup hierarchy under tmp_path; (proc_self, own group dir)."""
    proc = tmp_path / "proc" / "self"
    proc.mkdir(parents=True)
    mount = tmp_path / "cg"
    own = mount / "lab" / "me"
    own.mkdir(parents=True)
    (own / "cgroup.procs").write_text(f"{os.getpid()}\n")
    if version is CgroupVersion.V1:
        (proc / "cgroup").write_text("4:memory:/lab/me\n0::/\n")
        (proc / "mountinfo").write_text(f"35 31 0:32 / {mount} rw - cgroup cgroup rw,memory\n")
    else:
        (proc / "cgroup").write_text("0::/lab/me\n")
        (proc / "mountinfo").write_text(f"30 23 0:26 / {mount} rw - cgroup2 cgroup2 rw\n")
        (own / "cgroup.subtree_control").write_text("memory pids\n")
    return proc, own


@pytest.mark.parametrize("version", [CgroupVersion.V1, CgroupVersion.V2])
@pytest.mark.skipif(os.geteuid() != 0, reason="plan() asks for root")
def test_fake_tree_group_is_created_limited_joined_and_removed(tmp_path: Path, version: CgroupVersion) -> None:
    proc, own = _fake_tree(tmp_path, version)
    p = detect(64 << 20, name="child", proc_self=proc)
    assert isinstance(p, Plan) and p.version is version and p.path == own / "child"
    cg = MemoryCgroup(p, rmdir=shutil.rmtree)
    with cg:
        assert p.limit_file.read_text() == str(64 << 20)
        cg.admit(12345)
        assert cg.pids() == [12345]
        (p.procs_file).write_text("")  # the process left
    assert not p.path.exists()
    assert cg.removed


@pytest.mark.skipif(os.geteuid() != 0, reason="plan() asks for root")
def test_fake_tree_stragglers_are_moved_to_the_parent_and_the_group_removed(tmp_path: Path) -> None:
    proc, own = _fake_tree(tmp_path, CgroupVersion.V1)
    p = detect(64 << 20, name="child", proc_self=proc)
    assert isinstance(p, Plan)
    cg = MemoryCgroup(p, rmdir=shutil.rmtree).create()
    cg.admit(777)
    cg.close(timeout_s=0.2)
    assert (own / "cgroup.procs").read_text() == "777"  # moved, not killed
    assert not p.path.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="plan() asks for root")
def test_fake_tree_a_failed_setup_removes_the_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proc, _own = _fake_tree(tmp_path, CgroupVersion.V1)
    p = detect(64 << 20, name="child", proc_self=proc)
    assert isinstance(p, Plan)
    real_write = Path.write_text

    def refuse_limit(self: Path, *a: Any, **kw: Any) -> int:
        if self == p.limit_file:
            raise OSError(16, "Device or resource busy")
        return real_write(self, *a, **kw)

    monkeypatch.setattr(Path, "write_text", refuse_limit)
    with pytest.raises(CgroupError, match="cannot set up memory cgroup"):
        MemoryCgroup(p, rmdir=shutil.rmtree).create()
    assert not p.path.exists()


# ---- a real group ------------------------------------------------------------------------------------------

READER = """
import sys
path, chunk = sys.argv[1], 1 << 20
sys.stdin.readline()  # admitted into the group: start
n = 0
with open(path, "rb", buffering=0) as f:
    while (b := f.read(chunk)):
        n += len(b)
print(n, flush=True)
sys.stdin.readline()
"""


@pytest.mark.e2e
@pytest.mark.root
def test_a_real_process_reading_more_than_the_limit_keeps_its_cache_under_it(tmp_path: Path) -> None:
    limit = 32 << 20
    p = detect(limit)
    if isinstance(p, Skip):
        pytest.skip(p.reason)
    data = tmp_path / "big"
    size = 96 << 20
    with open(data, "wb") as f:
        for _ in range(size >> 20):
            f.write(os.urandom(1 << 20))
        f.flush()
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)  # clean, unmapped: evicted, so read anew
    cg = MemoryCgroup(p)
    with cg:
        assert cg.limit() == limit
        with subprocess.Popen([sys.executable, "-c", READER, str(data)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) as child:
            try:
                cg.admit(child.pid)
                assert cg.pids() == [child.pid]
                assert child.stdin is not None and child.stdout is not None
                child.stdin.write("go\n")
                child.stdin.flush()
                read = int(child.stdout.readline())
                stats = cg.stats()
            finally:
                child.kill()
                child.wait()
        assert read == size
        assert stats.cache_bytes <= limit and stats.usage_bytes <= limit
        # It did charge its page cache here: the group filled up to near its limit while reading 3x the limit.
        assert stats.peak_bytes is not None and stats.peak_bytes > limit // 2
        assert stats.cache_bytes > limit // 4
        deadline = time.monotonic() + 5
        while cg.pids() and time.monotonic() < deadline:
            time.sleep(0.05)
    assert cg.removed and not p.path.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="plan() asks for root")
def test_fake_tree_oom_kills_are_read_per_version(tmp_path: Path) -> None:
    cases = ((CgroupVersion.V1, "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"),
             (CgroupVersion.V2, "memory.events", "low 0\nhigh 0\nmax 9\noom 1\noom_kill 1\n"))
    for version, name, text in cases:
        proc, _own = _fake_tree(tmp_path / version.value, version)
        p = detect(64 << 20, name="child", proc_self=proc)
        assert isinstance(p, Plan)
        with MemoryCgroup(p, rmdir=shutil.rmtree) as cg:
            assert cg.oom_kills() is None
            (p.path / name).write_text(text)
            assert cg.oom_kills() == (2 if version is CgroupVersion.V1 else 1)
