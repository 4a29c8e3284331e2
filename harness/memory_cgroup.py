"""This module owns a memory cgroup for the broker: a child group of this process's own memory cgroup, with a
memory limit, that a broker is moved into right after it is spawned and that is removed on every path.

Why: the kernel charges page cache to the cgroup of the process that faults it in (mm/memcontrol.c), so a
broker whose group is limited to L bytes keeps at most L of its commit log cached; a backlog of a few GiB is
then larger than its page cache by construction, and a drain from its start reads from disk — the seeds'
"backlog larger than RAM" case on a machine with more RAM than disk budget.

Both hierarchies (paths and file names):

=======  =====================================  ======================  =====================================
version  found by                               limit file              cache / major faults in memory.stat
=======  =====================================  ======================  =====================================
v1       ``N:...memory...:/path`` in             ``memory.limit_in_``    ``cache`` (``total_cache`` with
         /proc/self/cgroup + a ``cgroup`` mount  ``bytes``               children), ``pgmajfault``
         whose super options hold ``memory``
v2       ``0::/path`` + the ``cgroup2`` mount,   ``memory.max``          ``file``, ``pgmajfault``
         ``memory`` in the group's
         ``cgroup.subtree_control``
=======  =====================================  ======================  =====================================

v1 is preferred where both exist (a hybrid host like this lab's: cgroup2 mounted with no controllers, memory on
v1). v2's "no internal processes" rule means a child can only get the memory controller when the parent's
``cgroup.subtree_control`` already delegates it; this module does not rearrange the hierarchy to get there, it
says why not instead. The path of a group on disk is the mount point plus the group's path relative to the
mount's root (the 4th field of /proc/self/mountinfo: a container may see a sub-tree mounted as its "/").

The parsing and planning are pure (``parse_*``, ``plan``); ``MemoryCgroup`` is the I/O shell: mkdir, limit,
admit pids, read stats, and ``close`` (wait for the processes to leave, move stragglers to the parent, rmdir).
"""

from __future__ import annotations

import enum
import errno
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

PROC_SELF: Final = Path("/proc/self")
V1_LIMIT: Final = "memory.limit_in_bytes"
V1_USAGE: Final = "memory.usage_in_bytes"
V1_MAX_USAGE: Final = "memory.max_usage_in_bytes"
V2_LIMIT: Final = "memory.max"
V2_USAGE: Final = "memory.current"
V2_PEAK: Final = "memory.peak"  # 5.19+
LEAVE_TIMEOUT_S: Final = 10.0


class CgroupVersion(enum.Enum):
    V1 = "v1"
    V2 = "v2"


class CgroupError(RuntimeError):
    """The group could not be created, limited, joined or removed; the message says which file failed."""


@dataclass(frozen=True)
class Mount:
    version: CgroupVersion
    root: str  # the hierarchy path mounted here (mountinfo field 4)
    mount_point: Path


@dataclass(frozen=True)
class Plan:
    """Where the child group goes and how it is limited."""

    version: CgroupVersion
    parent: Path  # this process's own memory cgroup, on disk
    path: Path  # the child group to create
    limit_bytes: int

    def _file(self, v1: str, v2: str) -> Path:
        return self.path / (v1 if self.version is CgroupVersion.V1 else v2)

    @property
    def limit_file(self) -> Path:
        return self._file(V1_LIMIT, V2_LIMIT)

    @property
    def usage_file(self) -> Path:
        return self._file(V1_USAGE, V2_USAGE)

    @property
    def peak_file(self) -> Path:
        return self._file(V1_MAX_USAGE, V2_PEAK)

    @property
    def events_file(self) -> Path:
        """Where the OOM kills are counted (``oom_kill N``)."""
        return self._file("memory.oom_control", "memory.events")

    @property
    def procs_file(self) -> Path:
        return self.path / "cgroup.procs"

    @property
    def stat_file(self) -> Path:
        return self.path / "memory.stat"


