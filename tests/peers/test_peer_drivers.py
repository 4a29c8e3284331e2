"""The peer brokers end to end: harness.peers starts nats-server / rabbitmq-server (real processes, loopback,
private directories), the driver workload sends and consumes through each driver, the run record is written and
the checker judges it; a kill -9 of the server process under load loses nothing acknowledged. Skipped with the
reason when a server is not installed (scripts/setup.sh installs Debian's packages as root)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from chaos.peer_faults import DRAIN_TIMEOUT_S, PeerFaultResult, run_peer_fault
from harness.driver_load import DriverLoad, LoadShape
from harness.peer_drivers import AckPromise, NatsDriver, RabbitMQDriver, loss_allowed, stream_name
from harness.peers import PeerServer, unavailable_reason
from harness.records import RunRecord
from harness.records.schema import FaultKind

pytest.importorskip("nats", reason="nats-py not installed (pip install -e '.[peers]')")
pytest.importorskip("pika", reason="pika not installed (pip install -e '.[peers]')")

DRIVERS = ["nats", "rabbitmq-classic", "rabbitmq-quorum"]


def _kind(driver: str) -> str:
    return "nats" if driver == "nats" else "rabbitmq"


def _skip_unless(driver: str) -> None:
    reason = unavailable_reason(_kind(driver))  # type: ignore[arg-type]
    if reason is not None:
        pytest.skip(reason)


def _pids(name: str) -> set[int]:
    out = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if (d / "comm").read_text().strip() == name and state != "Z":  # a zombie is gone
                    out.add(int(d.name))
            except OSError:
                pass
    return out


def test_ack_promises() -> None:
    assert NatsDriver.ack_promise is AckPromise.PAGE_CACHE
    assert RabbitMQDriver.ack_promise is AckPromise.FSYNC
    assert loss_allowed("page_cache", power_loss=True)
    assert not loss_allowed("page_cache", power_loss=False)  # a process kill leaves the page cache
    assert not loss_allowed("fsync", power_loss=True)
    assert stream_name("a.b*c>d e%f") == "a_b_c_d_e_f"


@pytest.mark.parametrize("driver", DRIVERS)
def test_driver_load_records_and_checks(driver: str, tmp_path: Path) -> None:
    _skip_unless(driver)
    with PeerServer(_kind(driver), root=tmp_path / "srv") as server:  # type: ignore[arg-type]
        drv = (NatsDriver(server.url) if driver == "nats"
               else RabbitMQDriver(server.url, queue_type=driver.split("-")[1]))  # type: ignore[arg-type]
        record = RunRecord.create(tmp_path / "runs", f"peer-{driver}", {"driver": driver})
        load = DriverLoad(drv, record, LoadShape(seconds=1.5, in_flight=16, queues=2), topic="PeerT", group="pg")
        try:
            result = load.run()
        finally:
            drv.stop()
        assert drv.queue_count("PeerT") == 2
    assert result.sent_ok > 50 and result.sent_fail == 0
    assert result.check is not None and result.check.valid and result.check.lost == 0
    assert result.check.acknowledged == result.sent_ok
    meta = json.loads((record.run_dir / "meta.json").read_text())
    assert meta["driver"] == drv.impl
    assert meta["ack_promise"] == ("page_cache" if driver == "nats" else "fsync")
    assert meta["broker_impl"].startswith("nats-server" if driver == "nats" else "rabbitmq-server")
    assert (record.run_dir / "check.json").is_file()
    assert list((record.run_dir / "events").glob("part-*.parquet"))


def test_peer_server_leaves_no_process(tmp_path: Path) -> None:
    _skip_unless("rabbitmq-quorum")
    # Other tests may run RabbitMQ beside this one (xdist): only this server's processes are looked for — those
    # whose command line names its private directory, and its epmd (started with its private port).
    server = PeerServer("rabbitmq", root=tmp_path / "r")
    server.start()
    try:
        vm = server.pid
        assert vm in _pids("beam.smp")
        epmd_port = server._epmd_port
        assert _mine(tmp_path, epmd_port), "the server's processes were not found"
        server.kill()
        assert not server.alive and vm not in _pids("beam.smp")
        server.start()  # the same directory and ports
        assert server.alive
    finally:
        server.cleanup()
    assert _mine(tmp_path, epmd_port) == set()


def _mine(root: Path, epmd_port: int) -> set[int]:
    """Live processes whose command line names ``root`` or is an epmd on ``epmd_port``."""
    out = set()
    for pid in _pids("beam.smp") | _pids("epmd"):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(root) in cmd or f"-port {epmd_port} " in cmd + " ":
            out.add(pid)
    return out


def _kill9_cell(driver: str, tmp_path: Path) -> PeerFaultResult:
    """One kill -9 + restart of the peer's server under the driver load, drained and checked; the fault records
    checked, and the killed server gone."""
    _skip_unless(driver)
    result = run_peer_fault(driver, "kill9", cycles=1, runs_dir=tmp_path / "runs", gap_s=(0.8, 1.0), seed=1,
                            shape=LoadShape(in_flight=16, queues=2, drain_timeout_s=DRAIN_TIMEOUT_S),
                            work_dir=tmp_path)
    assert result.skipped is None and result.error is None, result.error
    assert result.load is not None and result.load.check is not None
    assert result.load.check.acknowledged > 0
    assert result.run_dir is not None
    faults = [json.loads(line) for line in (result.run_dir / "faults.jsonl").read_text().splitlines()]
    assert [f["kind"] for f in faults] == [FaultKind.KILL9, FaultKind.RESTART]
    pid = int(faults[0]["target"].rsplit(":", 1)[1])
    with pytest.raises(ProcessLookupError):
        os.kill(pid, signal.SIG_DFL)  # the killed server is gone (and cleanup stopped the restarted one)
    return result


def test_kill9_on_nats_loses_nothing_acknowledged(tmp_path: Path) -> None:
    check = _kill9_cell("nats", tmp_path).load.check  # type: ignore[union-attr]
    assert check is not None and check.lost == 0 and check.valid


@pytest.mark.slow
@pytest.mark.machine  # never beside a sysctl profile test (tests/conftest.py's "machine" group)
@pytest.mark.timeout(600)  # the drain may wait up to DRAIN_TIMEOUT_S for a quorum queue to serve again
def test_kill9_on_rabbitmq_quorum_records_what_went_undelivered(tmp_path: Path) -> None:
    """RabbitMQ quorum after a kill -9 on this loaded 2-core machine: in two CI runs its queue refused the
    consumer (INTERNAL_ERROR) and 655, then 47 acknowledged messages were not delivered within the drain (alone,
    and beside two busy cores, it lost none). Whether RabbitMQ lost them or its consumer could not read what it
    held is not settled, so what is asserted here is the harness's part: an undelivered acknowledged message is
    a recorded violation of the peer's promise, with what the broker still reported stored (a finding about
    the peer, chaos/peer_faults.py), never silence."""
    result = _kill9_cell("rabbitmq-quorum", tmp_path)
    assert result.load is not None and result.load.check is not None
    lost = result.load.check.lost
    if lost:
        (violation,) = [v for v in result.violations if "lost under kill9" in v]
        assert violation.startswith(f"{lost} acknowledged messages lost under kill9 (the broker still reported ")
        assert result.summary()["backlog_at_end"] == result.load.backlog_at_end
    else:
        assert result.ok, result.violations
