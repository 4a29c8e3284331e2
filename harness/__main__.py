"""``python -m harness``: check and validate run records; the harness and broker benchmarks; the broker fuzzer.

Exit codes: 0 = valid; 1 = the check failed (lost messages without --allow-loss, unexpected messages, or order
violations in an ordered run); 2 = not a valid run record (or bad usage).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from harness.checker import CheckResult, check_run
from harness.records.reader import RunRecordError
from harness.records.validate import validate_run
from harness.rocketmq import BrokerImpl, parse_impls, unavailable

EXIT_VALID, EXIT_CHECK_FAILED, EXIT_INVALID_RUN = 0, 1, 2


def format_summary(result: CheckResult, run_dir: Path) -> str:
    """One screen of plain text: the counts, the verdict and a few sample keys per non-empty category."""
    def line(label: str, n: int, note: str = "") -> str:
        return f"  {label:<18}{n:>12,}{('   ' + note) if note else ''}"

    verdict = "VALID" if result.valid else "INVALID"
    reasons = []
    if result.lost:
        reasons.append(f"{result.lost:,} lost" + (" (allowed)" if result.allow_loss else ""))
    if result.unexpected:
        reasons.append(f"{result.unexpected:,} unexpected")
    if result.ordered and result.order_violation_count:
        reasons.append(f"{result.order_violation_count:,} order violations")
    order_note = "ordered run: counted in the verdict" if result.ordered else "unordered run: reported only"
    out = [
        f"run {result.run_id or run_dir.name}  ({run_dir})",
        f"  events: {result.sends:,} sends, {result.receives:,} accepted receives"
        + (f", {result.declined_receives:,} declined" if result.declined_receives else ""),
        line("attempted", result.attempted),
        line("acknowledged", result.acknowledged),
        line("failed", result.failed, f"recovered_failed {result.recovered_failed:,}"),
        line("unknown", result.unknown, f"recovered {result.recovered:,}"),
        line("lost", result.lost, f"{result.lost_bytes:,} bytes"),
        line("unread", result.unread, f"found by the final read ({result.reads:,} read rows), never delivered"),
        line("unexpected", result.unexpected),
        line("duplicated", result.duplicated, f"{result.duplicate_deliveries:,} surplus deliveries"),
        line("order violations", result.order_violation_count, order_note),
    ]
    worst = sorted(result.order_violations.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    if worst:
        out.append("    " + ", ".join(f"{q}: {n:,}" for q, n in worst))
    for category, keys in result.samples.items():
        if keys:
            shown = ", ".join(keys[:6]) + (", ..." if len(keys) > 6 else "")
            out.append(f"  sample {category}: {shown}")
    out.append(f"verdict: {verdict}" + (f" ({'; '.join(reasons)})" if reasons else ""))
    return "\n".join(out)


@click.group()
def main() -> None:
    """Run-record tools: check (loss accounting) and validate (schema v1)."""


@main.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--allow-loss", is_flag=True, help="Lost acknowledged messages do not fail the check "
                                                 "(expected loss, e.g. power loss under ASYNC_FLUSH).")
@click.option("--ordered/--unordered", default=None,
              help="Order violations fail the check. Default: meta.json params.ordered.")
@click.option("--json", "as_json", is_flag=True, help="Print check.json instead of the summary.")
def check(run_dir: Path, allow_loss: bool, ordered: bool | None, as_json: bool) -> None:
    """Check RUN_DIR's events (Jepsen total-queue accounting) and write RUN_DIR/check.json."""
    try:
        result = check_run(run_dir, allow_loss=allow_loss, ordered=ordered)
    except RunRecordError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_INVALID_RUN)
    click.echo(json.dumps(result.to_json(), indent=2) if as_json else format_summary(result, run_dir))
    sys.exit(EXIT_VALID if result.valid else EXIT_CHECK_FAILED)


@main.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print {\"valid\": bool, \"problems\": [...]}.")
def validate(run_dir: Path, as_json: bool) -> None:
    """Check that RUN_DIR is a schema v1 run record; list every problem found."""
    problems = validate_run(run_dir)
    if as_json:
        click.echo(json.dumps({"valid": not problems, "problems": problems}, indent=2))
    elif problems:
        click.echo(f"{run_dir}: {len(problems)} problem(s)\n" + "\n".join(f"  {p}" for p in problems))
    else:
        click.echo(f"{run_dir}: valid run record (schema v1)")
    sys.exit(EXIT_INVALID_RUN if problems else EXIT_VALID)