@dataclass(frozen=True)
class Skip:
    """No memory cgroup here, and why (for the run record and the test's skip message)."""

    reason: str


@dataclass(frozen=True)
class MemoryStats:
    """One reading of the group: bytes, and major faults of its processes (memory.stat pgmajfault)."""

    usage_bytes: int
    peak_bytes: int | None
    cache_bytes: int  # page cache charged to the group (v1 cache, v2 file)
    rss_bytes: int  # anonymous memory (v1 rss, v2 anon)
    pgmajfault: int | None

    def to_json(self) -> dict[str, int | None]:
        return {"usage_bytes": self.usage_bytes, "peak_bytes": self.peak_bytes, "cache_bytes": self.cache_bytes,
                "rss_bytes": self.rss_bytes, "pgmajfault": self.pgmajfault}


# ---- pure: parsing and planning ----------------------------------------------------------------------------


def parse_proc_cgroup(text: str) -> dict[CgroupVersion, str]:
    """This process's memory cgroup path per hierarchy, from /proc/self/cgroup (``id:controllers:path``)."""
    found: dict[CgroupVersion, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hid, controllers, path = parts
        if hid == "0" and controllers == "":
            found[CgroupVersion.V2] = path
        elif "memory" in controllers.split(","):
            found[CgroupVersion.V1] = path
    return found


def parse_mountinfo(text: str) -> dict[CgroupVersion, Mount]:
    """The memory hierarchy's v1 mount and the cgroup2 mount, from /proc/self/mountinfo (proc(5): fields up
    to `` - ``, then fstype, source, super options)."""
    found: dict[CgroupVersion, Mount] = {}
    for line in text.splitlines():
        head, sep, tail = line.partition(" - ")
        if not sep:
            continue
        fields_ = head.split()
        rest = tail.split()
        if len(fields_) < 5 or len(rest) < 3:
            continue
        fstype, options = rest[0], rest[2].split(",")
        root, point = _unescape(fields_[3]), Path(_unescape(fields_[4]))
        if fstype == "cgroup" and "memory" in options and CgroupVersion.V1 not in found:
            found[CgroupVersion.V1] = Mount(CgroupVersion.V1, root, point)
        elif fstype == "cgroup2" and CgroupVersion.V2 not in found:
            found[CgroupVersion.V2] = Mount(CgroupVersion.V2, root, point)
    return found


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (\\040 ...)."""
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def group_dir(mount: Mount, cgroup_path: str) -> Path | None:
    """The directory of ``cgroup_path`` (a hierarchy path) under ``mount``; None when the mount does not show it
    (the group lies outside the mounted sub-tree)."""
    root = mount.root.rstrip("/")
    if root and cgroup_path != root and not cgroup_path.startswith(root + "/"):
        return None
    rel = cgroup_path[len(root):].lstrip("/")
    return mount.mount_point / rel if rel else mount.mount_point


def plan(proc_cgroup: str, mountinfo: str, limit_bytes: int, name: str, *, euid: int,
         v2_subtree_control: str | None = None) -> Plan | Skip:
    """Where a child group ``name`` with ``limit_bytes`` goes, or why it cannot (not root, no memory
    controller). ``v2_subtree_control``: the text of the own v2 group's cgroup.subtree_control (None = not
    readable), consulted only when there is no v1 memory hierarchy."""
    if limit_bytes <= 0:
        return Skip(f"memory limit must be > 0 bytes, got {limit_bytes}")
    if euid != 0:
        return Skip(f"not root (euid {euid}): a memory cgroup cannot be created")
    paths = parse_proc_cgroup(proc_cgroup)
    mounts = parse_mountinfo(mountinfo)
    reasons = []
    if CgroupVersion.V1 in paths:
        if CgroupVersion.V1 in mounts:
            parent = group_dir(mounts[CgroupVersion.V1], paths[CgroupVersion.V1])
            if parent is not None:
                return Plan(CgroupVersion.V1, parent, parent / name, limit_bytes)
            reasons.append(f"v1: own memory cgroup {paths[CgroupVersion.V1]} is outside the mounted hierarchy")
        else:
            reasons.append("v1: the memory hierarchy is not mounted")
    if CgroupVersion.V2 in paths and CgroupVersion.V2 in mounts:
        parent = group_dir(mounts[CgroupVersion.V2], paths[CgroupVersion.V2])
        if parent is None:
            reasons.append(f"v2: own cgroup {paths[CgroupVersion.V2]} is outside the mounted hierarchy")
        elif v2_subtree_control is None or "memory" not in v2_subtree_control.split():
            # The "no internal processes" rule: this process sits in the parent, so the parent cannot enable
            # memory for its children itself; someone above must have delegated it.
            reasons.append(f"v2: the memory controller is not enabled for children of {parent} "
                           "(cgroup.subtree_control)")
        else:
            return Plan(CgroupVersion.V2, parent, parent / name, limit_bytes)
    elif CgroupVersion.V1 not in paths:
        reasons.append("no memory cgroup in /proc/self/cgroup")
    return Skip("no writable memory cgroup: " + "; ".join(reasons))


def parse_memory_stat(text: str, version: CgroupVersion) -> dict[str, int]:
    """memory.stat as a dict (``key value`` lines)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        try:
            out[key] = int(value)
        except ValueError:
            continue
    return out


