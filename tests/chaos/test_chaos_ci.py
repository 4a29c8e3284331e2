"""The short chaos matrix CI runs on every submission (among the slow tests): both flush modes x every fault, two
cycles each, with the same verdict as ``tox -e crash`` (chaos.verdict), and two of its cells on Apache RocketMQ
4.9.8. power_loss and disk_fill need root and loop devices and are skipped, with the reason, without them. Also
``python -m chaos matrix --json --gate`` end to end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chaos import ExperimentSpec, FaultName, FlushMode, LoadSpec, make_fault, run_experiment
from chaos.experiment import PROCESS_FAULTS
from chaos.leftovers import Ledger
from chaos.matrix import gate_failures, rocketmq_findings
from harness.records import validate_run

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# machine (one at a time, on one test worker): the power-loss and disk-fill cells use loop devices and apply
# the sysctl profile "default" (the sysctl_profiles lock and state file: the dirty-page settings decide what
# a power loss takes). kill -9 and pause do not depend on those settings (the page cache outlives the
# process whatever they are), so their cells apply no profile and run beside the rest of the suite.
MACHINE_FAULTS = frozenset({FaultName.POWER_LOSS, FaultName.POWER_LOSS_TORN, FaultName.DISK_FILL})

# Known reference-broker defect (reported; see the chaos report): after a power loss, recovery truncates the
# consume queues only in memory; a second power loss before those pages are flushed brings the stale units
# back, and re-dispatch then skips the new records ("build consume queue repeatedly"): acknowledged, flushed
# messages become unreachable, and a stale unit can hand out the wrong bytes. It shows with ASYNC_FLUSH, in
# some runs. Such a cell is an expected failure only when every violation is one this defect produces.

CELLS = [pytest.param(f, m, id=f"{f.value}-{m.short}", marks=[pytest.mark.machine] if f in MACHINE_FAULTS else [])
         for f in PROCESS_FAULTS for m in (FlushMode.SYNC, FlushMode.ASYNC)]


@pytest.fixture
def ledger(tmp_path):
    return Ledger(tmp_path / "chaos-state.json")


# The same cells with dispatch in its own process (dispatchInSeparateProcess): the crash semantics must not change.
DISPATCHD_CELLS = [pytest.param(f, m, id=f"dispatchd-{f.value}-{m.short}",
                                marks=[pytest.mark.machine] if f in MACHINE_FAULTS else [])
                   for f in (FaultName.KILL9, FaultName.POWER_LOSS) for m in (FlushMode.SYNC, FlushMode.ASYNC)]


@pytest.mark.parametrize(("fault", "flush"), CELLS)
def test_short_matrix_cell(tmp_path, ledger, fault, flush):
    _cell(tmp_path, ledger, fault, flush, {})


@pytest.mark.parametrize(("fault", "flush"), DISPATCHD_CELLS)
def test_short_matrix_cell_with_the_dispatch_process(tmp_path, ledger, fault, flush):
    _cell(tmp_path, ledger, fault, flush, {"dispatchInSeparateProcess": "true"})


def _cell(tmp_path, ledger, fault, flush, broker_conf):
    crash = fault in (FaultName.KILL9, FaultName.POWER_LOSS, FaultName.POWER_LOSS_TORN)
    profile = "default" if fault in MACHINE_FAULTS else None
    spec = ExperimentSpec(fault=fault, flush=flush, cycles=2, profile=profile, runs_dir=tmp_path / "runs",
                          work_dir=tmp_path / "work", seed=1234, gap_s=(0.3, 1.0), load=LoadSpec(in_flight=16),
                          check_each_recovery=crash, broker_conf=broker_conf)
    result = run_experiment(spec, make_fault(fault, quick=True), ledger=ledger)
    if result.skipped is not None:
        pytest.skip(f"{fault.value}: {result.skipped}")
    row = result.summary()
    assert result.run_dir is not None
    assert validate_run(result.run_dir) == []
    assert (result.run_dir / "faults.jsonl").exists() and (result.run_dir / "check.json").exists()
    assert ledger.entries() == [], "the experiment left processes, mounts or loop devices behind"
    assert row["cycles"] == 2 and row["acknowledged"] > 0
    # What each recovery quarantined is recorded (and judged: chaos.verdict fails a kill -9 cell on one).
    recorded = json.loads((result.run_dir / "chaos.json").read_text())
    assert all("quarantined_bytes" in c and "quarantined_intact_records" in c for c in recorded["cycles"])
    assert recorded["summary"]["quarantined_files"] == sum(c["quarantined_files"] for c in recorded["cycles"])
    assert result.ok, row["violations"]
    if crash:
        # Each recovered store passed admin checkStore (a clean stop, the check, a start again).
        checks = [c["store_check"] for c in recorded["cycles"] if c["cycle"] >= 0]
        assert len(checks) == 2 and all(c is not None and c["outcome"] == "clean" for c in checks), checks
        assert all(c["counts"]["commitlog_records"] > 0 for c in checks)
        # Each restart after a crash looked acknowledged messages up by key, UNIQ_KEY and offsetMsgId.
        probed = [c.lookup for c in result.cycles if c.cycle >= 0]
        assert len(probed) == 2 and all(p is not None and p.error is None and p.sampled > 0 for p in probed)
        assert row["lookups_sampled"] > 0 and row["lookups_missed"] == 0


@pytest.mark.machine  # the CLI applies the profile "default"
def test_matrix_cli_prints_json_and_passes_the_gate(tmp_path):
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "chaos", "matrix", "--flush", "async", "--faults", "pause,kill9", "--cycles", "1",
         "--gap", "0.2,0.5", "--runs-dir", str(tmp_path / "runs"), "--work-dir", str(tmp_path / "work"), "--json",
         "--gate"], capture_output=True, text=True, timeout=240, cwd=root,
        env={**os.environ, "RMQ_LAB_CHAOS_STATE": str(tmp_path / "state.json")})
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout)
    assert [(r["fault"], r["flush"]) for r in rows] == [("pause", "async"), ("kill9", "async")]
    for r in rows:
        assert r["verdict"] == "ok" and r["lost"] == 0 and Path(r["run_dir"]).is_dir()
    assert "gate passed" in done.stderr


# Apache RocketMQ 4.9.8 in the same cells (--broker-impl rocketmq): the power-loss cell judges its loss by its
# flush mode only (4.9.8 reports no flushed offset); a violation would be a finding, never a gate failure.
RMQ_CELLS = [pytest.param(FaultName.KILL9, FlushMode.SYNC, id="kill9-sync"),
             pytest.param(FaultName.POWER_LOSS, FlushMode.ASYNC, id="power_loss-async", marks=pytest.mark.machine)]


@pytest.mark.parametrize(("fault", "flush"), RMQ_CELLS)
def test_rocketmq_matrix_cell(tmp_path, ledger, fault, flush, rocketmq_home):
    spec = ExperimentSpec(fault=fault, flush=flush, cycles=2, profile="default" if fault in MACHINE_FAULTS else None,
                          runs_dir=tmp_path / "runs", work_dir=tmp_path / "work", seed=99, gap_s=(0.3, 1.0),
                          load=LoadSpec(in_flight=16), broker_impl="rocketmq")
    result = run_experiment(spec, make_fault(fault, quick=True), ledger=ledger)
    if result.skipped is not None:
        pytest.skip(f"{fault.value}: {result.skipped}")
    assert result.error is None and gate_failures([result]) == []
    assert ledger.entries() == [], "the experiment left processes, mounts or loop devices behind"
    assert result.run_dir is not None and validate_run(result.run_dir) == []
    meta = json.loads((result.run_dir / "meta.json").read_text())
    assert meta["broker_impl"] == "V4_9_8" and meta["scenario"].endswith("-rocketmq")
    row = result.summary()
    assert row["broker_impl"] == "rocketmq" and row["cycles"] == 2 and row["acknowledged"] > 0
    assert row["window_bytes_max"] is None, "4.9.8 reports no flushed offset: no window is claimed"
    # A failed verdict is one finding about RocketMQ, with the command that runs the cell again.
    findings = rocketmq_findings([result])
    assert len(findings) == (0 if result.ok else 1)
    if fault is FaultName.KILL9:
        assert result.ok, row["violations"]  # SYNC_FLUSH and kill -9: 4.9.8 keeps every acknowledged message
