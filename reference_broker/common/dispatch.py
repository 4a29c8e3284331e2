"""DispatchRequest: what the reput thread hands to each dispatcher (consume queue, index, listeners).

Mirrors RocketMQ's DispatchRequest (store/.../DispatchRequest.java, 4.9.8): built from a commit-log
record by ``commit_log.check_message_and_return_size``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(slots=True)
class DispatchRequest:
    topic: str
    queue_id: int
    commit_log_offset: int
    msg_size: int
    tags_code: int
    store_timestamp: int
    consume_queue_offset: int
    keys: str
    uniq_key: str | None
    sys_flag: int
    prepared_transaction_offset: int
    success: bool = True
    born_timestamp: int = 0

    @classmethod
    def failure(cls, size: int = -1) -> DispatchRequest:
        """A record that could not be read (msg_size -1 stops a scan; 0 means 'end of file, roll')."""
        return cls("", 0, 0, size, 0, 0, 0, "", None, 0, 0, False)


class CommitLogDispatcher(Protocol):
    def dispatch(self, request: DispatchRequest) -> None: ...
