"""Answer a request that changed a config file only once the change is on disk, without blocking the loop.

RocketMQ persists a created topic or subscription group inline before the processor answers (e.g.
TopicConfigManager.createTopicInSendMessageMethod, SubscriptionGroupManager.findSubscriptionGroupConfig,
AdminBrokerProcessor.updateAndCreateTopic, 4.9.8), so a client that got its answer can rely on the change
surviving a crash. Our writes happen on the managers' writer threads (config_persister.py); a request that
caused one awaits it before answering, and requests that changed nothing (nearly all) answer as before.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Sequence
from typing import TypeVar

from reference_broker.broker.config_manager import ConfigManager

R = TypeVar("R")


def config_marks(managers: Sequence[ConfigManager]) -> tuple[int, ...]:
    """Where each manager's write requests stand before a request is served."""
    return tuple(m.persist_generation for m in managers)


def reply_when_persisted(reply: R | Awaitable[R], managers: Sequence[ConfigManager],
                         marks: tuple[int, ...]) -> R | Awaitable[R]:
    """``reply`` as it is when no manager was asked to write since ``marks``; else an awaitable that waits
    for those writes (bounded: a failing disk is logged and retried, the answer goes out anyway)."""
    changed = [m for m, mark in zip(managers, marks, strict=True) if m.persist_generation != mark]
    if not changed:
        return reply

    async def after_write() -> R:
        for manager in changed:
            await manager.persisted()
        if inspect.isawaitable(reply):
            return await reply
        return reply

    return after_write()
