"""This module owns the settings shared by every client of one process (ClientConfig, 4.9.8) and the client id.

The client id is ``ip@instanceName`` (ClientConfig.buildMQClientId); an instance name left at "DEFAULT"
becomes the process id (changeInstanceNameToPID). Producers and consumers with the same id share one
``MQClientInstance``, so two consumers of one group in one process need different instance names (two
processes with the same instance name on one host is RocketMQ issue #1589's trap).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Final

DEFAULT_INSTANCE_NAME: Final = "DEFAULT"


def local_ip(towards: str | None = None) -> str:
    """The address this host would use to reach ``towards`` ("host:port"); 127.0.0.1 if unknown.

    Java's RemotingUtil.getLocalAddress prefers a site-local IPv4 address; asking the routing table which
    source address reaches the name server gives that without sending a packet.
    """
    host = towards.rpartition(":")[0] if towards else "127.0.0.1"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host or "127.0.0.1", 9))
            return str(s.getsockname()[0])
    except OSError:
        return "127.0.0.1"


@dataclass(slots=True)
class ClientConfig:
    """Process-wide client settings; intervals in seconds (RocketMQ's names, in ms, in the comments)."""

    namesrv_addr: str
    instance_name: str = DEFAULT_INSTANCE_NAME
    client_ip: str | None = None
    poll_name_server_interval_s: float = 30.0  # pollNameServerInterval 30000
    heartbeat_broker_interval_s: float = 30.0  # heartbeatBrokerInterval 30000
    persist_consumer_offset_interval_s: float = 5.0  # persistConsumerOffsetInterval 5000
    rebalance_interval_s: float = 20.0  # RebalanceService waitInterval (rocketmq.client.rebalance.waitInterval)
    request_timeout_s: float = 3.0  # mqClientApiTimeout 3000
    # Coalesce async writes through a writer thread per connection (remoting.client): None = only under
    # gevent's monkey-patching, where it costs no latency; with real threads it can add up to the GIL's
    # switch interval (5 ms) while another thread keeps the GIL busy.
    queued_writes: bool | None = None

    def namesrv_addrs(self) -> list[str]:
        """``"h:p;h:p"`` split, blanks dropped."""
        return [a.strip() for a in self.namesrv_addr.split(";") if a.strip()]

    def resolved_ip(self) -> str:
        if self.client_ip is None:
            addrs = self.namesrv_addrs()
            self.client_ip = local_ip(addrs[0] if addrs else None)
        return self.client_ip

    def client_id(self) -> str:
        name = str(os.getpid()) if self.instance_name == DEFAULT_INSTANCE_NAME else self.instance_name
        return f"{self.resolved_ip()}@{name}"
