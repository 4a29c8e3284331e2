"""harness/hazards.py: a hostile request to a fresh broker, then whether a later message still becomes pullable;
RocketMQ outcomes that leave the broker broken become findings, the reference broker's fail the command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness import hazards
from harness.hazards import HAZARDS, Outcome
from harness.records import findings
from harness.records.findings import FindingKind
from reference_broker.remoting.codes import ResponseCode

REPO = Path(__file__).resolve().parents[2]


def test_only_a_broken_rocketmq_outcome_is_a_finding() -> None:
    name = HAZARDS[0].name
    outcomes = [Outcome(name, "reference", 1, "bad group", False, "stuck"),
                Outcome(name, "rocketmq", 0, "", True, "fine"),
                Outcome(name, "rocketmq", 0, "", False, "a message sent afterwards was not pullable", "V4_9_7")]
    found = hazards.findings(outcomes)
    assert len(found) == 1
    f = found[0]
    assert f.kind is FindingKind.WEDGE and f.broker == "V4_9_7"  # the version the broker gave
    assert "F1" in f.title and "answered code 0" in f.detail and "not pullable" in f.detail
    assert f.reproduce == hazards.REPRODUCE


@pytest.mark.e2e
def test_the_reference_broker_refuses_every_hazard_and_keeps_dispatching(tmp_path: Path) -> None:
    outcomes = hazards.run(tmp_path, ["reference"])
    assert [o.hazard for o in outcomes] == [h.name for h in HAZARDS]
    for o in outcomes:
        assert o.answer == ResponseCode.SYSTEM_ERROR, o
        assert o.healthy, o


@pytest.mark.e2e
@pytest.mark.slow
def test_rocketmq_wedges_on_f1_and_the_command_records_the_finding(tmp_path: Path, rocketmq_home: Path) -> None:
    runs = tmp_path / "runs"
    p = subprocess.run([sys.executable, "-m", "harness", "hazards", "--broker-impl", "both", "--runs", str(runs),
                        "--rocketmq-home", str(rocketmq_home)], capture_output=True, text=True, cwd=REPO,
                       timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr  # the reference broker survived every hazard
    lines = p.stdout.splitlines()
    assert any(line.startswith("ok") and "reference" in line for line in lines), p.stdout
    found, problems = findings.read(runs)
    assert problems == []
    # docs/findings.md F1 says RocketMQ 4.9.8 wedges here; if it stops doing so, that page must change.
    assert [f.key for f in found] == [f"hazard/{HAZARDS[0].name}: wedge"], p.stdout + p.stderr
    assert found[0].broker == "V4_9_8"  # read from the broker's runtime info
    assert any(line.startswith("BROKEN") and "rocketmq" in line for line in lines), p.stdout
