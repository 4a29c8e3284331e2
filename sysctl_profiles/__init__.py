"""vm.* sysctl profiles for the harness: applied, recorded into the run, and always restored.

Library use (workloads):

    with applied_profile("rocketmq-os", allow_unapplied=False) as state:
        state.applied, state.reason, state.values   # values actually in force
        ...                                         # restored on exit, exception, Ctrl-C, SIGTERM

Command line: `python -m sysctl_profiles apply NAME -- COMMAND...` (see cli.py).
"""

from sysctl_profiles.catalog import load_profile, profile_names
from sysctl_profiles.errors import (
    LeftoverStateError,
    LockedError,
    ProfileError,
    RestoreError,
    StateFileError,
    SysctlProfileError,
)
from sysctl_profiles.procsys import read_values
from sysctl_profiles.profile import Entry, Profile, parse_profile, resolve
from sysctl_profiles.session import (
    AppliedState,
    ApplyStatus,
    ProfileNotApplied,
    ProfileSession,
    RestoreOutcome,
    applied_profile,
    restore_state_file,
)

__all__ = [
    "AppliedState",
    "ApplyStatus",
    "Entry",
    "LeftoverStateError",
    "LockedError",
    "Profile",
    "ProfileError",
    "ProfileNotApplied",
    "ProfileSession",
    "RestoreError",
    "RestoreOutcome",
    "StateFileError",
    "SysctlProfileError",
    "applied_profile",
    "load_profile",
    "parse_profile",
    "profile_names",
    "read_values",
    "resolve",
    "restore_state_file",
]
