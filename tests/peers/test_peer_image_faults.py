"""Power loss and disk fill on the peer brokers end to end (chaos.peer_faults): the real nats-server /
rabbitmq-server with its data directory on a loop-mounted ext4 image, the driver load through their own clients,
the crash image swapped in and the server restarted on it, the disk filled and freed; judged against each
peer's promise. Skipped with the reason without root + loop devices or without the server
(scripts/setup.sh installs them as root)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos.leftovers import Ledger
from chaos.loopfs import unsupported_reason as image_unsupported_reason
from chaos.peer_faults import PeerFaultResult, run_peer_fault
from harness.driver_load import LoadShape
from harness.peers import unavailable_reason

pytest.importorskip("nats", reason="nats-py not installed (pip install -e '.[peers]')")
pytest.importorskip("pika", reason="pika not installed (pip install -e '.[peers]')")

# Every cell here is slow: a RabbitMQ boot takes 10-30 s on the 2-core machine and each cycle restarts it.
# Loop devices and mounts are machine-wide state: one worker runs these one after another (tests/conftest.py).
pytestmark = pytest.mark.machine

def _run(driver: str, fault: str, tmp_path: Path, cycles: int = 1, hold_s: float = 4.0) -> PeerFaultResult:
    reason = unavailable_reason("nats" if driver == "nats" else "rabbitmq") or image_unsupported_reason()
    if reason is not None:
        pytest.skip(reason)
    ledger = Ledger(tmp_path / "chaos-state.json")
    result = run_peer_fault(driver, fault, cycles=cycles, runs_dir=tmp_path / "runs", gap_s=(0.8, 1.2), seed=3,
                            shape=LoadShape(in_flight=16, queues=2, drain_timeout_s=20.0), work_dir=tmp_path,
                            ledger=ledger, hold_s=hold_s)
    assert result.skipped is None and result.error is None
    # Every mount, loop device and image this cell made is gone again (also the ledger's record of them).
    assert ledger.entries() == []
    assert not list(tmp_path.glob(f"peer-{driver}-*")), "the cell's work directory (image, mount point) remains"
    return result


def _faults(result: PeerFaultResult) -> list[dict[str, object]]:
    assert result.run_dir is not None
    return [json.loads(line) for line in (result.run_dir / "faults.jsonl").read_text().splitlines()]


# NATS's cell takes ~30 s: a loss its promise allows leaves acknowledged messages the drain waits 20 s for.
@pytest.mark.slow
@pytest.mark.parametrize("driver", ["nats", "rabbitmq-classic", "rabbitmq-quorum"])
def test_power_loss_is_judged_against_the_peers_promise(driver: str, tmp_path: Path) -> None:
    result = _run(driver, "power_loss", tmp_path)
    assert [f["kind"] for f in _faults(result)] == ["power_loss", "restart"]
    assert result.cycle_info[0]["copy_s"] is not None and int(result.cycle_info[0]["image_allocated_bytes"]) > 0
    assert result.load is not None and result.load.check is not None and result.loss is not None
    check, loss = result.load.check, result.loss
    assert check.acknowledged > 0 and loss.lost == check.lost
    if driver == "nats":  # page cache: what was acknowledged in the 2 minutes before the crash may go
        assert result.promise == "page_cache" and loss.window_s > 0
        assert loss.beyond_promise == 0 and loss.allowed == check.lost
        assert result.ok and result.violations == []
    elif driver == "rabbitmq-classic":  # confirms after fsync: nothing may go
        assert result.promise == "fsync" and loss.window_s == 0
        # What is judged here is the cell, not RabbitMQ: either nothing acknowledged was lost, or every lost
        # message is named beyond the promise and the cell records the violation (a finding). In CI once, a
        # durable queue was gone after the power cut (404 NOT_FOUND on ChaosTopic.1) with 332 confirmed
        # messages in it (docs/interop.md).
        assert (check.lost == 0 and result.ok) or (
            loss.beyond_promise == check.lost > 0 and not result.ok
            and any("beyond the fsync promise" in v for v in result.violations))
    else:
        # A single-node quorum queue killed mid-write did not elect its leader again within a minute on this
        # machine (docs/interop.md): its acknowledged backlog is then undelivered, which the cell reports as a
        # stall, not as a pass. Either it served again and lost nothing, or the stall is what was recorded.
        stalled = any("not_serving" in c for c in result.cycle_info)
        assert (check.lost == 0 and result.ok) or stalled


@pytest.mark.slow  # each cycle holds the disk full for 4 s and may wait up to 60 s for the peer to serve again
# RabbitMQ exits on ENOSPC under the clients: once in four runs a socket of a pika connection that died with it was
# collected unclosed (ResourceWarning, an error under this suite's filterwarnings). A leak on the client's failure
# path, not what this test judges; left for the drivers (docs/interop.md).
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.parametrize("driver", ["nats", "rabbitmq-classic", "rabbitmq-quorum"])
def test_disk_fill_records_the_answers_and_loses_nothing_acknowledged(driver: str, tmp_path: Path) -> None:
    result = _run(driver, "disk_fill", tmp_path)
    kinds = [f["kind"] for f in _faults(result)]
    assert kinds[:2] == ["disk_fill", "disk_free"]
    info = result.cycle_info[0]
    assert float(info["used_ratio"]) > 0.95
    # The disk was full for 4 s under a 1,000 msg/s load: the peer refused, hung or died — something other than
    # an acknowledgement answered the sends of that time.
    assert int(info["failed_while_full"]) + int(info["unknown_while_full"]) > 0 or not info["server_alive_while_full"]
    # Served again, on its own or after the restart the cell gives a peer that did not come back.
    assert info["recovered_s"] is not None or info.get("recovered_after_restart") is True
    assert ("restart" in kinds) == bool(info["restarted"])
    assert result.load is not None and result.load.check is not None
    stalled = any("not_serving" in c for c in result.cycle_info)
    assert (result.load.check.lost == 0 and result.ok) or stalled
