"""This module owns PermName (RocketMQ common/.../constant/PermName.java, 4.9.8): the permission bits of a
topic (TopicConfig.perm) and of a broker (brokerPermission), as the broker stores them in topics.json and the
name server hands them to clients in each QueueData. Sans-IO; shared by the broker, the name server and the
clients, which must agree on every bit.
"""

from __future__ import annotations

from typing import Final

PERM_PRIORITY: Final = 8
PERM_READ: Final = 4
PERM_WRITE: Final = 2
PERM_INHERIT: Final = 1


def is_readable(perm: int) -> bool:
    """PermName.isReadable."""
    return (perm & PERM_READ) == PERM_READ


def is_writeable(perm: int) -> bool:
    """PermName.isWriteable."""
    return (perm & PERM_WRITE) == PERM_WRITE


def is_inherited(perm: int) -> bool:
    """PermName.isInherited: a default topic (TBW102) whose settings a new topic may copy."""
    return (perm & PERM_INHERIT) == PERM_INHERIT


def perm_to_string(perm: int) -> str:
    """PermName.perm2String: e.g. 6 → "RW-"."""
    return (
        ("R" if is_readable(perm) else "-")
        + ("W" if is_writeable(perm) else "-")
        + ("X" if is_inherited(perm) else "-")
    )