def stats_from(version: CgroupVersion, stat: dict[str, int], usage: int, peak: int | None) -> MemoryStats:
    if version is CgroupVersion.V1:
        # total_* include child groups (none here); cache covers mapped and unmapped file pages.
        cache = stat.get("total_cache", stat.get("cache", 0))
        rss = stat.get("total_rss", stat.get("rss", 0))
        faults = stat.get("total_pgmajfault", stat.get("pgmajfault"))
    else:
        cache, rss, faults = stat.get("file", 0), stat.get("anon", 0), stat.get("pgmajfault")
    return MemoryStats(usage, peak, cache, rss, faults)


def parse_size(text: str) -> int:
    """``1GiB``, ``512MiB``, ``4G``, ``1073741824`` -> bytes (binary units; the options' and tox's style)."""
    t = text.strip().replace("_", "")
    units = {"kib": 1 << 10, "k": 1 << 10, "kb": 1 << 10, "mib": 1 << 20, "m": 1 << 20, "mb": 1 << 20,
             "gib": 1 << 30, "g": 1 << 30, "gb": 1 << 30, "tib": 1 << 40, "t": 1 << 40, "tb": 1 << 40, "b": 1}
    low = t.lower()
    for suffix in sorted(units, key=len, reverse=True):
        if low.endswith(suffix) and low[:-len(suffix)].strip():
            number = low[:-len(suffix)].strip()
            try:
                return int(float(number) * units[suffix])
            except ValueError:
                break
    try:
        return int(t)
    except ValueError:
        raise ValueError(f"cannot read {text!r} as a size (e.g. 4GiB, 512MiB, 1073741824)") from None


def major_faults(proc_stat: str) -> int:
    """majflt of /proc/PID/stat (field 12; counted after the ``(comm)``, which may hold spaces)."""
    return int(proc_stat.rsplit(")", 1)[1].split()[9])


# ---- I/O shell ---------------------------------------------------------------------------------------------


