"""The FilterServer end to end on real processes: a name server, a reference broker with filterServerNums
filter servers it starts and supervises, push consumers in class-filter mode, and hostile filters."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.launcher import Topology
from reference_broker.common.crc import crc32
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import RemotingCommand, create_request
from tests.client.helpers import create_topic, wait_for
from tests.filtersrv import flow

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def topo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topology]:
    with Topology(tmp_path_factory.mktemp("filtersrv"), broker_conf={"filterServerNums": 1}) as t:
        yield t


def _expected(ids: list[int]) -> set[str]:
    return {f"k{i}" for i in ids if flow.good_rule(i)}


def test_route_lists_the_filter_server_and_a_class_filter_consumer_gets_exactly_the_matches(topo: Topology) -> None:
    create_topic(topo, "FsExact", 2)
    wait_for(lambda: len(flow.filter_servers(topo, "FsExact")) == 1, 30, "the filter server in the route")
    table = flow.route(topo, "FsExact")["filterServerTable"]
    assert list(table) == [topo.brokers[0].addr]  # keyed by the broker's address
    sent = flow.send(topo, "FsExact", 0, 60)
    collector = flow.Collector(topo, "FsExact", "FsExactGroup", flow.GOOD_SOURCE).start()
    try:
        wait_for(lambda: collector.got() >= _expected(sent), 60, "the matching messages")
        time.sleep(1.5)  # a few more pull rounds: nothing else arrives
        assert collector.got() == _expected(sent)
        assert len(collector.keys) == len(_expected(sent))  # and nothing twice
    finally:
        collector.shutdown()


def test_a_killed_filter_server_is_restarted_and_consumption_goes_on(topo: Topology) -> None:
    create_topic(topo, "FsKill", 2)
    wait_for(lambda: len(flow.filter_servers(topo, "FsKill")) == 1, 30, "the filter server in the route")
    before = flow.filter_servers(topo, "FsKill")
    first = flow.send(topo, "FsKill", 0, 20)
    collector = flow.Collector(topo, "FsKill", "FsKillGroup", flow.GOOD_SOURCE).start()
    try:
        wait_for(lambda: collector.got() >= _expected(first), 60, "the first matching messages")
        broker = topo.brokers[0]
        [fs_pid] = flow.filtersrv_pids(broker.pid)
        os.kill(fs_pid, signal.SIGKILL)
        wait_for(lambda: flow.filtersrv_pids(broker.pid) not in ([], [fs_pid]), 20, "a new filter server process")
        wait_for(lambda: flow.filter_servers(topo, "FsKill") not in ([], before), 30, "the new filter server routed")
        second = flow.send(topo, "FsKill", 20, 20)
        wait_for(lambda: collector.got() >= _expected(first + second), 60, "the matching messages after the restart")
        time.sleep(1.0)
        assert collector.got() == _expected(first + second)
    finally:
        collector.shutdown()


def _attacks(broker_pid: int, broker_port: int, marker: Path) -> dict[str, tuple[str, str]]:
    """group -> (source, a word the error reply names)."""
    return {
        "AtkRaise": ("def match(m):\n    raise ValueError('attack')\n", "ValueError"),
        "AtkLoop": ("def match(m):\n    while True:\n        try:\n            while True:\n                pass\n"
                    "        except BaseException:\n            pass\n", "deadline"),
        "AtkMemory": ("def match(m):\n    return len(b'x' * 10**10) > 0\n", "MemoryError"),
        "AtkKill": (f"import os\ndef match(m):\n    os.kill({broker_pid}, 9)\n    return True\n", "os.kill"),
        "AtkSubprocess": ("def match(m):\n    import subprocess\n"
                          f"    subprocess.run(['kill', '-9', '{broker_pid}'])\n    return True\n", "subprocess"),
        "AtkSystem": (f"import os\ndef match(m):\n    os.system('kill -9 {broker_pid}')\n    return True\n",
                      "os.system"),
        "AtkSocket": ("def match(m):\n    import socket\n"
                      f"    socket.create_connection(('127.0.0.1', {broker_port}), 1)\n    return True\n", "socket"),
        "AtkWrite": (f"def match(m):\n    open({str(marker)!r}, 'w').write('x')\n    return True\n", "writing"),
    }


def _upload(client: RemotingClient, group: str, topic: str, source: str) -> RemotingCommand:
    body = source.encode()
    return client.invoke(create_request(RequestCode.REGISTER_MESSAGE_FILTER_CLASS, {
        "consumerGroup": group, "topic": topic, "className": group, "classCRC": str(crc32(body))}, body), 15.0)


def _pull(client: RemotingClient, group: str, topic: str, queue_id: int) -> RemotingCommand:
    return client.invoke(create_request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": group, "topic": topic, "queueId": str(queue_id), "queueOffset": "0", "maxMsgNums": "32",
        "sysFlag": "8", "commitOffset": "0", "suspendTimeoutMillis": "0", "subVersion": "0"}), 15.0)


def test_hostile_filters_cost_only_their_own_group(topo: Topology) -> None:
    create_topic(topo, "FsAttack", 1)
    wait_for(lambda: len(flow.filter_servers(topo, "FsAttack")) == 1, 30, "the filter server in the route")
    [fs_addr] = flow.filter_servers(topo, "FsAttack")
    broker = topo.brokers[0]
    broker_pid = broker.pid
    marker = Path("/tmp") / f"fs-attack-{uuid.uuid4().hex}"
    attacks = _attacks(broker_pid, broker.port, marker)
    sent = flow.send(topo, "FsAttack", 0, 40)
    collector = flow.Collector(topo, "FsAttack", "FsGoodGroup", flow.GOOD_SOURCE).start()
    # One attacker through the client library too: its pulls keep failing and being retried meanwhile.
    pushed_attacker = flow.Collector(topo, "FsAttack", "AtkPushLoop",
                                     "def match(m):\n    while True:\n        pass\n").start()
    replies: dict[str, list[RemotingCommand]] = {}
    uploads: dict[str, RemotingCommand] = {}

    def attack(group: str, source: str) -> None:
        with RemotingClient.from_addr(fs_addr, timeout_s=15.0) as client:
            uploads[group] = _upload(client, group, "FsAttack", source)
            replies[group] = [_pull(client, group, "FsAttack", 0) for _ in range(2)]

    threads = [threading.Thread(target=attack, args=(g, s)) for g, (s, _) in attacks.items()]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert all(not t.is_alive() for t in threads)
        for group, (_source, word) in attacks.items():
            assert uploads[group].code == ResponseCode.SUCCESS, (group, uploads[group].remark)
            for reply in replies[group]:
                assert reply.code == ResponseCode.SYSTEM_ERROR, (group, reply.code, reply.remark)
                assert word in (reply.remark or ""), (group, reply.remark)
                assert not reply.body
        # The broker survived every attack and still serves: it is alive, accepts sends, and the good group
        # gets exactly its messages, the new ones included.
        assert broker.alive
        more = flow.send(topo, "FsAttack", 40, 10)
        wait_for(lambda: collector.got() >= _expected(sent + more), 60, "the good group's messages")
        time.sleep(1.0)
        assert collector.got() == _expected(sent + more)
        assert not marker.exists()
        assert flow.filtersrv_pids(broker_pid), "the filter server itself is still up"
        assert pushed_attacker.got() == set()
    finally:
        pushed_attacker.shutdown()
        collector.shutdown()
        marker.unlink(missing_ok=True)


def test_two_filter_servers_are_routed_and_die_with_a_killed_broker(tmp_path: Path) -> None:
    with Topology(tmp_path, broker_conf={"filterServerNums": 2}) as topo:
        create_topic(topo, "FsTwo", 1)
        wait_for(lambda: len(flow.filter_servers(topo, "FsTwo")) == 2, 30, "two filter servers in the route")
        broker = topo.brokers[0]
        fs_pids = flow.filtersrv_pids(broker.pid)
        assert len(fs_pids) == 2
        # A filter with a worker each, so that the workers' fate is checked too.
        for addr in flow.filter_servers(topo, "FsTwo"):
            with RemotingClient.from_addr(addr, timeout_s=15.0) as client:
                assert _upload(client, "FsTwoGroup", "FsTwo", flow.GOOD_SOURCE).code == ResponseCode.SUCCESS
        workers = [w for p in fs_pids for w in flow.children(p)]
        assert len(workers) == 2
        os.kill(broker.pid, signal.SIGKILL)
        wait_for(lambda: not any(Path(f"/proc/{p}").exists() and "Z" not in _state(p)
                                 for p in fs_pids + workers), 15, "no filter server or worker left")


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"


def test_a_clean_broker_shutdown_stops_its_filter_servers_and_none_start_without_filter_server_nums(
        tmp_path: Path) -> None:
    with Topology(tmp_path / "one", broker_conf={"filterServerNums": 1}) as topo:
        create_topic(topo, "FsStop", 1)
        wait_for(lambda: len(flow.filter_servers(topo, "FsStop")) == 1, 30, "the filter server in the route")
        broker = topo.brokers[0]
        fs_pids = flow.filtersrv_pids(broker.pid)
        assert len(fs_pids) == 1
        assert broker.stop() == 0
        assert not any(Path(f"/proc/{p}").exists() and _state(p) != "Z" for p in fs_pids)
    with Topology(tmp_path / "none") as topo:
        create_topic(topo, "FsNone", 1)
        assert flow.filtersrv_pids(topo.brokers[0].pid) == []
        assert flow.filter_servers(topo, "FsNone") == []
