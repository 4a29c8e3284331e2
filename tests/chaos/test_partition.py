"""Partitions between the lab's hosts (chaos/partition.py): the nft script it generates (pure), and, as root, a
real master/slave group on its own hosts (chaos/netns.py): cutting master <-> slave stops the slave's offset and
makes a SYNC_MASTER answer FLUSH_SLAVE_TIMEOUT, healing lets the slave catch up; cutting clients <-> master stops
the root namespace's connections to the master while the slave still reaches it. Once with the reference broker,
once with Apache RocketMQ 4.9.8 (slow), whose registration and HA connection must use the hosts' addresses."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos import netns
from chaos.leftovers import Ledger
from chaos.netns import Host, Lab
from chaos.partition import TABLE, Cut, Partition, plan, ruleset
from chaos.sampler import try_status
from harness.launcher import LAB_LISTEN_PORT, BrokerProcess, Topology
from harness.records import WallClock
from reference_broker.client import protocol as cp
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import ResponseCode
from reference_broker.tools import admin

REASON = netns.unavailable()
TOPIC = "PartitionT"


def test_ruleset_drops_both_directions_by_address_only() -> None:
    text = ruleset(["198.18.4.3", "198.18.4.1", "198.18.4.3"])
    assert text == (
        "table inet rmqlab_partition {\n"
        "\tchain input {\n"
        "\t\ttype filter hook input priority -10; policy accept;\n"
        "\t\tip saddr { 198.18.4.1, 198.18.4.3 } drop\n"
        "\t}\n"
        "\tchain output {\n"
        "\t\ttype filter hook output priority -10; policy accept;\n"
        "\t\tip daddr { 198.18.4.1, 198.18.4.3 } drop\n"
        "\t}\n"
        "}\n")
    assert "ct state" not in text  # established connections are dropped too, not only new ones
    with pytest.raises(ValueError):
        ruleset([])


def test_plan_names_the_hosts_and_their_peers() -> None:
    m = Host("broker-a", "rmqlab4-h2", "198.18.4.2", "rl4h2")
    s = Host("broker-a-s1", "rmqlab4-h3", "198.18.4.3", "rl4h3")
    assert plan(Cut.MASTER_SLAVE, m, s, "198.18.4.1") == {m: ["198.18.4.3"], s: ["198.18.4.2"]}
    # The slave gets no rules: it still reaches the master, and the clients reach it.
    assert plan(Cut.CLIENTS_MASTER, m, s, "198.18.4.1") == {m: ["198.18.4.1"]}


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    if REASON is not None:
        pytest.skip(f"lab network: {REASON}")
    ledger = Ledger(tmp_path / "state.json")
    with Lab(ledger) as lab:
        yield lab
    assert ledger.entries() == []


def _send(master: BrokerProcess) -> int:
    with RemotingClient(master.host, master.port, timeout_s=10) as c:
        return c.invoke(cp.send_request("PG_partition", TOPIC, 0, b"x" * 200, "",
                                        born_timestamp=int(time.time() * 1000))).code


def _end(b: BrokerProcess, clock: WallClock) -> int:
    s = try_status(b.addr, clock)
    assert s is not None, f"{b.name} does not answer"
    return s.max_offset


def _connects(host: Host | None, addr: str, port: int) -> bool:
    """Whether a TCP connection to addr:port opens within 2 s, from ``host``'s namespace or (None) the root's."""
    if host is None:
        try:
            socket.create_connection((addr, port), timeout=2).close()
            return True
        except OSError:
            return False
    code = (f"import socket; socket.create_connection(('{addr}', {port}), timeout=2).close()")
    return subprocess.run([*host.exec_prefix(), sys.executable, "-c", code], capture_output=True,
                          timeout=30).returncode == 0


def _wait(cond: object, timeout_s: float, what: str) -> float:
    t0 = time.monotonic()
    while not cond():  # type: ignore[operator]
        if time.monotonic() - t0 > timeout_s:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.1)
    return time.monotonic() - t0


def _ha_peers(host: Host, ha_port: int) -> set[str]:
    """The peers of the established connections on the master's HA port, seen in its namespace (a JVM's
    dual-stack socket shows an IPv4 peer as [::ffff:a.b.c.d]: the packets are IPv4 all the same)."""
    out = host.run(["ss", "-Htn", "state", "established", "sport", "=", f":{ha_port}"])
    peers = (line.split()[-1].rsplit(":", 1)[0] for line in out.splitlines() if line.strip())
    return {p.removeprefix("[::ffff:").removesuffix("]") for p in peers}


def _partition_round(lab: Lab, tmp_path: Path, impl: str, home: Path | None = None) -> None:
    clock = WallClock()
    with Topology(tmp_path / "topo", impl=impl, rocketmq_home=home, broker_conf={"brokerRole": "SYNC_MASTER"},  # type: ignore[arg-type]
                  slaves=1, lab=lab) as topo:
        master, slave = topo.brokers
        mh, sh = lab.hosts[master.name], lab.hosts[slave.name]
        assert (master.addr, slave.addr) == (f"{mh.addr}:{LAB_LISTEN_PORT}", f"{sh.addr}:{LAB_LISTEN_PORT}")
        assert topo.namesrv_addr.startswith(lab.gateway + ":")
        # Registration: the name server knows both brokers at their hosts' addresses.
        _wait(lambda: admin.cluster_info(topo.namesrv_addr)["brokerAddrTable"].get("broker-a", {})
              .get("brokerAddrs", {}) == {"0": master.addr, "1": slave.addr}, 30, "both brokers registered")
        admin.update_topic(topo.namesrv_addr, TOPIC, 1, 1, broker_addr=master.addr)
        _wait(lambda: _send(master) == ResponseCode.SUCCESS, 60, "a SEND_OK (the slave replicating)")
        # The HA connection runs between the hosts' addresses (RocketMQ's slave is told the master's: the
        # reference slave takes it from the name server's reply, which carries the master's brokerIP1).
        if impl == "rocketmq":
            assert slave.conf["haMasterAddress"] == f"{mh.addr}:{master.ha_port}"
            assert master.conf["brokerIP2"] == mh.addr
        assert _ha_peers(mh, master.ha_port) == {sh.addr}

        with Partition(plan(Cut.MASTER_SLAVE, mh, sh, lab.gateway)) as cut:
            assert TABLE in mh.run(["nft", "list", "tables"]) and TABLE in sh.run(["nft", "list", "tables"])
            slave_end = _end(slave, clock)
            code = _send(master)  # waits slaveTimeout (3 s) for the slave's report that cannot come
            assert code in (ResponseCode.FLUSH_SLAVE_TIMEOUT, ResponseCode.SLAVE_NOT_AVAILABLE)
            assert _end(master, clock) > slave_end  # stored on the master all the same
            time.sleep(1.0)
            assert _end(slave, clock) == slave_end  # the established HA connection carries nothing
            assert not _connects(sh, mh.addr, master.ha_port)
        assert cut.healed_ns is not None and cut.cut_ns is not None and cut.healed_ns > cut.cut_ns
        assert TABLE not in mh.run(["nft", "list", "tables"]) and TABLE not in sh.run(["nft", "list", "tables"])
        master_end = _end(master, clock)
        _wait(lambda: _end(slave, clock) >= master_end, 60, "the slave caught up after the heal")
        _wait(lambda: _send(master) == ResponseCode.SUCCESS, 30, "SEND_OK again")

        with Partition(plan(Cut.CLIENTS_MASTER, mh, sh, lab.gateway)):
            assert not _connects(None, mh.addr, master.port)  # clients (root namespace) cannot reach it
            assert _connects(None, sh.addr, slave.port)  # ... but the slave
            assert _connects(sh, mh.addr, master.port)  # the slave still reaches the master
            assert try_status(master.addr, clock) is None
        assert _send(master) == ResponseCode.SUCCESS


@pytest.mark.e2e
@pytest.mark.root
def test_partitions_on_a_reference_group(lab: Lab, tmp_path: Path) -> None:
    _partition_round(lab, tmp_path, "reference")


@pytest.mark.e2e
@pytest.mark.root
@pytest.mark.slow
def test_partitions_on_a_rocketmq_group(lab: Lab, tmp_path: Path, rocketmq_home: Path) -> None:
    _partition_round(lab, tmp_path, "rocketmq", rocketmq_home)


@pytest.mark.e2e
@pytest.mark.root
def test_a_partition_heals_when_its_block_fails(lab: Lab) -> None:
    a, b = lab.add_host("a"), lab.add_host("b")
    with pytest.raises(KeyError), Partition(plan(Cut.MASTER_SLAVE, a, b, lab.gateway)):
        assert TABLE in a.run(["nft", "list", "tables"])
        raise KeyError("the experiment failed mid-cut")
    assert TABLE not in a.run(["nft", "list", "tables"]) and TABLE not in b.run(["nft", "list", "tables"])
