"""MQClientInstance.invoke_namesrv tries every name server once, from where it last succeeded, even when another
thread of the same instance fails over meanwhile (that moves the shared index)."""

from __future__ import annotations

from reference_broker.client.config import ClientConfig
from reference_broker.client.errors import ClientErrorCode, MQClientError
from reference_broker.client.instance import MQClientInstance
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import RemotingCommand, create_request, create_response

DEAD, LIVE = "127.0.0.1:1", "127.0.0.1:2"


class Instance(MQClientInstance):
    """Transport replaced: the first name server refuses, and while it does another thread fails over to the
    second one (as the route-refresh timer would), moving the shared index."""

    def __init__(self) -> None:
        super().__init__(ClientConfig(f"{DEAD};{LIVE}", "failover-test"))
        self.asked: list[str] = []

    def invoke(self, addr: str, cmd: RemotingCommand, timeout_s: float | None = None) -> RemotingCommand:
        self.asked.append(addr)
        if addr == DEAD:
            self._namesrv_index = 1  # the concurrent failover's effect
            raise MQClientError(ClientErrorCode.CONNECT_BROKER_EXCEPTION, f"connect failed ({addr})")
        return create_response(cmd, ResponseCode.SUCCESS)


def test_a_concurrent_failover_does_not_make_the_live_name_server_skipped() -> None:
    instance = Instance()
    instance._namesrv_index = 0
    response = instance.invoke_namesrv(create_request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}))
    assert response.code == ResponseCode.SUCCESS
    assert instance.asked == [DEAD, LIVE]
    assert instance._namesrv_index == 1  # the next call starts at the live one
