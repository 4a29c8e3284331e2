"""This module owns the rules for topic and group names that arrive from outside
(TopicValidator and Validators.checkGroup, 4.9.8), shared by the broker, the store and the clients.

A name from the network becomes a directory (``consumequeue/<topic>``, and through ``%RETRY%<group>`` and
``%DLQ%<group>`` a group does too) and a key of the JSON config files (``topic@group`` in
consumerOffset.json). RocketMQ 4.9.8's broker checks topics on send (msgCheck) but not the group of a
CONSUMER_SEND_MSG_BACK: a group holding a NUL byte is accepted there, and the DLQ topic it makes cannot be a
directory, which stops ReputMessageService for every topic. This project checks every name where it arrives.

| rule                    | topic                          | group                          |
|-------------------------|--------------------------------|--------------------------------|
| characters              | ``^[%|a-zA-Z0-9_-]+$``         | the same                       |
| length (characters)     | at most 127                    | at most 255                    |
| blank                   | refused                        | refused                        |

``is_path_safe`` is the store's own last line (it knows nothing of the broker's rules): a topic it cannot
use as one directory name is refused before it reaches the commit log.
"""

from __future__ import annotations

from typing import Final

VALID_PATTERN_STR: Final = "^[%|a-zA-Z0-9_-]+$"
TOPIC_MAX_LENGTH: Final = 127  # TopicValidator.TOPIC_MAX_LENGTH
GROUP_MAX_LENGTH: Final = 255  # Validators.CHARACTER_MAX_LENGTH
_VALID_CHARS: Final = frozenset("%|_-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def has_illegal_chars(name: str) -> bool:
    """TopicValidator.isTopicOrGroupIllegal."""
    return not _VALID_CHARS.issuperset(name)


def validate_topic(topic: str) -> str | None:
    """TopicValidator.validateTopic: None when valid, else RocketMQ's remark text."""
    if not topic.strip():
        return "The specified topic is blank."
    if has_illegal_chars(topic):
        return f"The specified topic contains illegal characters, allowing only {VALID_PATTERN_STR}"
    if len(topic) > TOPIC_MAX_LENGTH:
        return "The specified topic is longer than topic max length."
    return None


def validate_group(group: str) -> str | None:
    """Validators.checkGroup (the client's rule; 4.9.8's broker has none): None when valid, else the remark."""
    if not group.strip():
        return "the specified group is blank"
    if len(group) > GROUP_MAX_LENGTH:
        return f"the specified group is longer than group max length {GROUP_MAX_LENGTH}."
    if has_illegal_chars(group):
        return f"the specified group[{group[:GROUP_MAX_LENGTH]}] contains illegal characters, allowing only " \
               f"{VALID_PATTERN_STR}"
    return None


def is_path_safe(name: str) -> bool:
    """Whether ``name`` can be one directory name on a POSIX file system: not empty, not ``.`` or ``..``,
    no ``/`` and no NUL."""
    return bool(name) and name not in (".", "..") and "/" not in name and "\0" not in name
