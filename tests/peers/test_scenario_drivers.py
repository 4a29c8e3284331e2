"""``--driver`` on the scenarios, end to end: locust runs scenarios/throughput.py headless with each driver — a
peer's server started embedded (nats-server, rabbitmq-server), the C++ client producing into the reference
broker — and the run record is complete, the checker finds nothing lost, meta.json names the driver and the
acknowledgement's promise. Skipped with the reason when a server or the C++ client is missing."""

from __future__ import annotations

import pytest

from harness.cpp_driver import cpp_unavailable
from harness.drivers import is_peer, server_kind
from harness.peers import unavailable_reason
from harness.records import load_check, load_meta, validate_run
from tests.scenarios.test_e2e import run_locust

pytestmark = pytest.mark.e2e


def test_throughput_scenario_with_the_lean_rocketmq_publisher(tmp_path) -> None:
    """``--rocketmq-client lean``: the agents send through harness.rocketmq_lean; nothing lost, meta.json says so."""
    proc, run = run_locust("throughput", tmp_path, "-t", "4s", "-u", "1", "--rate", "300", "--rocketmq-client",
                           "lean", "--broker-conf", f"mappedFileSizeCommitLog={64 << 20}", timeout=180)
    detail = f"\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, detail
    assert validate_run(run) == [], detail
    check = load_check(run)
    assert check is not None and check["valid"] and check["lost"] == 0, check
    assert check["acknowledged"] > 300, check
    meta = load_meta(run)
    assert (meta["driver"], meta["rocketmq_client"]) == ("rocketmq", "lean")


@pytest.mark.parametrize(("driver", "promise", "impl"), [
    ("nats", "page_cache", "nats-server"),
    ("rabbitmq-quorum", "fsync", "rabbitmq-server"),
    ("cpp", "page_cache", "reference_broker"),
])
def test_throughput_scenario_with_driver(driver: str, promise: str, impl: str, tmp_path) -> None:
    reason = unavailable_reason(server_kind(driver)) if is_peer(driver) else cpp_unavailable()
    if is_peer(driver) and reason is None:
        pytest.importorskip("nats" if driver == "nats" else "pika")
    if reason is not None:
        pytest.skip(reason)
    proc, run = run_locust("throughput", tmp_path, "-t", "4s", "-u", "1", "--rate", "300", "--driver", driver,
                           "--broker-conf", f"mappedFileSizeCommitLog={64 << 20}", timeout=180)
    detail = f"\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, detail
    assert validate_run(run) == [], detail
    check = load_check(run)
    assert check is not None and check["valid"] and check["lost"] == 0, check
    assert check["acknowledged"] > 300, check  # ~4 s at 300 msg/s
    meta = load_meta(run)
    assert meta["driver"] == driver and meta["params"]["driver"] == driver
    assert meta["ack_promise"] == promise
    assert meta["broker_impl"].startswith(impl), meta["broker_impl"]
    assert meta.get("peer_client") == ("lean" if is_peer(driver) else None)  # the scenarios' default send path
    assert meta.get("rocketmq_client") == ("cpp" if driver == "cpp" else None)
    assert meta["results"]["load"]["ok"] == check["acknowledged"]
