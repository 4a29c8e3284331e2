"""BrokerOuterAPI (broker/.../out/BrokerOuterAPI.java, 4.9.8): the broker's requests to its name servers.

The broker keeps one connection to each name server for as long as it runs, as 4.9.8's NettyRemotingClient
does, and registers over it: the name server takes the connection's close for the broker's end
(BrokerHousekeepingService.onChannelClose → RouteInfoManager.onChannelDestroy) and drops the broker from its
routes at once, so a broker that is killed (not only one that unregisters) leaves the routes in moments rather
than after the 120 s expiry. A request whose connection had broken (a name server restarted) is tried once
more, on a new connection.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from reference_broker.common.crc import crc32
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import RemotingCommand, create_request, json_dumps
from reference_broker.remoting.errors import RemotingConnectError, RemotingError, RemotingSendError

log = logging.getLogger(__name__)

NAMESRV_TIMEOUT_S = 3.0  # BrokerOuterAPI.registerBrokerAll's timeoutMills (registerBrokerTimeoutMills 6000 caps it)


@dataclass(frozen=True)
class Registered:
    """What registering told the broker: whether any name server accepted it and, for a slave, its master's
    HA address (RegisterBrokerResponseHeader.haServerAddr) and address (masterAddr) when a name server knew them."""

    ok: bool
    ha_server_addr: str | None = None
    master_addr: str | None = None


class BrokerOuterAPI:
    def __init__(self, timeout_s: float = NAMESRV_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._clients: dict[str, RemotingClient] = {}
        self._lock = threading.Lock()
        self._closed = False

    def _client(self, addr: str) -> RemotingClient:
        with self._lock:
            if self._closed:
                raise RemotingError("the broker's name-server clients are closed")
            client = self._clients.get(addr)
            if client is None:
                client = self._clients[addr] = RemotingClient.from_addr(addr, timeout_s=self.timeout_s)
            return client

    def invoke(self, addr: str, cmd: RemotingCommand) -> RemotingCommand:
        """One request on the kept connection; once more (the client opens a new connection) if that one had
        broken. A timeout is not retried and leaves the connection open: closing it would tell the name server
        the broker is gone."""
        client = self._client(addr)
        try:
            return client.invoke(cmd)
        except (RemotingConnectError, RemotingSendError):
            return client.invoke(cmd)

    def register_broker_all(self, namesrv_addrs: list[str], header: dict[str, str],
                            topic_config_table: dict[str, Any], data_version: dict[str, int],
                            filter_server_list: list[str] | None = None) -> Registered:
        """REGISTER_BROKER (RegisterBrokerBody: the topic table and the filter servers) on every name server.
        ``header`` is RegisterBrokerRequestHeader's fields; bodyCrc32 is added here."""
        body = json_dumps({"topicConfigSerializeWrapper": {"topicConfigTable": topic_config_table,
                                                           "dataVersion": data_version},
                           "filterServerList": filter_server_list or []})
        header = {**header, "bodyCrc32": str(crc32(body))}
        ok = False
        ha_server_addr: str | None = None
        master_addr: str | None = None
        for addr in namesrv_addrs:
            try:
                resp = self.invoke(addr, create_request(RequestCode.REGISTER_BROKER, header, body))
            except (RemotingError, ValueError) as exc:
                log.warning("register broker to name server %s failed: %s", addr, exc)
                continue
            if resp.code == ResponseCode.SUCCESS:
                ok = True
                ha_server_addr = resp.ext_fields.get("haServerAddr") or ha_server_addr
                master_addr = resp.ext_fields.get("masterAddr") or master_addr
            else:
                log.warning("register broker to name server %s failed: code %d %s", addr, resp.code, resp.remark)
        return Registered(ok, ha_server_addr, master_addr)

    def unregister_broker_all(self, namesrv_addrs: list[str], header: dict[str, str]) -> None:
        for addr in namesrv_addrs:
            try:
                self.invoke(addr, create_request(RequestCode.UNREGISTER_BROKER, {
                    k: header[k] for k in ("brokerAddr", "brokerId", "brokerName", "clusterName")}))
            except (RemotingError, ValueError) as exc:
                log.warning("unregister broker from name server %s failed: %s", addr, exc)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()
