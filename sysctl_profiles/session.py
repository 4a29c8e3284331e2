"""Applying a profile and always putting things back: the shell around the sans-IO plan.

Order of an apply (each step can fail without leaving a change behind):
1. parse the profile, read the values in force, check every target (unknown key, action key, shape);
2. decide whether it can be applied (root? every key to change writable?) — if not, it is *not
   applied*, with the reason, and nothing is written;
3. take the machine-wide lock, refuse if a state file from a killed apply is left over;
4. write the state file (values to put back), then write the changes; a failed write rolls back;
5. read back the values actually in force — that is what gets recorded.
`restore()` writes the saved values back (coupled pairs via their non-zero member), verifies them,
then removes the state file and drops the lock.
"""

from __future__ import annotations

import enum
import errno
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from sysctl_profiles import procsys
from sysctl_profiles.catalog import load_profile
from sysctl_profiles.errors import LeftoverStateError, ProfileError, RestoreError, StateFileError, SysctlProfileError
from sysctl_profiles.plan import (
    PARTNER,
    Change,
    Unavailable,
    check_targets,
    keys_to_save,
    mismatches,
    plan_apply,
    restore_plan,
)
from sysctl_profiles.profile import Profile, resolve
from sysctl_profiles.record import sysctl_entry
from sysctl_profiles.state_file import DEFAULT_STATE_FILE, ApplyLock, load_state, new_state, save_state

# Keys recorded with every profile, so runs under different profiles can be compared key by key.
WATCH_PROFILE = "default"


class ApplyStatus(enum.Enum):
    APPLIED = "applied"
    ALREADY_IN_FORCE = "already in force"  # nothing to write (record-only profiles included)
    NOT_ROOT = "not root"
    READ_ONLY = "read-only key"
    WRITE_DENIED = "write denied"


class RestoreOutcome(enum.Enum):
    RESTORED = "restored"
    NOTHING_TO_RESTORE = "nothing to restore"


@dataclass(frozen=True)
class AppliedState:
    profile: str
    status: ApplyStatus
    reason: str | None
    values: dict[str, str]
    changes: tuple[Change, ...] = ()

    @property
    def applied(self) -> bool:
        return self.status in (ApplyStatus.APPLIED, ApplyStatus.ALREADY_IN_FORCE)

    def record(self) -> dict[str, Any]:
        """The run-record entry: {"profile", "applied", "reason", "values"}."""
        return sysctl_entry(self.profile, self.applied, self.reason, self.values)


class ProfileNotApplied(SysctlProfileError):
    def __init__(self, state: AppliedState) -> None:
        super().__init__(f"profile {state.profile} not applied: {state.reason}")
        self.state = state


@dataclass(frozen=True)
class Prepared:
    targets: dict[str, str | None]
    values: dict[str, str]  # in force: target keys, their coupled partners, the watch keys
    changes: tuple[Change, ...]


def _watch_keys(profile: Profile) -> list[str]:
    if profile.name == WATCH_PROFILE:
        return []
    return list(load_profile(WATCH_PROFILE).keys)


def prepare(profile: Profile, ram_bytes: int | None = None) -> Prepared:
    """Steps 1 of an apply: raises ProfileError before anything changes."""
    targets = resolve(profile, procsys.mem_total_bytes() if ram_bytes is None else ram_bytes)
    keys = list(targets)
    for key in [*(PARTNER[k] for k in targets if k in PARTNER), *_watch_keys(profile)]:
        if key not in keys:
            keys.append(key)
    readings = procsys.probe(keys)
    current = check_targets(targets, readings)
    # Partners and watch keys absent on this kernel are simply not recorded.
    values = {k: v for k, v in readings.items() if not isinstance(v, Unavailable)}
    return Prepared(targets, values, tuple(plan_apply(targets, current)))


def permission_problem(changes: tuple[Change, ...]) -> tuple[ApplyStatus, str] | None:
    euid = os.geteuid()
    if euid != 0:
        return ApplyStatus.NOT_ROOT, f"not root (euid {euid}); writing sysctls needs root"
    read_only = [c.key for c in changes if not procsys.is_writable(c.key)]
    if read_only:
        return ApplyStatus.READ_ONLY, f"not writable here: {', '.join(read_only)}"
    return None


def restore_values(saved: dict[str, str]) -> None:
    """Write the saved values back and verify them; raises RestoreError listing what stayed wrong."""
    failures: list[str] = []
    for key, value in restore_plan(saved, procsys.probe(saved)):
        try:
            procsys.write_value(key, value)
        except OSError as e:
            failures.append(f"writing {key} = {value!r}: {e.strerror}")
    failures += mismatches(saved, procsys.probe(saved))
    if failures:
        raise RestoreError("could not restore:\n  " + "\n  ".join(failures))


