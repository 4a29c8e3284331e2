"""The front page `OUT/index.html`: the seed's claims with their verdicts, the reports, and the machine.

It is written last, from the ``findings.json`` files the reports left under OUT (``claims.read_findings``), so
the reports may run in any order and a report run alone still updates its claims. A claim no report judged
is "not measured yet". The machine section states where the runs were made (meta.json host facts).
"""

import time
from collections import Counter
from pathlib import Path
from typing import Any, Final

from harness.records.noise import read as read_noise
from spark_reports import REPORT_NAMES
from spark_reports.claims import CLAIMS, Verdict, read_findings
from spark_reports.claims_html import brokers_table, claims_table, verdict_counts
from spark_reports.findings_page import write_findings_page
from spark_reports.html_report import Page
from spark_reports.run_records import BROKERS, REFERENCE, ROCKETMQ, RunInfo, discover_runs

DESCRIPTIONS: Final = {
    "offset-overflow": "Years until a 64-bit commit-log / consume-queue offset overflows: the seed's table "
                       "and the horizon at the measured peak ingest rate.",
    "latency": "Send latency, send-to-consume latency and publish delay percentiles per run and per 10 s "
               "window, with CDFs comparing runs.",
    "loss": "Acknowledged, lost, duplicated and recovered messages per run, by flush mode × fault × sysctl "
            "profile.",
    "flush-compare": "SYNC_FLUSH against ASYNC_FLUSH on comparable runs: throughput, send latency quantiles and "
                     "CDFs, the cost of durability as ratios, and loss under each fault.",
    "recovery": "Broker restart time against the commit log's size after a clean stop and after kill -9 with the "
                "flush caught up, with an unflushed tail, and without the checkpoint.",
    "queues": "Acknowledged send rate and send latency per phase as the same load is spread over 1 to 10,000+ "
              "queues.",
    "accumulation": "Backlog runs: the backlog built and drained over time, build and drain times, drain and read "
                    "rates hot and cold, sends during the drain, and where the drain read from (page cache or disk).",
    "backlog-capacity": "Bytes per message on disk and in the page cache (commit log + consume queue + index), "
                        "messages a disk and a RAM hold, and hot and cold backlog read rates against 5,000 msg/s.",
    "transactions": "Transactional messages per run: committed, rolled back, unresolved, leaked and lost, "
                    "beside the faults, and the check-back latency of the UNKNOW ones.",
    "filtering": "Tag, SQL92 and FilterServer filtering at the same selectivity: broker CPU per delivered message, "
                 "bytes on the wire to the consumer and deliveries/s.",
    "profiles": "The vm.* sysctl profiles compared (python -m sysctl_profiles compare): per profile send latency "
                "and its stalls over time beside Dirty/Writeback, throughput, and the acknowledged data a power "
                "cut takes, with one measured sentence on each profile's trade.",
}


# Host facts that name the machine; free space, paths and mounts change from run to run.
_MACHINE_DISK_KEYS: Final = ("device", "fs_type", "total_bytes")


def machine(run: RunInfo) -> str:
    """The machine a run was made on, in words: host name, cores, RAM, kernel, Python, disk."""
    host = run.meta.get("host") or {}
    parts = [str(host.get("hostname") or "unnamed host")]
    if host.get("cores") is not None:
        parts.append(f"{host['cores']} cores")
    if host.get("ram_bytes") is not None:
        parts.append(f"{int(host['ram_bytes']) / 2**30:.1f} GiB RAM")
    parts += [f"{label} {host[key]}" for key, label in (("kernel", "kernel"), ("python", "Python")) if host.get(key)]
    disk = host.get("disk") or {}
    facts = [f"{k}={disk[k]}" for k in _MACHINE_DISK_KEYS if disk.get(k) is not None]
    if facts:
        parts.append("disk " + ", ".join(facts))
    return "; ".join(parts)


def _machines(runs: list[RunInfo]) -> list[tuple[str, str, int]]:
    """(machine, broker, runs) for each distinct machine and broker the runs were made on."""
    counts = Counter((machine(r), r.broker_impl) for r in runs)
    return [(host, broker, n) for (host, broker), n in sorted(counts.items())]


BROKER_LABELS: Final = {REFERENCE: "reference broker", ROCKETMQ: "Apache RocketMQ"}


def broker_dir(out_dir: Path, broker: str) -> Path:
    """Where one implementation's reports go: the reference broker's in OUT, another's in OUT/<broker>."""
    return out_dir if broker == REFERENCE else out_dir / broker