@main.command()
@click.option("--events", "n_events", type=click.IntRange(min=1000), default=1_000_000, show_default=True,
              help="Events in the checker's synthetic history.")
@click.option("--writer-events", type=click.IntRange(min=1000), default=1_000_000, show_default=True,
              help="Sends recorded through EventWriter.")
@click.option("--dir", "directory", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Where to put the temporary run directories (default: $TMPDIR).")
def bench(n_events: int, writer_events: int, directory: Path | None) -> None:
    """Measure the harness's own costs: EventWriter per event, the checker over N events."""
    from harness.bench import run_bench

    click.echo(run_bench(writer_events, n_events, directory))


BROKER_IMPL = click.option("--broker-impl", type=click.Choice(["reference", "rocketmq"]), default="reference",
                           show_default=True, help="Which broker runs: the reference broker, or Apache RocketMQ "
                                                   "from --rocketmq-home.")
ROCKETMQ_HOME = click.option("--rocketmq-home", type=click.Path(file_okay=False, exists=True, path_type=Path),
                             default=None, help="A RocketMQ distribution directory (default: $ROCKETMQ_HOME, "
                                                "else ../shared/rocketmq-4.9.8 beside the project).")


@main.command("broker-bench")
@click.option("--quick", is_flag=True, help="3 s per figure instead of 10 s.")
@click.option("--json", "as_json", is_flag=True, help="Print every measurement as JSON.")
@BROKER_IMPL
@ROCKETMQ_HOME
def broker_bench(quick: bool, as_json: bool, broker_impl: BrokerImpl, rocketmq_home: Path | None) -> None:
    """The broker's figures (send rates, latencies, SYNC vs ASYNC, consumption) against embedded topologies."""
    from harness.broker_bench import Plan, format_figures, run
    from harness.launcher import LaunchError

    plan = Plan.quick() if quick else Plan()
    try:
        result = run(plan, progress=lambda line: click.echo(f"[broker-bench] {line}", err=True), impl=broker_impl,
                     rocketmq_home=rocketmq_home)
    except LaunchError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(result, indent=2, default=str) if as_json else format_figures(result))


@main.command("dispatch-cost")
@click.option("--rounds", type=click.IntRange(1, 50), default=3, show_default=True)
@click.option("--seconds", type=click.FloatRange(1, 120), default=8.0, show_default=True, help="Per run.")
@click.option("--size", type=click.IntRange(1, 4 * 1024 * 1024), default=1024, show_default=True)
@click.option("--broker-conf", "broker_conf", multiple=True, metavar="KEY=VALUE",
              help="A broker.conf key for both brokers (repeatable), e.g. dispatchIdleIntervalMillis=1.")
@click.option("--json", "as_json", is_flag=True, help="Print every run as JSON.")
def dispatch_cost(rounds: int, seconds: float, size: int, broker_conf: tuple[str, ...], as_json: bool) -> None:
    """The dispatch thread's CPU per message under lean single sends and batches of 32, and the ceiling of moving
    dispatch out of the broker's interpreter: the same broker with no dispatch, in alternating runs
    (docs/dispatch.md)."""
    from harness.dispatch_cost import format_result, run
    from harness.launcher import LaunchError

    conf = {}
    for item in broker_conf:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--broker-conf")
        conf[key.strip()] = value.strip()
    try:
        result = run(rounds, seconds, size, progress=lambda line: click.echo(f"[dispatch-cost] {line}", err=True),
                     broker_conf=conf)
    except LaunchError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(result, indent=2) if as_json else format_result(result))


def conf_pairs(items: tuple[str, ...], hint: str) -> dict[str, str]:
    """broker.conf keys given as KEY=VALUE options."""
    conf = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint=hint)
        conf[key.strip()] = value.strip()
    return conf


@main.command("ab-bench")
@click.argument("old")
@click.argument("new", default="HEAD")
@click.option("--rounds", type=click.IntRange(2, 50), default=8, show_default=True)
@click.option("--load", type=click.Choice(["single_64", "batch_32"]), default="single_64", show_default=True)
@click.option("--flush", "mode", type=click.Choice(["ASYNC_FLUSH", "SYNC_FLUSH"]), default="ASYNC_FLUSH",
              show_default=True)