class ProfileSession:
    """One apply/restore cycle of one profile. `restore()` is idempotent and safe to call always."""

    def __init__(self, profile: Profile, *, state_file: Path | None = None, ram_bytes: int | None = None) -> None:
        self.profile = profile
        self.state_file = state_file if state_file is not None else DEFAULT_STATE_FILE
        self._ram_bytes = ram_bytes
        self._lock: ApplyLock | None = None
        self._saved: dict[str, str] | None = None

    @property
    def changed(self) -> bool:
        """True while values this session wrote may be in force."""
        return self._saved is not None

    def _check_no_leftover(self) -> None:
        for path in dict.fromkeys([self.state_file, DEFAULT_STATE_FILE]):
            if path.exists():
                try:
                    left = load_state(path)
                    who = f"profile {left.profile}, pid {left.pid}"
                except StateFileError as e:
                    who = str(e)
                raise LeftoverStateError(
                    f"{path} exists ({who}): an earlier apply did not restore, so the values in force are not "
                    f"the originals; run `python -m sysctl_profiles restore {path}` first"
                )

    def apply(self) -> AppliedState:
        name = self.profile.name
        prep = prepare(self.profile, self._ram_bytes)
        # Before anything else: with a leftover, the values in force are not the ones to record or restore.
        self._check_no_leftover()
        if not prep.changes:
            return AppliedState(name, ApplyStatus.ALREADY_IN_FORCE, None, prep.values)
        problem = permission_problem(prep.changes)
        if problem is not None:
            return AppliedState(name, problem[0], problem[1], prep.values)

        lock = ApplyLock()
        lock.acquire()
        try:
            self._check_no_leftover()
            prep = prepare(self.profile, self._ram_bytes)  # again, under the lock
            saved = {k: prep.values[k] for k in keys_to_save(prep.changes) if k in prep.values}
            save_state(self.state_file, new_state(name, saved))
        except BaseException:
            lock.release()
            raise
        self._lock, self._saved = lock, saved

        change = prep.changes[0]
        try:
            for change in prep.changes:
                procsys.write_value(change.key, change.after)
        except OSError as e:
            self.restore()
            if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                reason = f"writing {change.key} denied ({e.strerror}); nothing left changed"
                return AppliedState(
                    name, ApplyStatus.WRITE_DENIED, reason, prepare(self.profile, self._ram_bytes).values
                )
            raise ProfileError(
                f"the kernel rejected {change.key} = {change.after!r} ({e.strerror}); every change was rolled back"
            ) from None
        except BaseException:
            self.restore()
            raise
        values = {k: v for k, v in procsys.probe(prep.values).items() if not isinstance(v, Unavailable)}
        return AppliedState(name, ApplyStatus.APPLIED, None, values, prep.changes)

    def restore(self) -> None:
        """Put back what apply changed; on RestoreError the state file stays for `restore`."""
        try:
            if self._saved is not None:
                with _signals_deferred():
                    restore_values(self._saved)
                self.state_file.unlink(missing_ok=True)
                self._saved = None
        finally:
            if self._lock is not None:
                self._lock.release()
                self._lock = None


def restore_state_file(path: Path | None = None, *, force: bool = False) -> RestoreOutcome:
    """Undo a killed apply from its state file. Refuses while an apply holds the lock, unless force."""
    path = path if path is not None else DEFAULT_STATE_FILE
    if not path.exists():
        return RestoreOutcome.NOTHING_TO_RESTORE
    lock = ApplyLock()
    try:
        lock.acquire()
    except SysctlProfileError:
        if not force:
            raise
    try:
        if not path.exists():
            return RestoreOutcome.NOTHING_TO_RESTORE
        saved = load_state(path).saved
        with _signals_deferred():
            restore_values(saved)
        path.unlink()
        return RestoreOutcome.RESTORED
    finally:
        lock.release()


@contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM/SIGHUP for this thread: a KeyboardInterrupt must not cut a restore in half.

    A signal that arrives meanwhile is delivered (and raises, if its handler does) right after.
    """
    held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextmanager
def _sigterm_raises() -> Iterator[None]:
    """Turn the first SIGTERM into SystemExit so `finally` blocks (the restore) run; later ones are ignored."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return
    fired = False

    def handler(signum: int, _frame: FrameType | None) -> None:
        nonlocal fired
        if not fired:
            fired = True
            raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextmanager
def applied_profile(
    name_or_path: str | Path, *, allow_unapplied: bool = False, state_file: Path | None = None
) -> Iterator[AppliedState]:
    """Apply a profile for the duration of the block; restore on exit, exceptions, Ctrl-C and SIGTERM.

    SIGTERM is turned into SystemExit(143) only when called from the main thread with SIGTERM's default
    disposition (otherwise the caller's own handler stays in charge). Ctrl-C/SIGTERM during the restore
    are held until it is done.

    Raises ProfileNotApplied (nothing changed) when it cannot be applied and allow_unapplied is False.
    A SIGKILLed holder leaves the state file behind: `python -m sysctl_profiles restore` undoes it.
    """
    session = ProfileSession(load_profile(name_or_path), state_file=state_file)
    with _sigterm_raises():
        state = session.apply()
        try:
            if not state.applied and not allow_unapplied:
                raise ProfileNotApplied(state)
            yield state
        finally:
            session.restore()
