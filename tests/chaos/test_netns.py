"""The lab network (chaos/netns.py): names and addresses (pure), and real namespaces, veth pairs and a bridge as
root: hosts reach each other and the root namespace reaches them, everything is in the ledger while it exists,
nothing is left after close, and a lab whose owner was killed is removed by the leftovers sweep."""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaos import netns
from chaos.leftovers import Ledger, ResourceKind, cleanup
from chaos.netns import Lab

REASON = netns.unavailable()


def test_lab_subnets_tile_the_benchmarking_range() -> None:
    first, last = netns.lab_subnet(0), netns.lab_subnet(netns.MAX_LABS - 1)
    assert str(first) == "198.18.0.0/24" and str(netns.lab_subnet(1)) == "198.18.1.0/24"
    assert str(netns.lab_subnet(256)) == "198.19.0.0/24" and str(last) == "198.19.255.0/24"
    assert all(s.subnet_of(ipaddress.IPv4Network("198.18.0.0/15")) for s in (first, last))
    with pytest.raises(ValueError):
        netns.lab_subnet(netns.MAX_LABS)


def test_interface_names_fit_ifnamsiz() -> None:
    worst = netns.MAX_LABS - 1, netns.MAX_HOSTS + 1
    assert len(netns.bridge_name(worst[0])) <= netns.IFNAMSIZ
    assert len(netns.veth_name(*worst)) <= netns.IFNAMSIZ
    assert netns.netns_name(3, 2) == "rmqlab3-h2" and netns.veth_name(3, 2) == "rl3h2"


def test_without_root_the_reason_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    reason = netns.unavailable()
    assert reason is not None and "root" in reason
    with pytest.raises(RuntimeError, match="root"):
        Lab(Ledger(Path("/nonexistent/state.json"))).open()


def _links() -> set[str]:
    return set(os.listdir("/sys/class/net"))


def _namespaces() -> set[str]:
    return set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()


def _echo_server(host: netns.Host, port: int) -> subprocess.Popen[bytes]:
    code = ("import socket,sys; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1);"
            f"s.bind(('{host.addr}', {port})); s.listen(); print('up', flush=True)\n"
            "while True:\n c, _ = s.accept(); c.sendall(c.recv(64)); c.close()")
    proc = subprocess.Popen([*host.exec_prefix(), sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
    return proc


@pytest.mark.e2e
@pytest.mark.root
def test_hosts_reach_each_other_and_close_leaves_nothing(tmp_path: Path) -> None:
    if REASON is not None:
        pytest.skip(f"lab network: {REASON}")
    ledger = Ledger(tmp_path / "state.json")
    links_before, ns_before = _links(), _namespaces()
    with Lab(ledger) as lab:
        a, b = lab.add_host("a"), lab.add_host("b")
        assert ipaddress.ip_address(a.addr) in lab.subnet and a.addr != b.addr != lab.gateway
        kinds = {(e.kind, e.ident) for e in ledger.entries()}
        assert {(ResourceKind.NETNS, a.netns), (ResourceKind.NETNS, b.netns), (ResourceKind.LINK, lab.bridge),
                (ResourceKind.LINK, a.veth), (ResourceKind.ROUTE, str(lab.subnet))} <= kinds
        route = subprocess.run(["ip", "route", "show", "exact", str(lab.subnet), "type", "unreachable"],
                               capture_output=True, text=True, check=True).stdout
        assert "metric 4000" in route
        server = _echo_server(a, 7000)
        try:
            with socket.create_connection((a.addr, 7000), timeout=5) as c:  # root namespace -> host
                assert c.getsockname()[0] == lab.gateway
                c.sendall(b"ping")
                assert c.recv(64) == b"ping"
            out = b.run([sys.executable, "-c", "import socket; c = socket.create_connection"  # host -> host
                         f"(('{a.addr}', 7000), timeout=5); c.sendall(b'hi'); print(c.recv(64), c.getsockname()[0])"])
            assert out.split() == ["b'hi'", b.addr]
        finally:
            server.kill()
            server.wait()
            assert server.stdout is not None
            server.stdout.close()
        with Lab(ledger) as other:  # a second lab coexists: another index, bridge and subnet
            assert other.index != lab.index and other.bridge in _links()
    assert _links() == links_before and _namespaces() == ns_before
    assert ledger.entries() == []
    assert subprocess.run(["ip", "route", "show", "exact", str(lab.subnet)], capture_output=True, text=True,
                          check=True).stdout == ""


@pytest.mark.e2e
@pytest.mark.root
def test_a_killed_runs_lab_is_removed_by_the_sweep(tmp_path: Path) -> None:
    if REASON is not None:
        pytest.skip(f"lab network: {REASON}")
    state = tmp_path / "state.json"
    code = ("import sys, time; from pathlib import Path\n"
            "from chaos.leftovers import Ledger; from chaos.netns import Lab\n"
            f"lab = Lab(Ledger(Path({str(state)!r}))).open(); h = lab.add_host('x')\n"
            "import subprocess; p = subprocess.Popen(h.exec_prefix() + ['sleep', '300'])\n"
            "print(lab.bridge, h.netns, lab.subnet, p.pid, flush=True); time.sleep(300)")
    owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None
    bridge, ns, subnet, sleeper = owner.stdout.readline().split()
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait()
    owner.stdout.close()
    assert bridge in _links() and ns in _namespaces()  # the killed run left its lab, and a process in it
    report = cleanup(Ledger(state), restore_sysctl=False)
    assert report.ok, report.failed
    assert bridge not in _links() and ns not in _namespaces()
    assert not Path(f"/proc/{sleeper}").exists() or _zombie_or_gone(int(sleeper))
    assert subprocess.run(["ip", "route", "show", "exact", subnet], capture_output=True, text=True,
                          check=True).stdout == ""
    assert Ledger(state).entries() == []


def _zombie_or_gone(pid: int) -> bool:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False