@click.option("--seconds", type=click.FloatRange(1, 60), default=4.0, show_default=True, help="Per run.")
@click.option("--generator", type=click.Choice(["here", "own"]), default="here", show_default=True,
              help="The load generator: this checkout's for both sides, or each revision's own.")
@click.option("--old-python", type=click.Path(exists=True, dir_okay=False), default=sys.executable,
              help="The interpreter OLD's name server and broker run on (with the project's dependencies).  "
                   "[default: this one]")
@click.option("--new-python", type=click.Path(exists=True, dir_okay=False), default=sys.executable,
              help="The same for NEW.  [default: this one]")
@click.option("--old-conf", multiple=True, metavar="KEY=VALUE",
              help="A broker.conf key for OLD's broker (repeatable).")
@click.option("--new-conf", multiple=True, metavar="KEY=VALUE",
              help="The same for NEW, e.g. dispatchInSeparateProcess=true with OLD and NEW both HEAD.")
@click.option("--json", "as_json", is_flag=True, help="Print every run as JSON.")
def ab_bench(old: str, new: str, rounds: int, load: str, mode: str, seconds: float, generator: str,
             old_python: str, new_python: str, old_conf: tuple[str, ...], new_conf: tuple[str, ...],
             as_json: bool) -> None:
    """Two revisions of the reference broker running at once, the same lean load to each in turn: is NEW
    within noise of OLD? (git revisions; each is checked out into a temporary worktree.)"""
    from harness.ab_bench import AbError, compare, format_result

    try:
        result = compare(old, new, rounds, load, mode, seconds,
                         progress=lambda line: click.echo(f"[ab-bench] {line}", err=True), generator=generator,
                         pythons=(old_python, new_python),
                         confs=(conf_pairs(old_conf, "--old-conf"), conf_pairs(new_conf, "--new-conf")))
    except AbError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(result, indent=2) if as_json else format_result(result))


@main.command("ha-bench")
@click.option("--rounds", type=click.IntRange(2, 50), default=None,
              help="Paired rounds (SYNC_MASTER and ASYNC_MASTER, order swapped each round; default 6, --quick 2).")
@click.option("--seconds", type=click.FloatRange(0.5, 60), default=None, help="Per run (default 3, --quick 2).")
@click.option("--flush", type=click.Choice(["ASYNC_FLUSH", "SYNC_FLUSH", "both"]), default="ASYNC_FLUSH",
              show_default=True, help="The groups' flushDiskType.")
@click.option("--catchup-mib", type=click.IntRange(0), default=None,
              help="Commit log the empty slave copies (default 1024, --quick 128; 0 skips the catch-up).")
@click.option("--ha-transfer-batch-kib", type=click.IntRange(1), default=None,
              help="haTransferBatchSize of the catch-up group (default the broker's 32 KiB).")
@click.option("--quick", is_flag=True, help="2 rounds of 2 s and a 128 MiB catch-up.")
@click.option("--no-fio", is_flag=True, help="Skip fio's sequential write beside the catch-up.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write every measurement to this file as JSON.")
@click.option("--broker-impl", "broker_impls", default="reference", show_default=True,
              help="Brokers, comma-separated: reference, rocketmq (Apache RocketMQ 4.9.8 from $ROCKETMQ_HOME or "
                   "../shared/rocketmq-4.9.8), or both; each runs the same rounds and catch-up in turn.")
