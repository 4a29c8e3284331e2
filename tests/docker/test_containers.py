"""docker/: the compose file's shape, the entrypoint's broker.conf, which faults run on which topology, and
(with a docker daemon and the image, docker/build-offline.sh) chaos cells on containers through real
containers. The whole path (offline build, compose, locust, kill -9, reports) is `tox -e docker`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from chaos import ExperimentSpec, FaultName, FlushMode, LoadSpec, make_fault, run_experiment
from chaos.experiment import CONTAINER_FAULTS, PROCESS_FAULTS, TopologyKind
from chaos.leftovers import Ledger, ResourceKind, remove_docker_object
from harness import containers

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker" / "compose.yaml"
BROKERS = ("broker-a", "broker-a-s", "broker-b", "broker-b-s")


def _compose_config() -> dict:
    """``docker-compose config`` (variables resolved, anchors merged), parsed by docker-compose's own Python
    (it ships PyYAML; the project does not need it otherwise)."""
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.skip("docker-compose is not installed")
    out = subprocess.run([exe, "-f", str(COMPOSE), "config"], capture_output=True, text=True, check=True,
                         env={k: v for k, v in os.environ.items() if not k.startswith("RMQ_LAB_")}).stdout
    first = Path(exe).read_text(errors="replace").splitlines()[0]
    interpreter = first[2:].strip().split()[0] if first.startswith("#!") else sys.executable
    to_json = "import json, sys, yaml; print(json.dumps(yaml.safe_load(sys.stdin)))"
    done = subprocess.run([interpreter, "-c", to_json], input=out, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot parse docker-compose's YAML here: {done.stderr.strip()[-200:]}")
    return json.loads(done.stdout)


def test_compose_services_run_under_init_with_remoting_health_checks():
    services = _compose_config()["services"]
    assert {"namesrv", *BROKERS, "locust-master", "locust-worker-1", "locust-worker-2", "reports"} <= set(services)
    for name, svc in services.items():
        assert svc.get("init") is True, name
    for name in ("namesrv", *BROKERS):
        test = " ".join(services[name]["healthcheck"]["test"])
        assert "rmq-lab-entrypoint" in test and " health " in f" {test} ", (name, test)
        assert "nc " not in test and "/dev/tcp" not in test  # a remoting request, not a port probe


def test_compose_brokers_advertise_brokerip1_and_slaves_follow_their_master():
    services = _compose_config()["services"]
    confs = {}
    for name in BROKERS:
        text = services[name]["environment"]["RMQ_BROKER_CONF"]
        confs[name] = dict(kv.strip().split("=", 1) for kv in text.split(";") if kv.strip())
        assert confs[name]["brokerIP1"] == services[name]["networks"]["lab"]["ipv4_address"]
        assert services[name]["stop_signal"] == "SIGTERM"
    for slave, master in (("broker-a-s", "broker-a"), ("broker-b-s", "broker-b")):
        assert confs[slave]["brokerRole"] == "SLAVE" and confs[master]["brokerRole"] == "SYNC_MASTER"
        assert confs[slave]["brokerName"] == confs[master]["brokerName"]
        ha = f"{confs[master]['brokerIP1']}:{int(confs[master]['listenPort']) + 1}"
        assert confs[slave]["haMasterAddress"] == ha
    assert len({c["listenPort"] for c in confs.values()}) == 4  # one host address can publish all four


def test_entrypoint_writes_the_broker_conf_from_the_environment(tmp_path):
    """The broker role's conf lines (';'-separated, folded by YAML) become broker.conf, which the broker
    then reads: here the broker refuses a bad value in it and names the line."""
    script = (ROOT / "docker" / "entrypoint.sh").read_text()
    script = script.replace("/data/conf/broker.conf", str(tmp_path / "broker.conf"))
    script = script.replace("exec python -m reference_broker", f"exec {sys.executable} -m reference_broker")
    entry = tmp_path / "entrypoint.sh"
    entry.write_text(script)
    env = {**os.environ, "RMQ_BROKER_CONF": "brokerName=broker-x; listenPort=70000;\n storePathRootDir=/x;"}
    done = subprocess.run(["sh", str(entry), "broker"], capture_output=True, text=True, env=env, timeout=60,
                          cwd=ROOT)
    assert (tmp_path / "broker.conf").read_text() == "brokerName=broker-x\nlistenPort=70000\nstorePathRootDir=/x\n"
    assert done.returncode != 0 and "listenPort" in done.stderr


def test_faults_by_topology(tmp_path):
    """A partition needs a container's network; power loss and disk fill need a host loop device: each is
    a skipped cell, with the reason, where it cannot run."""
    partition = ExperimentSpec(fault=FaultName.PARTITION, flush=FlushMode.ASYNC, runs_dir=tmp_path)
    got = run_experiment(partition, make_fault(FaultName.PARTITION))
    assert got.skipped == "partition needs --topology docker" and got.run_dir is None
    for fault in (FaultName.POWER_LOSS, FaultName.DISK_FILL):
        spec = ExperimentSpec(fault=fault, flush=FlushMode.ASYNC, runs_dir=tmp_path, topology=TopologyKind.DOCKER)
        got = run_experiment(spec, make_fault(fault))
        assert got.skipped is not None and "not a container fault" in got.skipped
    assert set(CONTAINER_FAULTS) - set(PROCESS_FAULTS) == {FaultName.PARTITION, FaultName.RESTART}


def _docker_ready() -> None:
    if shutil.which("docker") is None:
        pytest.skip("no docker CLI")
    reason = containers.unavailable()
    if reason is not None:
        pytest.skip(reason)


def test_removing_a_docker_object_that_is_gone_is_no_error():
    _docker_ready()
    assert remove_docker_object(ResourceKind.CONTAINER, "rmqlab-no-such-container") == \
        "container rmqlab-no-such-container was gone"
    assert remove_docker_object(ResourceKind.DOCKER_NETWORK, "rmqlab-no-such-network") == \
        "docker network rmqlab-no-such-network was gone"


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.xdist_group("docker")
@pytest.mark.parametrize("fault", [FaultName.PARTITION, FaultName.RESTART, FaultName.KILL9])
def test_container_cell_loses_nothing_acknowledged(tmp_path, fault):
    """A short cell on containers: the broker cut off its network (or stopped and started, or killed -9) under
    load; the checker finds every acknowledged message, the store checks clean, and no container or network
    of the cell is left."""
    _docker_ready()
    ledger = Ledger(tmp_path / "chaos-state.json")
    spec = ExperimentSpec(fault=fault, flush=FlushMode.ASYNC, cycles=1, profile=None, runs_dir=tmp_path / "runs",
                          work_dir=tmp_path / "work", seed=7, gap_s=(1.0, 1.5), load=LoadSpec(in_flight=16),
                          topology=TopologyKind.DOCKER)
    result = run_experiment(spec, make_fault(fault), ledger=ledger)
    assert result.skipped is None and result.error is None, result.error
    assert result.verdict is not None and result.verdict.ok, result.verdict.violations
    assert result.check is not None and result.check.acknowledged > 0 and result.check.lost == 0
    assert result.store_check is not None and result.store_check["exit_code"] == 0
    assert result.cycles[0].kind == fault.value and result.cycles[0].restored_ns is not None
    left = subprocess.run(["docker", "ps", "-a", "--filter", "label=rmq-lab=chaos", "-q"], capture_output=True,
                          text=True, check=True).stdout.split()
    assert left == []
    assert all(e.kind not in (ResourceKind.CONTAINER, ResourceKind.DOCKER_NETWORK) for e in ledger.entries())
