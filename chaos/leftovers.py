"""This module owns the ledger of what chaos runs set up outside their own process — broker processes,
mounts, loop devices, scratch directories, the lab network's namespaces, links and route (chaos/netns.py) — and
the cleanup of an interrupted run's leftovers.

Every resource is written to a small JSON state file *before* it exists (so a crash between the two leaves
a harmless stale line, never an unlisted mount) and taken off when it is gone. Each line names the process
that owns it (pid plus its /proc start time, so a recycled pid is not mistaken for the owner).
``cleanup()`` undoes the lines whose owner is dead, or all of them with ``force``: processes first (only
ours: pid and start time must match), then mounts, then loop devices (only while still backed by the
recorded file), then directories, then network namespaces (with any process still in them: a namespace only
this lab made holds only its processes), links and routes. sysctl values are restored by sysctl_profiles' own
state file.

The state file: ``$RMQ_LAB_CHAOS_STATE``, else ``/run/rmq-lab-chaos/state.json`` for root, else
``$TMPDIR/rmq-lab-chaos-<uid>/state.json``. Updates hold an exclusive ``flock`` on ``<file>.lock``.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

STATE_ENV: Final = "RMQ_LAB_CHAOS_STATE"
PENDING_LOOP: Final = "pending:"  # a loop entry made before losetup named the device: "pending:<image>"


class ResourceKind(enum.StrEnum):
    PROCESS = "process"
    MOUNT = "mount"
    LOOP = "loop"
    PATH = "path"
    NETNS = "netns"  # a network namespace (ip netns)
    LINK = "link"  # a network interface in the root namespace: a lab's bridge or a veth's root end
    ROUTE = "route"  # a lab's "unreachable <subnet>" route in the root namespace
    CONTAINER = "container"  # a docker container of a chaos cell (--topology docker), by name
    DOCKER_NETWORK = "docker_network"  # its docker network, by name


# Undo order: a process may hold files on a mount; a mount holds its loop device; the image lives in a path.
# A container (a bind-mounted store) goes with the processes, before its network. A namespace goes before the
# links (its veth pair goes with it), the route last (it guards the lab's subnet while the bridge is still there
# or half gone).
UNDO_ORDER: Final = (ResourceKind.PROCESS, ResourceKind.CONTAINER, ResourceKind.DOCKER_NETWORK, ResourceKind.MOUNT,
                     ResourceKind.LOOP, ResourceKind.PATH, ResourceKind.NETNS, ResourceKind.LINK, ResourceKind.ROUTE)
LAB_ROUTE_METRIC: Final = 4000  # far beneath a connected route (metric 0) and any default route


def default_state_path() -> Path:
    env = os.environ.get(STATE_ENV)
    if env:
        return Path(env)
    if os.geteuid() == 0 and os.access("/run", os.W_OK):
        return Path("/run/rmq-lab-chaos/state.json")
    return Path(tempfile.gettempdir()) / f"rmq-lab-chaos-{os.getuid()}" / "state.json"


def process_start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (clock ticks since boot), None when the process does not exist."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after the last ')'.
    return int(raw.rsplit(")", 1)[1].split()[19])


def process_alive(pid: int, start_time: int | None) -> bool:
    """Whether ``pid`` is still the process that had ``start_time`` (zombies count as gone)."""
    now = process_start_time(pid)
    if now is None or (start_time is not None and now != start_time):
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@dataclass(frozen=True)
class Entry:
    kind: ResourceKind
    ident: str  # pid, mount point, loop device or directory
    owner_pid: int
    owner_start: int | None
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "kind": self.kind.value}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Entry:
        return cls(ResourceKind(obj["kind"]), str(obj["ident"]), int(obj["owner_pid"]), obj.get("owner_start"),
                   dict(obj.get("detail") or {}))

    @property
    def owner_alive(self) -> bool:
        return process_alive(self.owner_pid, self.owner_start)


class Ledger:
    """The state file. Safe across threads and processes (each update is a locked read-modify-replace)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path if path is not None else default_state_path()
        self._me = os.getpid()
        self._my_start = process_start_time(self._me)
        # Entries of a kind this version does not know (written by another checkout of the lab sharing the
        # state file): kept verbatim on every rewrite and reported by cleanup, never undone and never a crash.
        self._unknown: list[dict[str, Any]] = []

    @contextlib.contextmanager
    def _locked(self) -> Iterator[list[Entry]]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            entries = self._read()
            before = list(entries)
            yield entries
            if entries != before:
                self._write(entries)

    def _read(self) -> list[Entry]:
        try:
            obj = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as e:
            raise RuntimeError(f"{self.path}: unreadable chaos state file ({e}); inspect and remove it") from e
        known: list[Entry] = []
        self._unknown = []
        for raw in obj.get("entries", []):
            try:
                known.append(Entry.from_json(raw))
            except (KeyError, TypeError, ValueError):
                self._unknown.append(raw)
        return known

    def _write(self, entries: list[Entry]) -> None:
        if not entries and not self._unknown:
            self.path.unlink(missing_ok=True)
            return
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        rows = [e.to_json() for e in entries] + self._unknown
        tmp.write_text(json.dumps({"entries": rows}, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)

    @property
    def owner(self) -> int:
        """The pid this ledger enters resources under."""
        return self._me

    def entries(self) -> list[Entry]:
        with self._locked() as entries:
            return list(entries)

    def unknown(self) -> list[str]:
        """The entries this version cannot read, each described for a person (as of the last read)."""
        return [f"{raw.get('kind', '?')} {raw.get('ident', '?')} (a kind this version does not know; left as it is)"
                if isinstance(raw, dict) else f"{raw!r} (not an entry; left as it is)" for raw in self._unknown]

    def add(self, kind: ResourceKind, ident: str | int | os.PathLike[str], **detail: Any) -> Entry:
        entry = Entry(kind, os.fspath(ident) if isinstance(ident, os.PathLike) else str(ident), self._me,
                      self._my_start, detail)
        with self._locked() as entries:
            entries.append(entry)
        return entry

    def remove(self, kind: ResourceKind, ident: str | int | os.PathLike[str]) -> None:
        with self._locked() as entries:
            name = os.fspath(ident) if isinstance(ident, os.PathLike) else str(ident)
            entries[:] = [e for e in entries if not (e.kind is kind and e.ident == name and e.owner_pid == self._me)]

    def drop(self, entry: Entry) -> None:
        with self._locked() as entries:
            entries[:] = [e for e in entries if e != entry]


# ---- undoing one resource ------------------------------------------------------------------------------


def run_cmd(args: list[str], timeout_s: float = 60.0, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run a system tool; raises RuntimeError with its stderr when it fails."""
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, check=False, input=stdin)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RuntimeError(f"{' '.join(args)}: {e}") from e
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {done.returncode}: {done.stderr.strip() or done.stdout.strip()}")
    return done


def remove_docker_object(kind: ResourceKind, name: str) -> str:
    """``docker rm -f -v`` a container or ``docker network rm`` a network; one already gone is no error (the
    topology removes its own on a normal end, the ledger covers an interrupted one)."""
    what = "container" if kind is ResourceKind.CONTAINER else "docker network"
    args = ["docker", "rm", "-f", "-v", name] if kind is ResourceKind.CONTAINER else ["docker", "network", "rm", name]
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RuntimeError(f"{' '.join(args)}: {e}") from e
    # `docker rm -f` of a missing container exits 0 and says so on stderr; `docker network rm` exits 1.
    gone = "no such" in done.stderr.lower() or "not found" in done.stderr.lower()
    if done.returncode != 0 and not gone:
        raise RuntimeError(f"{' '.join(args)} exited {done.returncode}: {done.stderr.strip()}")
    return f"{what} {name} was gone" if gone else f"removed {what} {name}"


def is_mounted(mountpoint: Path) -> bool:
    target = str(mountpoint.resolve()) if mountpoint.exists() else str(mountpoint)
    try:
        with open("/proc/self/mounts", encoding="utf-8") as f:
            return any(line.split()[1].replace("\\040", " ") == target for line in f)
    except OSError:
        return False


def loop_backing_file(device: str) -> str | None:
    """The file behind a loop device (sysfs), None when the device is not attached."""
    name = Path(device).name
    try:
        return Path(f"/sys/block/{name}/loop/backing_file").read_text().strip()
    except OSError:
        return None


def find_loop_for(image: str) -> str | None:
    """The loop device backed by ``image`` (sysfs), None when there is none."""
    target = str(Path(image).resolve())
    for dev in sorted(Path("/sys/block").glob("loop*")):
        backing = loop_backing_file(f"/dev/{dev.name}")
        if backing is not None and backing.removesuffix(" (deleted)") == target:
            return f"/dev/{dev.name}"
    return None


def terminate_process(pid: int, start_time: int | None, grace_s: float = 5.0) -> bool:
    """SIGCONT (it may be stopped), SIGTERM, then SIGKILL after ``grace_s``: only if it is still the same
    process. True when it is gone."""
    if not process_alive(pid, start_time):
        return True
    for sig in (signal.SIGCONT, signal.SIGTERM):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not process_alive(pid, start_time):
            return True
        time.sleep(0.05)
    if process_alive(pid, start_time):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    return not process_alive(pid, start_time)


def unmount(mountpoint: Path) -> None:
    if not is_mounted(mountpoint):
        return
    try:
        run_cmd(["umount", str(mountpoint)])
    except RuntimeError:
        # Busy (a process we could not end still has a file open): detach it from the tree now; the kernel
        # finishes the unmount when the last user goes.
        run_cmd(["umount", "-l", str(mountpoint)])


def detach_loop(device: str, backing: str | None) -> None:
    now = loop_backing_file(device)
    if now is None:
        return
    if backing is not None and now.removesuffix(" (deleted)") != backing:
        return  # the device was reused for someone else's file since we recorded it
    run_cmd(["losetup", "-d", device])


def delete_netns(name: str) -> None:
    """End the processes still in namespace ``name`` (``ip netns pids``), then delete it (its veth pair and
    nftables tables go with it). Nothing to do when it is gone."""
    if not Path(f"/run/netns/{name}").exists():
        return
    with contextlib.suppress(RuntimeError):
        for pid in run_cmd(["ip", "netns", "pids", name]).stdout.split():
            terminate_process(int(pid), process_start_time(int(pid)))
    run_cmd(["ip", "netns", "delete", name])


def delete_link(name: str) -> None:
    """Delete a link unless it is gone: a veth goes with its peer's namespace, which the kernel tears down a
    moment after ``ip netns delete`` returns, so "not found" after a race is success too."""
    path = Path(f"/sys/class/net/{name}")
    if not path.exists():
        return
    try:
        run_cmd(["ip", "link", "delete", name])
    except RuntimeError:
        if path.exists():
            raise


def delete_unreachable_route(subnet: str, metric: int = LAB_ROUTE_METRIC) -> None:
    shown = run_cmd(["ip", "route", "show", "exact", subnet, "type", "unreachable"]).stdout
    if f"metric {metric}" in shown:
        run_cmd(["ip", "route", "delete", "unreachable", subnet, "metric", str(metric)])


def undo(entry: Entry) -> str:
    """Undo one resource; returns what was done (raises RuntimeError when it could not be undone)."""
    if entry.kind is ResourceKind.PROCESS:
        gone = terminate_process(int(entry.ident), entry.detail.get("start_time"))
        if not gone:
            raise RuntimeError(f"process {entry.ident} did not end")
        return f"process {entry.ident} ({entry.detail.get('what', '?')}) ended"
    if entry.kind in (ResourceKind.CONTAINER, ResourceKind.DOCKER_NETWORK):
        return remove_docker_object(entry.kind, str(entry.ident))
    if entry.kind is ResourceKind.MOUNT:
        unmount(Path(entry.ident))
        return f"unmounted {entry.ident}"
    if entry.kind is ResourceKind.LOOP:
        backing = entry.detail.get("backing")
        device: str | None = entry.ident
        if entry.ident.startswith(PENDING_LOOP):  # recorded before losetup said which device it took
            device = find_loop_for(entry.ident.removeprefix(PENDING_LOOP))
        if device is not None:
            detach_loop(device, backing)
        return f"detached {device or 'nothing'} ({backing})"
    if entry.kind is ResourceKind.NETNS:
        delete_netns(entry.ident)
        return f"deleted network namespace {entry.ident}"
    if entry.kind is ResourceKind.LINK:
        delete_link(entry.ident)
        return f"deleted link {entry.ident}"
    if entry.kind is ResourceKind.ROUTE:
        delete_unreachable_route(entry.ident, int(entry.detail.get("metric", LAB_ROUTE_METRIC)))
        return f"deleted route unreachable {entry.ident}"
    path = Path(entry.ident)
    if path.exists():
        if is_mounted(path):
            raise RuntimeError(f"{path} is still a mount point; not removed")
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    return f"removed {entry.ident}"


@dataclass
class CleanupReport:
    done: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # owned by a live process (not forced)
    sysctl: str | None = None

    @property
    def ok(self) -> bool:
        return not self.failed


def cleanup(ledger: Ledger | None = None, *, force: bool = False, only_mine: bool = False,
            restore_sysctl: bool = True) -> CleanupReport:
    """Undo the ledger's entries whose owner is dead (``force``: every entry; ``only_mine``: this process's
    entries, for a run's own ``finally``)."""
    ledger = ledger if ledger is not None else Ledger()
    report = CleanupReport()
    entries = ledger.entries()
    report.kept.extend(ledger.unknown())
    me = os.getpid()
    chosen = []
    for e in entries:
        if only_mine:
            if e.owner_pid == me:
                chosen.append(e)
        elif force or not e.owner_alive:
            chosen.append(e)
        else:
            report.kept.append(f"{e.kind.value} {e.ident} (owner pid {e.owner_pid} is running)")
    for kind in UNDO_ORDER:
        for e in reversed([e for e in chosen if e.kind is kind]):  # newest first: a later mount may sit on an older
            try:
                report.done.append(undo(e))
                ledger.drop(e)
            except (RuntimeError, OSError) as exc:
                report.failed.append(f"{e.kind.value} {e.ident}: {exc}")
    if restore_sysctl and not only_mine:
        report.sysctl = _restore_sysctl()
    return report


def _restore_sysctl() -> str:
    from sysctl_profiles import SysctlProfileError, restore_state_file

    try:
        return restore_state_file().value
    except SysctlProfileError as e:
        return f"not restored: {e}"
