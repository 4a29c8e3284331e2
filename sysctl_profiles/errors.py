"""The error types of sysctl_profiles: one base class, one subclass per way things go wrong.

`ProfileError` is always raised before anything is changed (or after every change was rolled
back), so a caller that sees it knows the system is as it was.
"""

from __future__ import annotations


class SysctlProfileError(Exception):
    """Base of every error this package raises on purpose."""


class ProfileError(SysctlProfileError):
    """A profile is malformed or names keys/values this kernel cannot take; nothing was changed."""


class LockedError(SysctlProfileError):
    """Another apply (or restore) holds the machine-wide lock."""


class LeftoverStateError(SysctlProfileError):
    """A state file from a killed apply exists: the values in force are not the originals."""


class RestoreError(SysctlProfileError):
    """Some saved value could not be put back; the state file is kept for `restore`."""


class StateFileError(SysctlProfileError):
    """A state file is unreadable or not one this package wrote."""