def ha_bench(rounds: int | None, seconds: float | None, flush: str, catchup_mib: int | None,
             ha_transfer_batch_kib: int | None, quick: bool, no_fio: bool, json_path: Path | None,
             broker_impls: str) -> None:
    """Replication: SYNC_MASTER vs ASYNC_MASTER in paired rounds, the slave's lag under maximum load, and an
    empty slave's catch-up rate beside fio's sequential write."""
    import dataclasses

    from harness.ha_bench import MIB, Plan, format_result, run
    from harness.launcher import LaunchError
    from harness.rocketmq import parse_impls, unavailable

    try:
        impls = parse_impls(broker_impls)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--broker-impl") from None
    if "rocketmq" in impls and (reason := unavailable(None)) is not None:
        raise click.UsageError(reason)

    plan = Plan.quick() if quick else Plan()
    plan = dataclasses.replace(
        plan, rounds=plan.rounds if rounds is None else rounds, seconds=plan.seconds if seconds is None else seconds,
        flush_modes=("ASYNC_FLUSH", "SYNC_FLUSH") if flush == "both" else (flush,),
        catchup_bytes=plan.catchup_bytes if catchup_mib is None else catchup_mib * MIB,
        ha_transfer_batch=None if ha_transfer_batch_kib is None else ha_transfer_batch_kib * 1024)
    try:
        result = run(plan, progress=lambda line: click.echo(f"[ha-bench] {line}", err=True), fio=not no_fio,
                     impls=impls or ["reference"])
    except LaunchError as exc:
        raise click.ClickException(str(exc)) from None
    if json_path is not None:
        json_path.write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")
    click.echo(format_result(result))


@main.command("vs-rocketmq")
@click.option("--rounds", type=click.IntRange(1, 20), default=2, show_default=True,
              help="Alternating rounds (reference, then RocketMQ, in each).")
@click.option("--quick", is_flag=True, help="3 s per figure instead of 10 s.")
@click.option("--json", "as_json", is_flag=True, help="Print every measurement as JSON.")
@click.option("--reference-conf", "reference_conf", multiple=True, metavar="KEY=VALUE",
              help="A broker.conf key for the reference broker only (repeatable), e.g. "
                   "dispatchInSeparateProcess=true.")
@ROCKETMQ_HOME
def vs_rocketmq(rounds: int, quick: bool, as_json: bool, reference_conf: tuple[str, ...],
                rocketmq_home: Path | None) -> None:
    """The reference broker beside Apache RocketMQ 4.9.8: the same figures, alternating runs, the ratios."""
    from harness.broker_bench import Plan
    from harness.launcher import LaunchError
    from harness.vs_rocketmq import format_table, run

    plan = Plan.quick() if quick else Plan()
    conf = conf_pairs(reference_conf, "--reference-conf")
    try:
        result = run(plan, rounds, progress=lambda line: click.echo(f"[vs-rocketmq] {line}", err=True),
                     rocketmq_home=rocketmq_home, reference_conf=conf)
    except LaunchError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(result, indent=2, default=str) if as_json else format_table(result))


@main.command()
@click.option("--broker-impl", "broker_impls", default="reference", show_default=True,
              help="Brokers, comma-separated: reference, rocketmq, or both.")
@click.option("--runs", "runs_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("runs"),
              show_default=True, help="Where findings about RocketMQ are recorded (findings.jsonl).")
@ROCKETMQ_HOME
def hazards(broker_impls: str, runs_dir: Path, rocketmq_home: Path | None) -> None:
    """Hostile requests, each to a fresh broker, and whether the broker still works afterwards. Exit 1 when the
    reference broker does not survive one; a RocketMQ broker that does not is recorded as a finding."""
    import tempfile

    from harness import hazards as hz
    from harness.launcher import LaunchError
    from harness.records import findings

    try:
        impls = parse_impls(broker_impls)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--broker-impl") from None
    if "rocketmq" in impls:
        reason = unavailable(rocketmq_home)
        if reason is not None:
            raise click.UsageError(reason)
    with tempfile.TemporaryDirectory(prefix="rmq-lab-hazards-") as tmp:
        try:
            outcomes = hz.run(Path(tmp), impls, rocketmq_home,
                              progress=lambda line: click.echo(f"[hazards] {line}", err=True))
        except LaunchError as exc:
            raise click.ClickException(str(exc)) from None
    click.echo(hz.format_outcomes(outcomes))
    for finding in hz.findings(outcomes):
        path = findings.record(runs_dir, finding)
        click.echo(f"finding about {finding.broker}: {finding.title} (recorded in {path})", err=True)
    if any(o.broker == "reference" and not o.healthy for o in outcomes):
        sys.exit(1)


