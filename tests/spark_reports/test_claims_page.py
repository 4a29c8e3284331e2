"""The front page shows one row per seed claim with the reports' findings, and the reports feeding it agree."""

import json
import re
from html.parser import HTMLParser

from click.testing import CliRunner

from spark_reports.claims import CLAIMS, ONE_RUN_SUFFICES, ClaimId, Finding, Verdict, write_findings
from spark_reports.claims_html import VERDICT_STYLE, claim_verdict, verdict_counts
from spark_reports.cli import cli as spark_cli
from spark_reports.html_report import Page, local_references
from spark_reports.jobs import flush_compare, loss, queues, recovery
from spark_reports.run_records import discover_runs
from spark_reports.site import write_site_index
from spark_reports.synthetic_claims import QueuePhase, SendRun, write_queues_run, write_recovery_run, write_send_run


class _Rows(HTMLParser):
    """The claims table as rows of (tag attributes, text) cells."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[tuple[dict[str, str | None], str]]] = []
        self.in_claims = False
        self.cell: tuple[dict[str, str | None], list[str]] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "table" and dict(attrs).get("class") == "claims":
            self.in_claims = True
        elif self.in_claims and tag == "tr":
            self.rows.append([])
        elif self.in_claims and tag in ("td", "th"):
            self.cell = (dict(attrs), [])

    def handle_endtag(self, tag):
        if tag == "table":
            self.in_claims = False
        elif tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append((self.cell[0], " ".join(" ".join(self.cell[1]).split())))
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell[1].append(data)


def _claim_rows(index):
    parser = _Rows()
    parser.feed(index.read_text(encoding="utf-8"))
    return parser.rows[1:]  # the header row left out


def _report(out, name):
    (out / name).mkdir(parents=True, exist_ok=True)
    Page(name).write(out / name / "index.html")


def test_one_row_per_claim_each_finding_shown_with_verdict_runs_and_evidence(tmp_path):
    _report(tmp_path, "loss")
    write_findings(tmp_path / "loss", [
        Finding(ClaimId.SYNC_NO_LOSS, Verdict.HELD, "0 of 1,000 acknowledged lost", "loss", ("r1", "r2"), "rule"),
        Finding(ClaimId.DISK_FULL_PROTECTION, Verdict.NOT_HELD, "no refusal", "loss", ("r3",)),
    ])
    # a second report judging a claim already judged, whose page was not written
    write_findings(tmp_path / "other", [
        Finding(ClaimId.SYNC_NO_LOSS, Verdict.NOT_MEASURED, "no power loss run", "other", ()),
    ])
    index = write_site_index(tmp_path)
    rows = _claim_rows(index)
    assert len(rows) == len(CLAIMS) + 1  # SYNC_NO_LOSS has two findings
    page = index.read_text(encoding="utf-8")
    assert len(re.findall(r'<td[^>]* id="', page)) == len(CLAIMS)  # one claim cell per claim
    first, second = rows[0], rows[1]
    assert first[0][0].get("rowspan") == "2" and first[0][1] == CLAIMS[0].text
    assert first[2][1] == CLAIMS[0].experiment
    # The measured cell: the figure, how the claim fared over the runs (two runs pooled, no per-run judgement
    # here), the rule.
    assert [c[1] for c in first[3:]] == [
        f"0 of 1,000 acknowledged lost pooled over 2 runs, not judged run by run: "
        f"{ONE_RUN_SUFFICES[ClaimId.SYNC_NO_LOSS]} rule", "held", "2 runs r1 r2", "loss"]
    assert VERDICT_STYLE[Verdict.HELD] in (first[4][0].get("style") or "")
    assert first[5][0].get("title") == "r1, r2"
    assert [c[1] for c in second] == ["no power loss run", "not measured yet", "0", "other (not written)"]
    disk = next(r for r in rows if r[0][1] == next(c.text for c in CLAIMS if c.id is ClaimId.DISK_FULL_PROTECTION))
    assert disk[4][1] == "not held" and VERDICT_STYLE[Verdict.NOT_HELD] in (disk[4][0].get("style") or "")
    unjudged = [r for r in rows if len(r) == 7 and r[4][1] == "not measured yet" and r[6][1] == "–"]
    assert len(unjudged) == len(CLAIMS) - 2
    assert set(local_references(page)) == {"loss/index.html", "findings.html"}  # only pages that exist are linked
    assert f"1 held, 1 not held, 0 unsettled, 0 inconclusive, {len(CLAIMS) - 2} not measured yet" in page


def test_a_claim_is_not_held_if_any_finding_says_so():
    held = Finding(ClaimId.QUEUES_10K, Verdict.HELD, "x", "queues")
    not_held = Finding(ClaimId.QUEUES_10K, Verdict.NOT_HELD, "y", "queues")
    unjudged = Finding(ClaimId.QUEUES_10K, Verdict.NOT_MEASURED, "z", "other")
    assert verdict_counts([held])[Verdict.HELD] == 1
    assert verdict_counts([held, unjudged])[Verdict.HELD] == 1  # a report that could not judge takes nothing away
    counts = verdict_counts([held, not_held])
    assert (counts[Verdict.HELD], counts[Verdict.NOT_HELD], counts[Verdict.NOT_MEASURED]) == (0, 1, len(CLAIMS) - 1)
    # Measured without enough evidence ranks above not measured, below a report that held or broke the claim.
    inconclusive = Finding(ClaimId.QUEUES_10K, Verdict.INCONCLUSIVE, "w", "queues")
    assert verdict_counts([unjudged, inconclusive])[Verdict.INCONCLUSIVE] == 1
    assert verdict_counts([inconclusive, held])[Verdict.HELD] == 1
    assert Verdict.INCONCLUSIVE in VERDICT_STYLE


def test_empty_output_directory_lists_every_claim_as_not_measured(tmp_path):
    index = write_site_index(tmp_path / "out")
    rows = _claim_rows(index)
    assert [r[4][1] for r in rows] == ["not measured yet"] * len(CLAIMS)
    page = index.read_text(encoding="utf-8")
    assert "No reports have been written yet." in page and local_references(page) == ["findings.html"]


class _BrokerRows(_Rows):
    """The per-broker table (class "brokers") as rows of cells."""

    def handle_starttag(self, tag, attrs):
        if tag == "table" and dict(attrs).get("class") == "brokers":
            self.in_claims = True
        elif tag != "table":
            super().handle_starttag(tag, attrs)


def test_each_broker_gets_a_column_and_a_difference_is_named(tmp_path):
    out = tmp_path / "out"
    for d in (out / "loss", out / "rocketmq" / "loss"):
        d.mkdir(parents=True)
        (d / "index.html").write_text("<html></html>")
    write_findings(out / "loss", [
        Finding(ClaimId.SYNC_NO_LOSS, Verdict.HELD, "0 of 900 lost", "loss", ("r1",)),
        Finding(ClaimId.ASYNC_KILL9_NO_LOSS, Verdict.HELD, "0 of 800 lost", "loss", ("r2",))])
    write_findings(out / "rocketmq" / "loss", [
        Finding(ClaimId.SYNC_NO_LOSS, Verdict.NOT_HELD, "3 of 700 lost", "loss", ("q1",))])
    parser = _BrokerRows()
    parser.feed(write_site_index(out).read_text(encoding="utf-8"))
    header, *rows = parser.rows
    assert [c[1] for c in header] == ["claim", "reference broker", "Apache RocketMQ", "the brokers"]
    assert len(rows) == len(CLAIMS)
    sync, kill9 = rows[0], rows[1]
    assert sync[1][1] == "held 0 of 900 lost loss" and sync[2][1] == "not held 3 of 700 lost loss"
    assert sync[3][1].startswith("DIFFER")
    assert kill9[2][1].startswith("not measured yet") and kill9[3][1] == "one side only"
    assert rows[-1][3][1] == "not measured"
    assert "rocketmq/loss/index.html" in local_references((out / "index.html").read_text(encoding="utf-8"))


def test_reports_feed_the_front_page_end_to_end(spark, tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "out"
    write_send_run(runs, SendRun("chaos-kill9-sync-default", "SYNC_FLUSH", 300, 2_000_000, 3_000_000, 10_000,
                                 fault="kill9"), 0)
    write_send_run(runs, SendRun("chaos-kill9-async-default", "ASYNC_FLUSH", 300, 2_000_000, 1_000_000, 10_000,
                                 fault="kill9"), 1)
    write_recovery_run(runs, 2, {(s, c): t * (4 if c == "kill9-no-checkpoint" and s == 256 else 1)
                                 for s in (32, 256) for c, t in (("clean", 0.3), ("kill9-flushed", 0.3),
                                                                 ("kill9-tail", 0.35), ("kill9-no-checkpoint", 0.4))},
                       [32, 256])
    write_queues_run(runs, 3, [QueuePhase(1, 1000, 1_000_000, 1_000), QueuePhase(10_000, 990, 1_000_000, 1_000)],
                     phase_s=1.0)
    for job in (loss, flush_compare, recovery, queues):
        job.run(spark, runs, out)
    index = write_site_index(out, runs)
    verdicts = {r[0][1]: r[4][1] for r in _claim_rows(index) if len(r) == 7}
    text = {c.id: c.text for c in CLAIMS}
    assert verdicts[text[ClaimId.SYNC_NO_LOSS]] == "held"
    assert verdicts[text[ClaimId.ASYNC_KILL9_NO_LOSS]] == "held"
    assert verdicts[text[ClaimId.ASYNC_POWER_LOSS_TAIL]] == "not measured yet"
    assert verdicts[text[ClaimId.RECOVERY_CHECKPOINT]] == "held"
    assert verdicts[text[ClaimId.QUEUES_10K]] == "held"
    assert verdicts[text[ClaimId.OFFSET_616_YEARS]] == "not measured yet"  # its report did not run here
    page = index.read_text(encoding="utf-8")
    assert "synth; " in page and "synthetic (no broker ran)" in page  # the machine section
    for name in ("loss", "flush-compare", "recovery", "queues"):
        assert f'href="{name}/index.html"' in page
    assert all((index.parent / ref).is_file() for ref in local_references(page))


def _as_rocketmq(run_dir):
    meta_path = run_dir / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["broker_impl"] = "V4_9_8"
    meta_path.write_text(json.dumps(meta))


def test_rocketmq_runs_are_judged_apart_through_the_command_line(spark, tmp_path):
    """`spark_reports loss` over runs of both brokers: the reference broker's report in OUT/loss sees only its
    runs, RocketMQ's in OUT/rocketmq/loss only RocketMQ's, and the front page has a verdict from each."""
    runs, out = tmp_path / "runs", tmp_path / "out"
    write_send_run(runs, SendRun("chaos-kill9-sync-default", "SYNC_FLUSH", 300, 2_000_000, 3_000_000, 10_000,
                                 fault="kill9"), 0)
    theirs = write_send_run(runs, SendRun("chaos-kill9-sync-default-rocketmq", "SYNC_FLUSH", 200, 2_000_000,
                                          3_000_000, 10_000, fault="kill9"), 1)
    rmq_run = runs / theirs.run_id
    _as_rocketmq(rmq_run)
    assert [r.broker for r in discover_runs(runs)] == ["reference", "rocketmq"]
    assert [r.run_id for r in discover_runs(runs, "rocketmq")] == [rmq_run.name]
    result = CliRunner().invoke(spark_cli, ["loss", "--runs", str(runs), "--out", str(out)])
    assert result.exit_code == 0, result.output
    ours_page = (out / "loss" / "index.html").read_text(encoding="utf-8")
    their_page = (out / "rocketmq" / "loss" / "index.html").read_text(encoding="utf-8")
    assert rmq_run.name not in ours_page and rmq_run.name in their_page
    parser = _BrokerRows()
    parser.feed((out / "index.html").read_text(encoding="utf-8"))
    sync = parser.rows[1]
    assert sync[1][1].startswith("held 0 of 300") and sync[2][1].startswith("held 0 of 200")
    assert sync[3][1] == "agree"


def test_runs_that_disagree_make_a_claim_unsettled_and_runs_that_agree_are_counted() -> None:
    from spark_reports.claims import repeats_text, settle

    def f(verdict: Verdict, rid: str = "all") -> Finding:
        return Finding(ClaimId.RECOVERY_CHECKPOINT, verdict, "x 1.0 s", "recovery", (rid,), "rule.")

    mixed = settle(f(Verdict.HELD), {"r1": f(Verdict.HELD, "r1"), "r2": f(Verdict.NOT_HELD, "r2"),
                                     "r3": f(Verdict.HELD, "r3")})
    assert mixed.verdict is Verdict.UNSETTLED
    assert repeats_text(mixed).startswith("held in 2 of 3 runs") and "run by run: r1 held, r2 not held" in (
        repeats_text(mixed))
    assert "r2 not held" in mixed.detail and mixed.per_run == {"r1": "held", "r2": "not held", "r3": "held"}
    assert claim_verdict([mixed], ClaimId.RECOVERY_CHECKPOINT) is Verdict.UNSETTLED
    agreed = settle(f(Verdict.HELD), {"r1": f(Verdict.HELD, "r1"), "r2": f(Verdict.HELD, "r2"),
                                      "r3": f(Verdict.NOT_MEASURED, "r3")})
    assert agreed.verdict is Verdict.HELD and repeats_text(agreed).startswith("held in 2 of 2 runs")
    assert Finding.from_json(mixed.to_json()) == mixed
    one = settle(f(Verdict.NOT_HELD), {"r1": f(Verdict.NOT_HELD, "r1")})
    assert one.verdict is Verdict.NOT_HELD and one.measured == "x 1.0 s"
