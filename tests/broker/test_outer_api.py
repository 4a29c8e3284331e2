"""BrokerOuterAPI against an in-process name server: registrations share one kept connection, so the broker
stays routed between them; closing that connection (the broker's end) drops it at once; a name server that
restarted gets the next registration over a new connection."""

from __future__ import annotations

import time

from reference_broker.broker.outer_api import BrokerOuterAPI
from reference_broker.namesrv.server import NameServer

HEADER = {"brokerAddr": "127.0.0.1:30911", "brokerId": "0", "brokerName": "bo", "clusterName": "c",
          "haServerAddr": "127.0.0.1:30912", "compressed": "false"}
TABLE = {"OuterT": {"topicName": "OuterT", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}}


def routed(ns: NameServer) -> bool:
    return "bo" in ns.route_info.broker_addr_table


def wait(pred, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_kept_connection_and_its_close():
    ns = NameServer("127.0.0.1", 0, scan_interval_s=60)
    st = ns.start_in_thread()
    api = BrokerOuterAPI()
    try:
        addrs = [f"127.0.0.1:{ns.port}"]
        assert api.register_broker_all(addrs, HEADER, TABLE, {"counter": 1, "timestamp": 1}).ok
        first = ns.processor.broker_channels[HEADER["brokerAddr"]]
        assert api.register_broker_all(addrs, HEADER, TABLE, {"counter": 2, "timestamp": 1}).ok
        assert ns.processor.broker_channels[HEADER["brokerAddr"]] is first  # one connection
        assert routed(ns)
        api.close()
        wait(lambda: not routed(ns))
    finally:
        api.close()
        st.stop()


def test_a_restarted_name_server_gets_the_next_registration():
    ns = NameServer("127.0.0.1", 0, scan_interval_s=60)
    st = ns.start_in_thread()
    port = ns.port
    api = BrokerOuterAPI()
    try:
        assert api.register_broker_all([f"127.0.0.1:{port}"], HEADER, TABLE, {"counter": 1, "timestamp": 1}).ok
        st.stop()
        ns = NameServer("127.0.0.1", port, scan_interval_s=60)
        st = ns.start_in_thread()
        assert api.register_broker_all([f"127.0.0.1:{port}"], HEADER, TABLE, {"counter": 1, "timestamp": 1}).ok
        assert routed(ns)
    finally:
        api.close()
        st.stop()