def write_site_index(out_dir: Path, runs_dir: Path | None = None) -> Path:
    """Write OUT/index.html: the claims table from OUT/*/findings.json (the reference broker's reports), the
    same claims per implementation beside RocketMQ's (OUT/rocketmq/*/findings.json), the reports present, the
    findings about RocketMQ (OUT/findings.html, from ``runs_dir``'s findings.jsonl) and the machine(s) of the
    runs in ``runs_dir`` (when given)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    by_broker = {b: read_findings(broker_dir(out_dir, b)) for b in BROKERS}
    findings = by_broker[REFERENCE]
    present = [name for name in REPORT_NAMES if (out_dir / name / "index.html").is_file()]
    page = Page("RocketMQ store lab — the seed's claims, tested")
    counts = verdict_counts(findings)
    page.paragraph(
        f"{len(CLAIMS)} claims from RocketMQ's design documents: {counts[Verdict.HELD]} held, "
        f"{counts[Verdict.NOT_HELD]} not held, {counts[Verdict.UNSETTLED]} unsettled, "
        f"{counts[Verdict.INCONCLUSIVE]} inconclusive, "
        f"{counts[Verdict.NOT_MEASURED]} not measured yet on this machine "
        "by the reference broker.")
    page.paragraph(
        "Each verdict comes from run records only: the report named under \"evidence\" read the runs listed, "
        "measured the figure shown and applied the rule under it. A claim with no runs that can show it is "
        "\"not measured yet\" (never guessed). A claim judged by several reports has one line per report.",
        note=True)
    page.heading("Claims")
    page.parts.append(claims_table(findings, out_dir))
    page.heading("The same claims on each broker")
    page.paragraph(
        "The same experiments with --broker-impl rocketmq (Apache RocketMQ from its distribution directory) write "
        "run records the reports judge apart: RocketMQ's reports are under rocketmq/. Where the verdicts differ, "
        "that is a finding about RocketMQ or a defect of the reference broker; docs/findings.md says which.",
        note=True)
    page.parts.append(brokers_table(by_broker, BROKER_LABELS,
                                    {b: "" if b == REFERENCE else f"{b}/" for b in BROKERS}, out_dir))
    page.heading("Reports")
    if present:
        page.links([(f"{name}/index.html", f"{name}: {DESCRIPTIONS.get(name, '')}") for name in present])
    else:
        page.paragraph("No reports have been written yet.")
    missing = [name for name in REPORT_NAMES if name not in present]
    if missing:
        page.paragraph("Not generated in this directory: " + ", ".join(missing) + ".", note=True)
    rocketmq_present = [name for name in REPORT_NAMES
                        if (broker_dir(out_dir, ROCKETMQ) / name / "index.html").is_file()]
    if rocketmq_present:
        page.links([(f"{ROCKETMQ}/{name}/index.html", f"{name} on Apache RocketMQ") for name in rocketmq_present])
    found_page, found = write_findings_page(out_dir, runs_dir)
    page.heading("Findings about Apache RocketMQ")
    page.links([(found_page.name, f"{found} recorded: what RocketMQ was shown to lose, wedge, stall or do "
                                  "differently, with the command that shows it again")])
    page.heading("Machine")
    runs = discover_runs(runs_dir) if runs_dir is not None else []
    if runs:
        page.table(["machine", "broker", "runs"], _machines(runs), text_columns=2)
        page.paragraph("Each report's \"Runs used\" section gives every run's flush mode, sysctl profile in force "
                       "and broker.", note=True)
    else:
        page.paragraph("Not stated here (no runs directory given); each report's \"Runs used\" section names the "
                       "machine of every run.", note=True)
    _noise_section(page, runs_dir)
    index = out_dir / "index.html"
    page.write(index)
    return index


def _noise_section(page: Page, runs_dir: Path | None) -> None:
    """The machine's noise when the runs were made (harness.machine_noise): load average and fio, before and
    after the experiments."""
    samples = read_noise(runs_dir) if runs_dir is not None else []
    page.heading("The machine's noise at the time")
    if not samples:
        page.paragraph("Not sampled (python -m harness.machine_noise RUNS --label before|after; the main job does "
                       "it before and after its experiments).", note=True)
        return

    def fio(entry: dict[str, Any], key: str, scale: float) -> str:
        value = (entry.get("fio") or {}).get(key)
        return "–" if not isinstance(value, (int, float)) else f"{value / scale:,.0f}"

    rows = [(str(e.get("label", "")), time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(int(e.get("ts_ns", 0)) / 1e9)),
             " / ".join(f"{x:.2f}" for x in e["loadavg"]), str(e.get("cpus", "")),
             fio(e, "seq_write_bytes_per_s", 1e6), fio(e, "fdatasync_4k_iops", 1), fio(e, "randread_4k_iops", 1))
            for e in samples]
    page.table(["sample", "UTC", "load average (1 / 5 / 15 min)", "CPUs", "fio seq write (MB/s)",
                "fio 4 KiB fdatasync (IOPS)", "fio 4 KiB random read (IOPS)"], rows, text_columns=4)
    page.paragraph("A load average above the CPU count, or fio figures that fell between before and after, mean a "
                   "busy machine: read the timing claims with that in mind.", note=True)
