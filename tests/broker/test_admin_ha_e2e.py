"""Replication in the admin view, through real processes: a master's GET_BROKER_RUNTIME_INFO shows its slave
connection, push2SlaveMaxOffset and fall-behind, plus 4.9.8's msgPut*/msgGet* counters; a slave's shows what it
acknowledged; ``admin haStatus`` lists the group with the slave's acknowledged offset and lag in bytes, first
while the slave is paused (behind), then caught up."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from harness.launcher import Topology
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import ResponseCode
from reference_broker.tools import admin
from tests.broker.broker_helpers import pull_request, send_request

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

SLAVE = {"brokerName": "broker-a", "brokerId": "1", "brokerRole": "SLAVE"}


def ha_status(topo: Topology) -> list[dict]:
    p = subprocess.run([sys.executable, "-m", "reference_broker", "admin", "haStatus", "-n", topo.namesrv_addr,
                        "--json"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def wait_until(pred, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while True:
        value = pred()
        if value:
            return value
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_replication_in_runtime_info_and_ha_status(tmp_path):
    with Topology(tmp_path / "t") as topo:
        master = topo.brokers[0]
        slave = topo.add_broker("broker-a-slave", extra=SLAVE)
        with RemotingClient.from_addr(master.addr, timeout_s=10) as mc:
            for _ in range(10):
                assert mc.invoke(send_request("HaStatT", b"x" * 100)).code == ResponseCode.SUCCESS
            time.sleep(0.3)  # dispatched
            pulled = mc.invoke(pull_request("HaStatT", 0, 0, sys_flag=4))
            assert pulled.code == ResponseCode.SUCCESS
        end = int(admin.broker_status(master.addr)["commitLogMaxOffset"])
        info = wait_until(lambda: (t := admin.broker_status(master.addr))["haPush2SlaveMaxOffset"] == str(end) and t,
                          30, "the slave's acknowledgement")
        assert info["haConnectionCount"] == "1" and info["slaveFallBehindMuch"] == "0"
        assert list(json.loads(info["haSlaveAckOffsets"]).values()) == [end]
        assert info["msgPutTotalTodayNow"] == "10" and info["msgGetTotalTodayNow"] == "10"
        assert info["msgPutTotalTodayMorning"] == "0"
        s_info = admin.broker_status(slave.addr)
        assert s_info["haReportedOffset"] == str(end) and s_info["haMasterConnected"] == "true"

        rows = {r["brokerId"]: r for r in ha_status(topo)}
        assert rows[0]["addr"] == master.addr and rows[0]["slaves"] == "1" and rows[0]["maxOffset"] == str(end)
        assert rows[1]["addr"] == slave.addr and rows[1]["ackOffset"] == end and rows[1]["lagBytes"] == 0

        slave.pause()  # the slave acknowledges nothing: the master's end moves on without it
        try:
            with RemotingClient.from_addr(master.addr, timeout_s=10) as mc:
                for _ in range(5):
                    assert mc.invoke(send_request("HaStatT", b"y" * 100)).code == ResponseCode.SUCCESS
            new_end = int(admin.broker_status(master.addr)["commitLogMaxOffset"])
            assert int(admin.broker_status(master.addr)["slaveFallBehindMuch"]) == new_end - end
        finally:
            slave.resume()
        rows = {r["brokerId"]: r for r in ha_status(topo)}
        assert rows[0]["maxOffset"] == str(new_end)
        assert rows[1]["lagBytes"] == new_end - rows[1]["ackOffset"]
        wait_until(lambda: {r["brokerId"]: r for r in ha_status(topo)}[1]["lagBytes"] == 0, 30, "caught up")
