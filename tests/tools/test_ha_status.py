"""admin haStatus's rows from cluster info and each broker's runtime info (no I/O)."""

from __future__ import annotations

from reference_broker.tools.admin import replication_rows

INFO = {"clusterAddrTable": {"C": ["a"], "D": ["b"]},
        "brokerAddrTable": {"a": {"brokerAddrs": {"0": "m:1", "1": "s:1"}},
                            "b": {"brokerAddrs": {"1": "s:2"}}}}


def test_master_and_slave_rows_with_lag():
    runtime = {"m:1": {"brokerRole": "ASYNC_MASTER", "commitLogMaxOffset": "1000", "haConnectionCount": "1",
                       "slaveFallBehindMuch": "200"},
               "s:1": {"brokerRole": "SLAVE", "commitLogMaxOffset": "900", "haReportedOffset": "800",
                       "haMasterConnected": "true"},
               "s:2": {"brokerRole": "SLAVE", "commitLogMaxOffset": "50", "haReportedOffset": "50",
                       "haMasterConnected": "false"}}
    rows = replication_rows(INFO, runtime)
    assert rows[0] == {"brokerName": "a", "brokerId": 0, "addr": "m:1", "role": "ASYNC_MASTER", "maxOffset": "1000",
                       "slaves": "1", "fallBehind": "200"}
    assert rows[1] == {"brokerName": "a", "brokerId": 1, "addr": "s:1", "role": "SLAVE", "maxOffset": "900",
                       "ackOffset": 800, "lagBytes": 200, "connected": "true"}
    # A group without a master in the cluster info: the slave's lag is unknown.
    assert rows[2]["lagBytes"] == "" and rows[2]["ackOffset"] == 50
    assert [r["brokerName"] for r in replication_rows(INFO, runtime, cluster="D")] == ["b"]


def test_an_unreachable_broker_is_a_row_too():
    rows = replication_rows(INFO, {"m:1": None, "s:1": None, "s:2": None}, cluster="C")
    assert [(r["addr"], r["role"]) for r in rows] == [("m:1", "unreachable"), ("s:1", "unreachable")]
