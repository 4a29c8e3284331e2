"""HAService: the master's side of replication (RocketMQ 4.9.8 HAService and its AcceptSocketService).

One thread accepts slaves on haListenPort (every interface, as 4.9.8); each accepted socket becomes an
HAConnection with its writer thread and its reader — on the broker's event loop when it gives one, else a
thread (connection.py). The connections report to the store's
ReplicaState: how many there are and push2SlaveMaxOffset, which the SYNC_MASTER condition waits on
(store/ha/replica.py). A master always listens, whatever its role (ASYNC_MASTER or SYNC_MASTER).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
from collections.abc import Callable

from reference_broker.ha.connection import HAConnection
from reference_broker.store.ha.replica import ReplicaState
from reference_broker.store.message_store import MessageStore
from reference_broker.store.service_thread import ServiceThread

log = logging.getLogger(__name__)

ACCEPT_POLL_S = 1.0  # 4.9.8's accept loop selects for 1 s


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _end_of_turn(loop: asyncio.AbstractEventLoop,
                 at_end: Callable[[Callable[[], None]], None]) -> Callable[[Callable[[], None]], bool]:
    """A WaitNotify deferral (store/ha/replica.py): the wake-ups asked on ``loop``'s thread (this one) during a
    turn become one call of ``at_end(wake)`` after the callbacks ready in that turn; on any other thread a
    wake-up is not deferred."""
    loop_thread = threading.get_ident()
    pending = False

    def wake_later(wake: Callable[[], None]) -> None:
        nonlocal pending
        pending = False
        at_end(wake)

    def defer(wake: Callable[[], None]) -> bool:
        nonlocal pending
        if threading.get_ident() != loop_thread:
            return False
        if not pending:
            pending = True
            loop.call_soon(wake_later, wake)
        return True

    return defer


class HAService:
    def __init__(self, store: MessageStore, host: str = "", loop: asyncio.AbstractEventLoop | None = None) -> None:
        if store.replica is None:
            raise ValueError("HAService runs on a master (a slave runs HAClient)")
        self.store = store
        self.config = store.config
        self.state: ReplicaState = store.replica
        self.host = host
        self.loop = loop  # the broker's event loop: the slaves' reports are read on it (connection.py)
        self.connections: list[HAConnection] = []
        self._lock = threading.Lock()
        self._server: socket.socket | None = None
        self._accept = _AcceptSocketService(self)
        self._stopped = False

    @property
    def port(self) -> int:
        """The port listened on (haListenPort; the one the OS chose when it is 0)."""
        assert self._server is not None
        return int(self._server.getsockname()[1])

    def start(self) -> None:
        """Bind haListenPort (OSError when taken: the broker must not start without it) and accept slaves."""
        self._server = socket.create_server((self.host, self.config.ha_listen_port), backlog=16)
        self._server.settimeout(ACCEPT_POLL_S)
        if self.loop is not None and _running_loop() is self.loop:  # the controller starts it on its loop
            self.state.senders.defer_with(_end_of_turn(self.loop, self._send_from_loop))
        log.info("HAService listening on %s:%d", self.host or "*", self.port)
        self._accept.start()

    def _send_from_loop(self, wake: Callable[[], None]) -> None:
        """At the end of a loop turn that put SYNC_MASTER messages: each connection's writer sends them from the
        loop (connection.py); the writer threads are woken only for what it left."""
        batch = self.config.ha_transfer_batch_size
        with self._lock:
            conns = list(self.connections)
        left = [c for c in conns if not c.writer.send_from_loop(batch)]
        if left or not conns:
            wake()

    def add_connection(self, conn: HAConnection) -> None:
        with self._lock:
            if self._stopped:  # accepted while shutting down: its threads never start
                conn.close()
                conn.sock.close()
                return
            self.connections.append(conn)
            self.state.add_connection()
        conn.start()

    def remove_connection(self, conn: HAConnection) -> None:
        with self._lock:
            if conn in self.connections:
                self.connections.remove(conn)
                self.state.remove_connection()

    def connection_count(self) -> int:
        return self.state.connection_count

    def runtime_info(self) -> dict[str, str]:
        """The master's replication in GET_BROKER_RUNTIME_INFO. 4.9.8's table has no HA keys; these are named
        after what it has: HAService.getConnectionCount, getPush2SlaveMaxOffset, MessageStore.slaveFallBehindMuch
        (the commit log's end minus push2SlaveMaxOffset; 4.9.8 logs it as "Slave fall behind master: {} bytes"),
        and each connected slave's last acknowledged offset (HAConnection.slaveAckOffset) by its HA peer address."""
        with self._lock:
            acks = {c.client_addr: c.slave_ack_offset for c in self.connections}
        push = self.state.push2slave_max_offset
        return {
            "haConnectionCount": str(len(acks)),
            "haPush2SlaveMaxOffset": str(push),
            "slaveFallBehindMuch": str(self.store.get_max_phy_offset() - push),
            "haSlaveAckOffsets": json.dumps(acks, sort_keys=True),
        }

    def shutdown(self) -> None:
        """Stop accepting, then close every connection and wait for its threads (HAService.shutdown)."""
        with self._lock:
            self._stopped = True
            conns = list(self.connections)
        self._accept.shutdown()
        for conn in conns:
            conn.shutdown()


class _AcceptSocketService(ServiceThread):
    def __init__(self, service: HAService) -> None:
        super().__init__("AcceptSocketService")
        self.service = service

    def run(self) -> None:
        server = self.service._server
        assert server is not None
        try:
            while not self.is_stopped:
                try:
                    sock, addr = server.accept()
                except TimeoutError:
                    continue
                except OSError as e:
                    if not self.is_stopped:
                        log.error("HA accept failed: %s", e)
                        self.sleep(0.1)
                    continue
                client = f"{addr[0]}:{addr[1]}"
                log.info("HAService receives a new connection from %s", client)
                try:
                    conn = HAConnection(self.service, sock, client, self.service.loop)
                except OSError as e:
                    log.error("new HAConnection from %s failed: %s", client, e)
                    sock.close()
                    continue
                self.service.add_connection(conn)
        finally:
            server.close()