@main.command("wire-diff")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
@ROCKETMQ_HOME
def wire_diff(as_json: bool, rocketmq_home: Path | None) -> None:
    """One script of requests to the reference broker and to Apache RocketMQ 4.9.8, answers compared field by
    field; exit 1 on a difference that harness/wire_diff.py's KNOWN_DIFFERENCES does not list."""
    import tempfile

    from harness import wire_diff as wd
    from harness.launcher import LaunchError

    reason = unavailable(rocketmq_home)
    if reason is not None:
        raise click.UsageError(reason)
    with tempfile.TemporaryDirectory(prefix="rmq-lab-wire-diff-") as tmp:
        try:
            rows = wd.run(Path(tmp), rocketmq_home, progress=lambda line: click.echo(f"[wire-diff] {line}", err=True))
        except LaunchError as exc:
            raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(rows, indent=2) if as_json else wd.format_rows(rows))
    unknown = [r["case"] for r in rows if r["differences"] and not r["known"]]
    if unknown:
        click.echo(f"\n{len(unknown)} differences not listed as known: {', '.join(unknown)}", err=True)
        sys.exit(1)


@main.command()
@click.option("--runs", "runs_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("runs"),
              show_default=True, help="Where the run records go.")
@click.option("--reports", "reports_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("reports"),
              show_default=True, help="Where the reports go.")
@click.option("--backlog-seconds", type=click.IntRange(10, 3600), default=30, show_default=True)
@click.option("--cycles", type=click.IntRange(1, 1000), default=3, show_default=True,
              help="Crash cycles per cell of the sync-vs-async comparison.")
@click.option("--broker-impl", "broker_impls", default="reference", show_default=True,
              help="Brokers, comma-separated: reference, rocketmq (Apache RocketMQ from $ROCKETMQ_HOME or "
                   "../shared/rocketmq-4.9.8), or both; each runs every experiment, the reports judge them apart.")
def pipeline(runs_dir: Path, reports_dir: Path, backlog_seconds: int, cycles: int, broker_impls: str) -> None:
    """The main job: a short run of each experiment (backlog, queues, flush modes, crashes, recovery, disk
    fill), then the Spark reports and the claims front page."""
    from harness.pipeline import PipelineError, run

    try:
        impls = parse_impls(broker_impls)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--broker-impl") from None
    if "rocketmq" in impls and (reason := unavailable()) is not None:
        raise click.UsageError(reason)
    try:
        index = run(runs_dir.resolve(), reports_dir.resolve(), backlog_seconds, cycles,
                    progress=lambda line: click.echo(f"[pipeline] {line}", err=True), impls=impls or ["reference"])
    except PipelineError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"reports: {index}")


@main.command()
@click.option("--seconds", type=click.FloatRange(min=1), default=60, show_default=True,
              help="How long to fuzz (the checks after it come on top).")
@click.option("--seed", type=int, help="The run's seed (default: a random one, printed first).")
@click.option("--case", "cases", type=int, multiple=True,
              help="Replay only this case index of --seed (repeatable); --seconds is then ignored.")
@click.option("--skip-known", is_flag=True,
              help="Step around the known defects (NUL/illegal group in a send-back; thousands of new groups "
                   "in one heartbeat) to see past them.")
@click.option("--probe-limit", "probe_limit_s", type=click.FloatRange(min=0.05), default=1.0, show_default=True,
              help="Seconds the probe's send + pull round may take.")
@click.option("--no-lifecycle", is_flag=True, help="Skip the SIGTERM / kill -9 restarts and store checks.")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path),
              help="Keep the topology (logs, store) here instead of a temporary directory.")
@click.option("--json-out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the figures and violations as JSON here (default: $RMQ_LAB_FUZZ_JSON if set).")
def fuzz(seconds: float, seed: int | None, cases: tuple[int, ...], skip_known: bool, probe_limit_s: float,
         no_lifecycle: bool, workdir: Path | None, json_out: Path | None) -> None:
    """Fuzz a real broker (every request code, hostile headers and bodies, floods, slow and broken
    connections) while a probe checks it stays responsive; exit 1 on any violation of the invariant."""
    from harness.fuzz import FuzzOptions, run_fuzz

    if cases and seed is None:
        raise click.UsageError("--case needs the --seed of the run that found it")
    options = FuzzOptions(seconds=seconds, seed=seed, skip_known=skip_known, probe_limit_s=probe_limit_s,
                          workdir=workdir, json_out=json_out, cases=list(cases), lifecycle=not no_lifecycle)
    report = run_fuzz(options, progress=lambda line: click.echo(f"[fuzz] {line}", err=True))
    click.echo(report.summary())
    sys.exit(0 if report.ok else 1)



