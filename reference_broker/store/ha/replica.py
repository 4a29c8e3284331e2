"""Replication as a durability condition: a SYNC_MASTER put waits for a slave's acknowledgement.

RocketMQ 4.9.8: CommitLog.submitReplicaRequest (handleHA) and HAService's bookkeeping — push2SlaveMaxOffset,
isSlaveOK, notifyTransferSome, GroupTransferService, and the WaitNotifyObject that wakes the senders.

- Only under SYNC_MASTER, and only for a put that waits (``WAIT`` is not false): others answer at once.
- No slave connected, or the slave more than haSlaveFallbehindMax behind the put: SLAVE_NOT_AVAILABLE at once.
- Else a request for the put's end offset, completed by the GroupTransferService thread with PUT_OK once a
  slave acknowledged that offset (push2SlaveMaxOffset ≥ end: one report releases every put it covers), or
  FLUSH_SLAVE_TIMEOUT after slaveTimeout. The message stays stored on the master in every case.

The sockets that carry reports and frames live a layer up (reference_broker/ha); they call ``ReplicaState``.
"""

from __future__ import annotations

import logging
import threading
import time

from reference_broker.store.config import MessageStoreConfig
from reference_broker.store.flush import GroupCommitRequest
from reference_broker.store.service_thread import ServiceThread
from reference_broker.store.status import AppendMessageResult, PutMessageStatus

log = logging.getLogger(__name__)


class ReplicaRequest(GroupCommitRequest):
    """A put waiting for a slave's acknowledgement of ``next_offset``."""

    __slots__ = ()
    timeout_status = PutMessageStatus.FLUSH_SLAVE_TIMEOUT


class WaitNotify:
    """WaitNotifyObject.allWaitForRunning / wakeupAll: the master's senders sleep until a put that waits for
    replication wakes them (else they look for new bytes every 100 ms)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._generation = 0

    def wait(self, timeout_s: float) -> None:
        with self._cond:
            gen = self._generation
            self._cond.wait_for(lambda: self._generation != gen, timeout_s)

    def wakeup_all(self) -> None:
        with self._cond:
            self._generation += 1
            self._cond.notify_all()


class GroupTransferService(ServiceThread):
    """Completes replica requests as the slaves' acknowledgements arrive (HAService.GroupTransferService)."""

    def __init__(self, state: ReplicaState) -> None:
        super().__init__("GroupTransferService")
        self.state = state
        self._lock = threading.Lock()
        self._requests_write: list[ReplicaRequest] = []
        self._waiting: list[ReplicaRequest] = []

    def put_request(self, req: ReplicaRequest) -> None:
        with self._lock:
            accepted = not self.is_stopped
            if accepted:
                self._requests_write.append(req)
        if accepted:
            self.wakeup()
        else:  # stopped: no thread is left to complete it
            self._complete(req, time.monotonic(), final=True)

    def _complete(self, req: ReplicaRequest, now: float, final: bool) -> bool:
        if self.state.push2slave_max_offset >= req.next_offset:
            req.complete(PutMessageStatus.PUT_OK)
        elif final or now >= req.deadline:
            req.complete(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        else:
            return False
        return True

    def _do_wait_transfer(self, final: bool = False) -> None:
        with self._lock:
            new, self._requests_write = self._requests_write, []
        now = time.monotonic()
        self._waiting = [r for r in self._waiting + new if not self._complete(r, now, final)]

    def run(self) -> None:
        while not self.is_stopped:
            # Woken by a new request and by each acknowledgement that moved push2SlaveMaxOffset; the 10 ms
            # bound times requests out close to their deadline (4.9.8 waits up to 1 s per turn instead).
            self.wait_for_running(0.01)
            self._do_wait_transfer()
        with self._lock:
            self._requests_write, new = [], self._requests_write
        self._waiting += new
        self._do_wait_transfer(final=True)  # nothing will acknowledge them now

    def make_stop(self) -> None:
        with self._lock:
            super().make_stop()


class ReplicaState:
    """What the put path needs to know of the slaves: how many are connected and the highest offset any of
    them acknowledged (push2SlaveMaxOffset). Updated by the HA connections (reference_broker/ha)."""

    def __init__(self, config: MessageStoreConfig) -> None:
        self.config = config
        self.push2slave_max_offset = 0
        self.connection_count = 0
        self._lock = threading.Lock()
        self.senders = WaitNotify()
        self.group_transfer = GroupTransferService(self)

    def is_slave_ok(self, master_put_where: int) -> bool:
        """HAService.isSlaveOK: a slave is connected and less than haSlaveFallbehindMax behind."""
        return (self.connection_count > 0
                and master_put_where - self.push2slave_max_offset < self.config.ha_slave_fallbehind_max)

    def notify_transfer_some(self, offset: int) -> None:
        """A slave acknowledged ``offset`` (HAService.notifyTransferSome): raise push2SlaveMaxOffset, wake the
        group transfer. Never lowered: a slower slave's report says nothing about the others."""
        with self._lock:
            if offset <= self.push2slave_max_offset:
                return
            self.push2slave_max_offset = offset
        self.group_transfer.wakeup()

    def add_connection(self) -> None:
        with self._lock:
            self.connection_count += 1

    def remove_connection(self) -> None:
        with self._lock:
            self.connection_count -= 1


def _completed(status: PutMessageStatus) -> ReplicaRequest:
    req = ReplicaRequest(0, 0)
    req.complete(status)
    return req


class ReplicationCondition:
    """The second durability condition (CommitLog.submitReplicaRequest), after the flush; SYNC_MASTER only."""

    name = "replication"

    def __init__(self, config: MessageStoreConfig, state: ReplicaState) -> None:
        self.config = config
        self.state = state

    def submit(self, append: AppendMessageResult, wait_store_ok: bool) -> ReplicaRequest | None:
        if not wait_store_ok:
            return None
        end = append.wrote_offset + append.wrote_bytes
        if not self.state.is_slave_ok(end):
            return _completed(PutMessageStatus.SLAVE_NOT_AVAILABLE)
        req = ReplicaRequest(end, self.config.slave_timeout_ms)
        self.state.group_transfer.put_request(req)
        self.state.senders.wakeup_all()  # the connections send the new bytes now, not at their next look
        return req
