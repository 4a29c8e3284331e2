"""The state file (values to put back, written before anything changes) and the machine-wide apply lock.

State file (JSON, one object):

| field | meaning |
|---|---|
| `format` | `"sysctl_profiles.state/1"` |
| `profile` | name of the profile being applied |
| `pid` | pid of the applying process |
| `created_ns` | `time.time_ns()` when written |
| `saved` | key -> value in force before the apply, in write order (changed keys and coupled partners) |

It lives in /run by default: /run is a tmpfs, so after a reboot — which also resets every sysctl —
there is no stale state file to act on. It is written atomically (temp file, fsync, rename) so a
killed apply leaves either no file (nothing was changed yet) or a complete one.

The lock (flock on /run/sysctl_profiles/lock) serialises applies and restores on the machine: two
experiments changing the same global settings at once would each record the other's values as
"originals". flock dies with its holder, so a SIGKILLed apply never leaves a stuck lock.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from sysctl_profiles.errors import LockedError, StateFileError

STATE_DIR = Path("/run/sysctl_profiles")
DEFAULT_STATE_FILE = STATE_DIR / "state.json"
LOCK_FILE = STATE_DIR / "lock"
FORMAT = "sysctl_profiles.state/1"


@dataclass(frozen=True)
class SavedState:
    profile: str
    pid: int
    created_ns: int
    saved: dict[str, str]


def encode_state(state: SavedState) -> bytes:
    doc = {
        "format": FORMAT,
        "profile": state.profile,
        "pid": state.pid,
        "created_ns": state.created_ns,
        "saved": state.saved,
    }
    return (json.dumps(doc, indent=2) + "\n").encode()


def decode_state(data: bytes, source: str = "<bytes>") -> SavedState:
    try:
        doc = json.loads(data)
    except ValueError as e:
        raise StateFileError(f"{source}: not JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise StateFileError(f"{source}: not a sysctl_profiles state file (format {FORMAT!r} expected)")
    saved = doc.get("saved")
    if not isinstance(saved, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in saved.items()):
        raise StateFileError(f"{source}: 'saved' must map keys to value strings")
    try:
        return SavedState(str(doc["profile"]), int(doc["pid"]), int(doc["created_ns"]), dict(saved))
    except (KeyError, TypeError, ValueError) as e:
        raise StateFileError(f"{source}: bad field ({e})") from None


def new_state(profile: str, saved: dict[str, str]) -> SavedState:
    return SavedState(profile, os.getpid(), time.time_ns(), saved)


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def save_state(path: Path, state: SavedState) -> None:
    write_atomic(path, encode_state(state))


def load_state(path: Path) -> SavedState:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise StateFileError(f"{path}: {e.strerror}") from None
    return decode_state(data, str(path))


class ApplyLock:
    """Non-blocking exclusive flock; the holder's pid is written into the file for the error message."""

    def __init__(self, path: Path = LOCK_FILE) -> None:
        self.path = path
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise LockedError(f"cannot open the lock {self.path}: {e.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise LockedError(
                f"another sysctl_profiles apply/restore is running (pid {holder}; lock {self.path})"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None