@main.command("compare")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path), default=Path("runs"),
              show_default=True, help="Where the session directory (run records + compare.json) goes.")
@click.option("--brokers", default=None, help="Comma-separated, of: reference-async, reference-sync, "
              "rocketmq-async, rocketmq-sync, nats, rabbitmq-classic, rabbitmq-quorum (default: all but "
              "rocketmq-sync).")
@click.option("--workloads", default="rate,max,one", show_default=True,
              help="rate (fixed rate), max (unbounded), one (one send in flight).")
@click.option("--seconds", type=click.FloatRange(1, 600), default=5.0, show_default=True, help="Per workload.")
@click.option("--rate", type=click.FloatRange(1), default=2000.0, show_default=True, help="The fixed rate, msg/s.")
@click.option("--in-flight", type=click.IntRange(1), default=128, show_default=True, help="For max and rate.")
@click.option("--size", "message_size", type=click.IntRange(1), default=1024, show_default=True)
@click.option("--load-processes", "load_processes", type=click.IntRange(1, 64), default=None,
              help="Load processes per workload, the rate and in-flight window split among them; 1 = the load in "
              "this process (the behaviour before the option). Default: 2 (harness.compare).")
@click.option("--peer-client", "peer_client", type=click.Choice(["lean", "library"]), default="lean",
              show_default=True, help="The peers' send path: lean (the wire protocol spoken directly: "
              "harness.nats_lean, harness.amqp_lean) or library (nats-py, pika). NATS's consumer follows it "
              "(harness.nats_lean_consumer); RabbitMQ's uses pika.")
@click.option("--rocketmq-client", "rocketmq_client", type=click.Choice(["lean", "library"]), default="lean",
              show_default=True, help="The RocketMQ brokers' send path: lean (SEND_MESSAGE_V2 frames written "
              "directly: harness.rocketmq_lean) or library (this project's client). Consumers use the library.")
@click.option("--faults", "faults", default="", help="After the workloads, these faults' chaos cells on every "
              "broker, comma-separated, of: kill9, pause, power_loss, power_loss_torn, disk_fill (the peers have "
              "no power_loss_torn; the image faults need root). Default: none.")
@click.option("--fault-cycles", "fault_cycles", type=click.IntRange(1, 1000), default=3, show_default=True,
              help="Fault cycles per chaos cell.")
