"""The queues report finds each phase's known rate and latency and judges QUEUES_10K."""

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from spark_reports.claims import ClaimId, Verdict
from spark_reports.html_report import local_references
from spark_reports.jobs import queues as qs
from spark_reports.run_records import discover_runs
from spark_reports.synthetic_claims import PhaseAnswer, QueuePhase, write_queues_run

MS = 1_000_000
BASE = QueuePhase(1, 2000, 1 * MS, 1_000)  # p99 ≈ 3 ms: the p99 bound is 8 ms (p99 + 5 ms)


@dataclass(frozen=True)
class QueueRuns:
    runs_dir: Path
    answers: dict[str, list[PhaseAnswer]]
    names: dict[str, str]  # case -> run id


@pytest.fixture(scope="module")
def queue_runs(tmp_path_factory: pytest.TempPathFactory) -> QueueRuns:
    runs_dir = tmp_path_factory.mktemp("queue_runs")
    cases = {
        "held": [BASE, QueuePhase(100, 2000, 1 * MS, 1_000), QueuePhase(1000, 1990, 1 * MS, 1_500, failed=10),
                 QueuePhase(10_000, 1900, 2 * MS, 2_000, failed=100)],  # 95 % of the rate, p99 ≈ 6 ms
        "slow": [BASE, QueuePhase(10_000, 1500, 1 * MS, 1_000, failed=500)],  # 75 % of the rate
        "laggy": [BASE, QueuePhase(10_000, 2000, 10 * MS, 1_000)],  # p99 ≈ 12 ms > 8 ms
        "few": [BASE, QueuePhase(1000, 2000, 1 * MS, 1_000)],  # no phase of 10,000 queues
    }
    answers, names = {}, {}
    for i, (case, phases) in enumerate(cases.items()):
        run_id, ans = write_queues_run(runs_dir, i, phases, phase_s=2.0)
        answers[run_id], names[case] = ans, run_id
    return QueueRuns(runs_dir, answers, names)


@pytest.fixture(scope="module")
def stats(spark, queue_runs):
    return qs.compute(spark, discover_runs(queue_runs.runs_dir))


def test_each_phase_has_its_known_rate_and_latency(stats, queue_runs):
    got = {(s.phase.run_id, s.phase.label): s for s in stats}
    assert len(got) == sum(len(a) for a in queue_runs.answers.values())
    for run_id, answers in queue_runs.answers.items():
        for want in answers:
            s = got[(run_id, want.label)]
            assert s.phase.queues == want.queues
            assert s.attempted == want.attempted  # the warm-up sends before the first phase belong to none
            assert s.acks_per_s == pytest.approx(want.acks_per_s)
            assert [s.q(lab) for lab in ("p50", "p99", "p99.9")] == [want.q(p) for p in (0.5, 0.99, 0.999)]
            assert s.maximum == want.latencies[-1]
            assert s.intended == 2000.0


def _judge(stats, run_id):
    return qs.judge([s for s in stats if s.phase.run_id == run_id])


def test_ten_thousand_queues_at_95_percent_and_a_small_p99_hold(stats, queue_runs):
    finding = _judge(stats, queue_runs.names["held"])
    assert finding.claim is ClaimId.QUEUES_10K and finding.verdict is Verdict.HELD
    assert finding.figures["worst_rate_share"] == pytest.approx(0.95)
    assert "10,000 queues: 950 acknowledged/s = 95.0 % of 1,000 at 1 queue" in finding.measured


def test_a_lower_rate_or_a_higher_p99_is_not_held(stats, queue_runs):
    slow = _judge(stats, queue_runs.names["slow"])
    assert slow.verdict is Verdict.NOT_HELD and "rate 75.0 % < 90 %" in slow.detail
    laggy = _judge(stats, queue_runs.names["laggy"])
    assert laggy.verdict is Verdict.NOT_HELD and "p99 above the bound" in laggy.detail


def test_without_a_ten_thousand_queue_phase_it_is_not_measured(stats, queue_runs):
    assert _judge(stats, queue_runs.names["few"]).verdict is Verdict.NOT_MEASURED
    assert qs.judge([]).verdict is Verdict.NOT_MEASURED


def test_p99_bound_is_twice_or_plus_five_ms():
    assert qs.p99_bound_ns(1 * MS) == 6 * MS
    assert qs.p99_bound_ns(20 * MS) == 40 * MS


def test_report_page_plots_and_findings(spark, queue_runs, tmp_path):
    output = qs.run(spark, queue_runs.runs_dir, tmp_path)
    page = output.index.read_text(encoding="utf-8")
    assert all((output.index.parent / ref).is_file() for ref in local_references(page))
    assert "rate_vs_queues.png" in page and "latency_vs_queues.png" in page
    findings = json.loads((tmp_path / "queues" / "findings.json").read_text())
    # one finding over all runs with the phases, judged run by run too: the held run and the two failing ones
    # disagree, so the claim is unsettled, with each run's verdict
    assert [(f["claim"], f["verdict"]) for f in findings] == [("queues-10k", "unsettled")]
    assert findings[0]["per_run"] == {queue_runs.names["held"]: "held", queue_runs.names["slow"]: "not held",
                                      queue_runs.names["laggy"]: "not held"}
    assert set(findings[0]["runs"]) == {queue_runs.names[c] for c in ("held", "slow", "laggy")}