def detect(limit_bytes: int, name: str | None = None, proc_self: Path = PROC_SELF) -> Plan | Skip:
    """``plan`` for this process, read from /proc (``proc_self``: another tree, for tests)."""
    name = name or f"rmq-lab-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        proc_cgroup = (proc_self / "cgroup").read_text()
        mountinfo = (proc_self / "mountinfo").read_text()
    except OSError as exc:
        return Skip(f"cannot read /proc: {exc}")
    subtree = None
    v2_path = parse_proc_cgroup(proc_cgroup).get(CgroupVersion.V2)
    v2_mount = parse_mountinfo(mountinfo).get(CgroupVersion.V2)
    if v2_path is not None and v2_mount is not None:
        d = group_dir(v2_mount, v2_path)
        if d is not None:
            try:
                subtree = (d / "cgroup.subtree_control").read_text()
            except OSError:
                subtree = None
    return plan(proc_cgroup, mountinfo, limit_bytes, name, euid=os.geteuid(), v2_subtree_control=subtree)


class MemoryCgroup:
    """``with MemoryCgroup(plan) as cg: cg.admit(pid)`` — the group exists inside the block and is gone after
    it, whatever happened (``close`` also on a failed ``create``)."""

    def __init__(self, plan_: Plan, rmdir: Callable[[Path], None] = Path.rmdir) -> None:
        self.plan = plan_
        self._rmdir = rmdir  # cgroupfs removes a group's control files with it; a test's fake tree cannot
        self.created = False
        self.removed = False

    @property
    def path(self) -> Path:
        return self.plan.path

    def create(self) -> MemoryCgroup:
        p = self.plan
        try:
            p.path.mkdir()
            self.created = True
            # v1: a limit below the current usage fails with EBUSY; the group is new and empty, so it cannot.
            p.limit_file.write_text(str(p.limit_bytes))
        except OSError as exc:
            self.close()
            raise CgroupError(f"cannot set up memory cgroup {p.path}: {exc}") from exc
        return self

    def admit(self, pid: int) -> None:
        """Move ``pid`` (and so the children it forks after this) into the group. Pages it charged before stay
        with the old group (v1's move_charge_at_immigrate is 0): call it right after spawn."""
        try:
            self.plan.procs_file.write_text(str(pid))
        except OSError as exc:
            raise CgroupError(f"cannot move pid {pid} into {self.plan.path}: {exc}") from exc

    def pids(self) -> list[int]:
        try:
            return [int(x) for x in self.plan.procs_file.read_text().split()]
        except (OSError, ValueError):
            return []

    def limit(self) -> int:
        text = self.plan.limit_file.read_text().strip()
        return -1 if text == "max" else int(text)

    def stats(self) -> MemoryStats:
        p = self.plan
        usage = int(p.usage_file.read_text())
        try:
            peak: int | None = int(p.peak_file.read_text())
        except (OSError, ValueError):
            peak = None
        return stats_from(p.version, parse_memory_stat(p.stat_file.read_text(), p.version), usage, peak)

    def oom_kills(self) -> int | None:
        """Processes the kernel's OOM killer ended in this group (v1 memory.oom_control, v2 memory.events):
        a limit below the broker's own memory ends it, and this says so."""
        try:
            return parse_memory_stat(self.plan.events_file.read_text(), self.plan.version).get("oom_kill")
        except OSError:
            return None

    def close(self, timeout_s: float = LEAVE_TIMEOUT_S) -> None:
        """Remove the group: wait (bounded) for its processes to exit, move any left to the parent (a process
        must not be killed by a cleanup), then rmdir; its page-cache charges go to the parent. Idempotent."""
        if not self.created or self.removed:
            return
        deadline = time.monotonic() + timeout_s
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in self.pids():
            try:
                (self.plan.parent / "cgroup.procs").write_text(str(pid))
            except OSError:
                pass  # exited meanwhile
        for attempt in range(50):
            try:
                self._rmdir(self.plan.path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                # EBUSY for a moment after the last task left (its exit still being accounted).
                if exc.errno == errno.EBUSY and attempt < 49:
                    time.sleep(0.1)
                    continue
                raise CgroupError(f"cannot remove memory cgroup {self.plan.path}: {exc}") from exc
            self.removed = True
            return

    def __enter__(self) -> MemoryCgroup:
        return self.create() if not self.created else self

    def __exit__(self, *exc: object) -> None:
        self.close()