@click.option("--report", "report", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Also render the report (python -m spark_reports compare) into this directory.")
def compare_cmd(out: Path, brokers: str | None, workloads: str, seconds: float, rate: float, in_flight: int,
                message_size: int, load_processes: int | None, peer_client: str, rocketmq_client: str,
                faults: str, fault_cycles: int, report: Path | None) -> None:
    """The same short workloads against every broker available here (one sitting, one load generator)."""
    from harness.compare import BROKERS, DEFAULT_BROKERS, DEFAULT_LOAD_PROCESSES, CompareSpec, run_compare
    from harness.compare_faults import FAULTS

    chosen = tuple(b.strip() for b in brokers.split(",") if b.strip()) if brokers else DEFAULT_BROKERS
    bad = [b for b in chosen if b not in BROKERS]
    if bad:
        raise click.BadParameter(f"unknown broker(s) {', '.join(bad)}", param_hint="--brokers")
    chosen_faults = tuple(f.strip() for f in faults.split(",") if f.strip())
    bad = [f for f in chosen_faults if f not in FAULTS]
    if bad:
        raise click.BadParameter(f"unknown fault(s) {', '.join(bad)}; expected some of {', '.join(FAULTS)}",
                                 param_hint="--faults")
    spec = CompareSpec(seconds=seconds, rate=rate, in_flight=in_flight, message_size=message_size,
                       workloads=tuple(w.strip() for w in workloads.split(",") if w.strip()), brokers=chosen,
                       load_processes=DEFAULT_LOAD_PROCESSES if load_processes is None else load_processes,
                       peer_client="lean" if peer_client == "lean" else "library",
                       rocketmq_client="lean" if rocketmq_client == "lean" else "library",
                       faults=chosen_faults, fault_cycles=fault_cycles)
    session = run_compare(spec, out, log=lambda line: click.echo(line, err=True))
    click.echo(f"session: {session}")
    if report is not None:
        import subprocess
        import sys

        subprocess.run([sys.executable, "-m", "spark_reports", "compare", "--runs", str(session), "--out",
                        str(report)], check=True)


def _int_list(value: str | None, name: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    try:
        out = tuple(int(v.strip().replace("_", "")) for v in value.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(f"comma-separated integers, not {value!r}", param_hint=name) from None
    return out


@main.command("scaling")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("runs/scaling"),
              show_default=True, help="Rows are appended to OUT/scaling.jsonl.")
@click.option("--curves", default="size,depth,producers,queues,groups,backlog,backlog_cold", show_default=True,
              help="size, depth, producers, queues, groups, backlog, backlog_cold (root: a memory cgroup).")
@click.option("--seconds", type=click.FloatRange(0.5, 600), default=None, help="Per point (default 5, --quick 2).")
@click.option("--sizes", default=None, help="Body sizes in bytes, comma-separated (default 128 ... 65536).")
@click.option("--depths", default=None, help="In-flight depths (default 1,4,16,64,256).")
@click.option("--producers", default=None, help="Producer process counts (default 1,2,4).")
@click.option("--queues", default=None, help="Queue counts (default 1,16,256,1024,10000).")
@click.option("--backlogs", default=None, help="Backlog depths in messages (default 10000,100000,400000).")
@click.option("--groups", default=None, help="Broker group counts (default 1,2,3).")
@click.option("--cold-backlogs", default=None,
              help="backlog_cold's depths in messages (default 400000,1000000).")
@click.option("--cold-memory-max", default=None,
              help="backlog_cold's memory cgroup limit for the broker, e.g. 256MiB (the default).")
@click.option("--flush", type=click.Choice(["ASYNC_FLUSH", "SYNC_FLUSH"]), default="ASYNC_FLUSH", show_default=True)
@click.option("--no-bare", is_flag=True, help="Leave out the bare broker beside the size, depth and producers curves.")
@click.option("--quick", is_flag=True, help="A few points per curve, 2 s each.")
@click.option("--report", "report", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Also render the report (python -m spark_reports scaling) into this directory.")
@BROKER_IMPL
@ROCKETMQ_HOME
def scaling_cmd(out: Path, curves: str, seconds: float | None, sizes: str | None, depths: str | None,
                producers: str | None, queues: str | None, backlogs: str | None, groups: str | None,
                cold_backlogs: str | None, cold_memory_max: str | None, flush: str,
                no_bare: bool, quick: bool, report: Path | None, broker_impl: BrokerImpl,
                rocketmq_home: Path | None) -> None:
    """How the broker's cost grows: send rate and p99 against message size, in-flight depth, producers, queue
    count and broker groups, and consume rate against backlog depth, each curve beside its limit (fio, the bare
    broker, one group)."""
    import dataclasses

    from harness.launcher import LaunchError
    from harness.scaling import Plan, format_rows, run

    over: dict[str, object] = {"curves": tuple(c.strip() for c in curves.split(",") if c.strip()), "flush": flush,
                               "bare": not no_bare}
    if seconds is not None:
        over["seconds"] = seconds
    for name, value in (("sizes", sizes), ("depths", depths), ("producers", producers), ("queues", queues),
                        ("backlogs", backlogs), ("cold_backlogs", cold_backlogs), ("groups", groups)):
        parsed = _int_list(value, f"--{name.replace('_', '-')}")
        if parsed is not None:
            over[name] = parsed
    if cold_memory_max is not None:
        from harness.memory_cgroup import parse_size

        try:
            over["cold_memory_max"] = parse_size(cold_memory_max)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--cold-memory-max") from None
    try:
        plan = Plan.quick(**over) if quick else dataclasses.replace(Plan(), **over)  # type: ignore[arg-type]
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        rows = run(plan, out, progress=lambda line: click.echo(f"[scaling] {line}", err=True), impl=broker_impl,
                   rocketmq_home=rocketmq_home)
    except LaunchError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(format_rows(rows))
    click.echo(f"rows: {out / 'scaling.jsonl'}")
    if report is not None:
        import subprocess
        import sys

        subprocess.run([sys.executable, "-m", "spark_reports", "scaling", "--runs", str(out), "--out", str(report)],
                       check=True)


if __name__ == "__main__":
    main()
