"""``python -m chaos``: one experiment per fault, the matrix with its gate, and cleanup.

Exit codes: 0 = every experiment passed (or was skipped for a stated reason); 1 = a verdict failed (the
gate); 2 = bad usage or the harness itself failed. ``--broker-impl rocketmq`` runs Apache RocketMQ instead: a
verdict it fails is a finding about RocketMQ, appended to ``{runs-dir}/findings.jsonl`` (harness/records/findings.py),
not a failed gate; a cell that could not run fails whichever broker it ran.
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import click

from chaos import replication_matrix, transactions
from chaos.experiment import (
    PROCESS_FAULTS,
    ExperimentResult,
    ExperimentSpec,
    FaultName,
    FlushMode,
    TopologyKind,
    run_experiment,
)
from chaos.leftovers import Ledger, cleanup
from chaos.load import LoadSpec
from chaos.matrix import (
    MatrixSpec,
    aligned_table,
    cell_gate_failures,
    format_table,
    gate_failures,
    make_fault,
    rocketmq_findings,
    run_matrix,
    summary_rows,
)
from chaos.peer_faults import PEER_FAULTS, PeerFaultResult, peer_findings, run_peer_fault
from chaos.replication import ReplicationFault
from chaos.replication_verdict import ReplicationMode
from harness import rocketmq
from harness.driver_load import LoadShape
from harness.drivers import PEER_DRIVERS
from harness.records import findings
from harness.rocketmq import IMPLS, BrokerImpl, parse_impls

EXIT_OK, EXIT_GATE, EXIT_USAGE = 0, 1, 2


def _sigterm_to_exit() -> None:
    """SIGTERM (tox, CI timeouts) becomes SystemExit so every ``finally`` runs: brokers stopped, images
    unmounted, loop devices detached, sysctl values restored."""
    def handler(signum: int, _frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def _split(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _flushes(text: str) -> list[FlushMode]:
    try:
        return [FlushMode.parse(t) for t in _split(text)]
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


def _faults(text: str) -> list[FaultName]:
    try:
        return [FaultName(t) for t in _split(text)]
    except ValueError:
        raise click.BadParameter(f"faults: choose from {', '.join(f.value for f in FaultName)}") from None


def _impls(text: str) -> list[BrokerImpl]:
    try:
        return parse_impls(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--broker-impl") from None


def _profiles(text: str) -> list[str | None]:
    return [None if t == "none" else t for t in _split(text)]


def _gap(text: str) -> tuple[float, float]:
    try:
        lo, hi = (float(x) for x in text.split(","))
    except ValueError:
        raise click.BadParameter("expected MIN,MAX seconds, e.g. 0.5,2") from None
    if not 0 <= lo <= hi:
        raise click.BadParameter("expected 0 <= MIN <= MAX")
    return lo, hi


_rocketmq_home_opt = click.option(
    "--rocketmq-home", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="The RocketMQ distribution for --broker-impl rocketmq (default: $ROCKETMQ_HOME, else "
         "../shared/rocketmq-4.9.8).")


def common_options(f: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--cycles", type=click.IntRange(min=1), default=20, show_default=True,
                     help="Fault cycles per experiment."),
        click.option("--runs-dir", type=click.Path(path_type=Path), default=Path("runs"), show_default=True,
                     help="Where the run records go."),
        click.option("--work-dir", type=click.Path(path_type=Path), default=None,
                     help="Scratch space for stores and disk images (default: $TMPDIR)."),
        click.option("--seed", type=int, default=None, help="Random seed (fault moments, pause lengths, torn pages)."),
        click.option("--gap", "gap", default="0.5,2", show_default=True,
                     help="MIN,MAX seconds of load between faults (the fault lands at a random moment)."),
        click.option("--size", "msg_size", type=click.IntRange(min=64), default=1024, show_default=True,
                     help="Message body size in bytes."),
        click.option("--in-flight", type=click.IntRange(min=1), default=32, show_default=True,
                     help="Sends in flight at most."),
        click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON."),
        click.option("--check-each-recovery", is_flag=True,
                     help="After each recovery from a crash, stop the broker cleanly, run admin checkStore on its "
                          "store and start it again (the check always runs at the cell's end)."),
        _rocketmq_home_opt,
        click.option("--broker-conf", "broker_conf", multiple=True, metavar="KEY=VALUE",
                     help="An extra broker.conf line for every cell (repeatable), e.g. dispatchFlushedOnly=true."),
    ]
    for opt in reversed(options):
        f = opt(f)
    return f


def _print_results(results: list[ExperimentResult], as_json: bool, runs_dir: Path) -> None:
    for finding in rocketmq_findings(results):
        path = findings.record(runs_dir, finding)
        click.echo(f"finding about {finding.broker}: {finding.title} (recorded in {path})", err=True)
    rows = summary_rows(results)
    if as_json:
        click.echo(json.dumps(rows, indent=2, default=str))
    else:
        click.echo(format_table(rows))
        click.echo(f"\nrun records: {runs_dir.resolve()}")


def _apply_gate(failures: list[str]) -> None:
    """--gate: exit 1 with the failures listed, or say the gate passed."""
    if failures:
        click.echo("\nGATE FAILED:\n" + "\n".join(f"  {f}" for f in failures), err=True)
        sys.exit(EXIT_GATE)
    click.echo("\ngate passed", err=True)


def _progress(as_json: bool) -> Callable[[str], None]:
    """Progress goes to stderr, so stdout holds only the table (or the JSON)."""
    return lambda line: click.echo(line, err=True)


@click.group()
def main() -> None:
    """Chaos experiments (kill -9, power loss, disk fill, pause; a group's master lost) against the reference
    broker."""
    _sigterm_to_exit()


def _single(fault: FaultName, flush: str, profile: str, cycles: int, runs_dir: Path, work_dir: Path | None,
            seed: int | None, gap: str, msg_size: int, in_flight: int, as_json: bool, check_each_recovery: bool,
            rocketmq_home: Path | None, broker_impl: str, broker_conf: tuple[str, ...] = (),
            quick: bool = False) -> None:
    (impl,) = _impls(broker_impl)
    spec = ExperimentSpec(fault=fault, flush=_flushes(flush)[0], cycles=cycles, profile=_profiles(profile)[0],
                          runs_dir=runs_dir, work_dir=work_dir, seed=seed, gap_s=_gap(gap),
                          load=LoadSpec(msg_size=msg_size, in_flight=in_flight), command=tuple(sys.argv),
                          check_each_recovery=check_each_recovery, broker_impl=impl, rocketmq_home=rocketmq_home,
                          broker_conf=_conf_lines(broker_conf))
    result = run_experiment(spec, make_fault(fault, quick=quick, cycles=spec.cycles), log=_progress(as_json))
    _print_results([result], as_json, runs_dir)
    sys.exit(EXIT_GATE if gate_failures([result]) else EXIT_OK)


DRIVERS = ("rocketmq", *PEER_DRIVERS)
_driver_opt = click.option("--driver", "driver", default="rocketmq", show_default=True,
                           help="Which client and broker the load drives, comma-separated: rocketmq (this "
                                "project's client; --broker-impl picks the broker), or a peer broker: "
                                + ", ".join(PEER_DRIVERS) + f" (faults {', '.join(PEER_FAULTS)} only).")


def _drivers(text: str) -> list[str]:
    out = _split(text)
    bad = [d for d in out if d not in DRIVERS]
    if bad or not out:
        raise click.BadParameter(f"{text!r}: expected some of {', '.join(DRIVERS)}", param_hint="--driver")
    return out


def _run_peers(drivers: list[str], faults: list[str], cycles: int, runs_dir: Path, work_dir: Path | None,
               seed: int | None, gap: str, msg_size: int, in_flight: int, as_json: bool) -> list[PeerFaultResult]:
    """The peer drivers' cells (chaos.peer_faults); a fault they do not have is a skipped row."""
    results = []
    for driver in drivers:
        for fault in faults:
            if fault not in PEER_FAULTS:
                results.append(PeerFaultResult(driver, fault, cycles,
                                               skipped=f"{fault} is not built for peer brokers (only "
                                                       f"{', '.join(PEER_FAULTS)}; chaos/peer_faults.py says why)"))
                continue
            results.append(run_peer_fault(driver, fault, cycles=cycles, runs_dir=runs_dir, work_dir=work_dir,
                                          gap_s=_gap(gap), seed=seed, log=_progress(as_json),
                                          shape=LoadShape(name=fault, in_flight=in_flight, message_size=msg_size,
                                                          queues=4, drain_timeout_s=60.0)))
    rows = [r.summary() for r in results]
    if as_json:
        click.echo(json.dumps(rows, indent=2, default=str))
    else:
        click.echo(format_peer_table(rows))
    for finding in peer_findings(results):
        path = findings.record(runs_dir, finding)
        click.echo(f"finding about {finding.broker}: {finding.title} (recorded in {path})", err=True)
    return results


PEER_COLUMNS: tuple[tuple[str, str], ...] = (
    ("broker_impl", "driver"), ("fault", "fault"), ("ack_promise", "promise"), ("cycles", "cycles"),
    ("acknowledged", "acked"), ("lost", "lost"), ("lost_allowed", "lost (allowed)"),
    ("lost_beyond_promise", "lost (beyond promise)"), ("duplicated", "dup"), ("unknown", "unknown"),
    ("recovery_s_max", "recovery s (max)"), ("verdict", "verdict"))


def format_peer_table(rows: list[dict[str, Any]]) -> str:
    """The peer cells as the matrix's table, with skip reasons, violations, errors and what each disk fill saw."""
    notes = []
    for row in rows:
        name = f"{row['broker_impl']}/{row['fault']}"
        notes += [f"  {name}: {what}: {row[what]}" for what in ("skipped", "error") if row.get(what)]
        notes += [f"  {name}: {v}" for v in row.get("violations") or []]
        for c in row.get("cycle_info") or []:
            if "not_serving" in c:
                notes.append(f"  {name} cycle {c['cycle']}: {c['not_serving']}")
            if "answers" in c:
                answers = "; ".join(f"{a['count']}x {a['outcome']} {a['code']} {a['error'][:90]}"
                                    for a in c["answers"])
                notes.append(f"  {name} cycle {c['cycle']}: disk {c['used_ratio']:.1%} used: "
                             f"acked {c['acked_while_full']}, failed {c['failed_while_full']}, "
                             f"unknown {c['unknown_while_full']} ({answers or 'no errors'}); "
                             f"back {c['recovered_s']} s after the space was freed"
                             + (" (restarted)" if c["restarted"] else ""))
        if row.get("run_dir"):
            notes.append(f"  {name}: {row['run_dir']}")
    return "\n".join(aligned_table(PEER_COLUMNS, rows) + (["", "notes and run records:", *notes] if notes else []))


def _peer_single(fault: FaultName, kw: dict[str, Any]) -> bool:
    """A single fault with ``--driver`` naming peers: run those and exit; False when the driver is ours."""
    drivers = _drivers(kw.pop("driver"))
    if drivers == ["rocketmq"]:
        return False
    if "rocketmq" in drivers:
        raise click.BadParameter("rocketmq and peer drivers in one single-fault command: use matrix",
                                 param_hint="--driver")
    results = _run_peers(drivers, [fault.value], kw["cycles"], kw["runs_dir"], kw["work_dir"], kw["seed"],
                         kw["gap"], kw["msg_size"], kw["in_flight"], kw["as_json"])
    sys.exit(EXIT_GATE if any(r.skipped is None and not r.ok for r in results) else EXIT_OK)


_flush_opt = click.option("--flush", default="async", show_default=True, help="sync or async (flushDiskType).")
_impl_opt = click.option("--broker-impl", type=click.Choice(IMPLS), default="reference", show_default=True,
                         help="Which broker runs: the reference broker, or Apache RocketMQ (--rocketmq-home).")
_profile_opt = click.option("--profile", default="default", show_default=True,
                            help="sysctl profile applied during the run (sysctl_profiles); 'none' for none.")


@main.command()
@_impl_opt
@_flush_opt
@_profile_opt
@common_options
@_driver_opt
def kill9(**kw: Any) -> None:
    """SIGKILL the broker under load and restart it on the same store, CYCLES times."""
    _peer_single(FaultName.KILL9, kw)
    _single(FaultName.KILL9, **kw)


@main.command("power-loss")
@_impl_opt
@_flush_opt
@_profile_opt
@common_options
@click.option("--torn", is_flag=True, help="Also zero or garble random 4 KiB pages past the flushed offset.")
@_driver_opt
def power_loss(torn: bool, **kw: Any) -> None:
    """SIGKILL, copy the loop-mounted disk image as the device holds it, restart on the copy (needs root)."""
    _peer_single(FaultName.POWER_LOSS_TORN if torn else FaultName.POWER_LOSS, kw)
    _single(FaultName.POWER_LOSS_TORN if torn else FaultName.POWER_LOSS, **kw)


@main.command("disk-fill")
@_impl_opt
@_flush_opt
@_profile_opt
@common_options
@click.option("--no-clean-phase", is_flag=True, help="Skip the cleaning phase (it waits for 60 s of uptime).")
@_driver_opt
def disk_fill(no_clean_phase: bool, **kw: Any) -> None:
    """Fill a small loop-mounted filesystem past 90 %, then free it; ENOSPC and cleaning phases (needs root).
    A peer driver's disk is filled whole instead (chaos/peer_faults.py)."""
    _peer_single(FaultName.DISK_FILL, kw)
    _single(FaultName.DISK_FILL, quick=no_clean_phase, **kw)


@main.command()
@_impl_opt
@_flush_opt
@_profile_opt
@common_options
@_driver_opt
def pause(**kw: Any) -> None:
    """SIGSTOP the broker for 0.5-4.5 s, then SIGCONT, CYCLES times."""
    _peer_single(FaultName.PAUSE, kw)
    _single(FaultName.PAUSE, **kw)


@main.command()
@click.option("--flush", "flush", default="sync,async", show_default=True, help="Flush modes, comma-separated.")
@click.option("--faults", default=",".join(f.value for f in PROCESS_FAULTS), show_default=True,
              help="Faults, comma-separated: " + ", ".join(f.value for f in FaultName) + " (partition only with "
                   "--topology docker; power_loss, power_loss_torn, disk_fill only on processes).")
@click.option("--topology", type=click.Choice([t.value for t in TopologyKind]), default="process", show_default=True,
              help="Where the name server and broker run: local processes, or containers of the project's image "
                   "(docker/Dockerfile; kill9 = docker kill -s KILL, pause = docker pause, partition = docker "
                   "network disconnect/connect, restart = docker stop/start).")
@click.option("--image", default=None, help="The image for --topology docker (default rmq-lab:latest, "
                                            "docker/build-offline.sh builds it).")
@click.option("--profiles", default="default", show_default=True, help="sysctl profiles, comma-separated.")
@click.option("--gate", is_flag=True, help="Exit 1 if any cell fails its verdict (the tox -e crash check).")
@click.option("--require-all", is_flag=True, help="With --gate, a skipped cell fails too.")
@click.option("--quick", is_flag=True, help="Short cells: disk fill without the cleaning phase.")
@click.option("--broker-impl", "broker_impl", default="reference", show_default=True,
              help="Brokers, comma-separated: reference, rocketmq (Apache RocketMQ, --rocketmq-home), or both.")
@common_options
@_driver_opt
def matrix(flush: str, faults: str, topology: str, image: str | None, profiles: str, gate: bool, require_all: bool,
           quick: bool, broker_impl: str, broker_conf: tuple[str, ...], cycles: int, runs_dir: Path,
           work_dir: Path | None, seed: int | None,
           gap: str, msg_size: int, in_flight: int, as_json: bool, check_each_recovery: bool,
           rocketmq_home: Path | None, driver: str) -> None:
    """Run every broker x flush mode x fault x profile against fresh stores; print the summary table.

    A violation on Apache RocketMQ is a finding about RocketMQ (findings.jsonl in the runs directory), not
    a gate failure; a cell that could not run as planned fails the gate whichever broker it ran. ``--driver``
    naming peer brokers runs their cells (kill9, pause, power_loss, disk_fill) instead or as well, judged against
    each one's acknowledgement promise (a violation is a finding about the peer, not a gate failure)."""
    drivers = _drivers(driver)
    peers = [d for d in drivers if d != "rocketmq"]
    if peers:
        peer_results = _run_peers(peers, _split(faults), cycles, runs_dir, work_dir, seed, gap, msg_size, in_flight,
                                  as_json)
        # As RocketMQ's: a peer that breaks its own promise is a finding (recorded above), not a failed gate; a
        # cell that could not run as planned fails it.
        peer_failed = cell_gate_failures(((f"{r.driver}/{r.fault}", r.driver, r) for r in peer_results), require_all)
        if "rocketmq" not in drivers:
            if gate and peer_failed:
                click.echo("\nGATE FAILED:\n" + "\n".join(f"  {f}" for f in peer_failed), err=True)
                sys.exit(EXIT_GATE)
            return
    spec = MatrixSpec(flushes=_flushes(flush), faults=_faults(faults), profiles=_profiles(profiles), cycles=cycles,
                      runs_dir=runs_dir, work_dir=work_dir, seed=seed, gap_s=_gap(gap),
                      load=LoadSpec(msg_size=msg_size, in_flight=in_flight), quick=quick, command=tuple(sys.argv),
                      check_each_recovery=check_each_recovery, impls=_impls(broker_impl),
                      rocketmq_home=rocketmq_home, topology=TopologyKind(topology), image=image,
                      broker_conf=_conf_lines(broker_conf))
    results = run_matrix(spec, log=_progress(as_json))
    _print_results(results, as_json, runs_dir)
    if gate:
        failures = gate_failures(results, require_all)
        if failures:
            click.echo("\nGATE FAILED:\n" + "\n".join(f"  {f}" for f in failures), err=True)
            sys.exit(EXIT_GATE)
        click.echo("\ngate passed", err=True)


def _conf_lines(lines: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if not sep or not key.strip() or not key.strip().isidentifier():
            raise click.BadParameter(f"{line!r}: expected KEY=VALUE with a broker.conf key", param_hint="--broker-conf")
        out[key.strip()] = value.strip()
    return out


def _modes(text: str) -> list[ReplicationMode]:
    try:
        return [ReplicationMode.parse(t) for t in _split(text)]
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--replication") from None


def _master_faults(text: str) -> list[ReplicationFault]:
    try:
        return [ReplicationFault(t) for t in _split(text)]
    except ValueError:
        raise click.BadParameter(f"choose from {', '.join(f.value for f in ReplicationFault)}",
                                 param_hint="--faults") from None


@main.command()
@click.option("--replication", "replication", default="sync,async", show_default=True,
              help="brokerRole of the master, comma-separated: sync (SYNC_MASTER), async (ASYNC_MASTER).")
@click.option("--faults", default="master_kill9,master_disk_destroyed", show_default=True,
              help="Faults, comma-separated: " + ", ".join(f.value for f in ReplicationFault) + ".")
@click.option("--flush", default="async", show_default=True,
              help="flushDiskType of both brokers, comma-separated: sync, async (each a set of cells).")
@click.option("--cycles", type=click.IntRange(min=1), default=3, show_default=True,
              help="Fault cycles; for a master fault all but the last restart the master, the last is the fault.")
@click.option("--runs-dir", type=click.Path(path_type=Path), default=Path("runs"), show_default=True)
@click.option("--work-dir", type=click.Path(path_type=Path), default=None, help="Scratch space (default: $TMPDIR).")
@click.option("--seed", type=int, default=None, help="Random seed (the fault moments).")
@click.option("--gap", "gap", default="0.5,2", show_default=True, help="MIN,MAX seconds of load between faults.")
@click.option("--size", "msg_size", type=click.IntRange(min=64), default=1024, show_default=True)
@click.option("--in-flight", type=click.IntRange(min=1), default=32, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--gate", is_flag=True, help="Exit 1 if a reference cell fails its verdict (SYNC_MASTER: no SEND_OK "
                                           "lost).")
@click.option("--require-all", is_flag=True, help="With --gate, a skipped cell fails too.")
@click.option("--broker-impl", "broker_impl", default="reference", show_default=True,
              help="Brokers, comma-separated: reference, rocketmq, or both.")
@_rocketmq_home_opt
def replication(replication: str, faults: str, flush: str, cycles: int, runs_dir: Path, work_dir: Path | None,
                seed: int | None, gap: str, msg_size: int, in_flight: int, as_json: bool, gate: bool,
                require_all: bool, broker_impl: str, rocketmq_home: Path | None) -> None:
    """A master and its slave under load. Master faults: the master is killed (master_kill9), killed and its
    store deleted (master_disk_destroyed) or its loop image crashed (master_power_loss, root + loop devices);
    the topic is drained from the slave. SYNC_MASTER must keep every SEND_OK; ASYNC_MASTER's loss is reported
    with the replication lag at the crash. Slave faults (slave_kill9, slave_paused): the slave must catch up,
    both stores pass checkStore, and the master keeps every acknowledged send. Partition faults
    (partition_master_slave, partition_clients_master; root): the group runs on the lab network, is cut under
    load and healed; the topic is read back from the master and no acknowledged message may be missing."""
    spec = replication_matrix.ReplicationMatrixSpec(
        modes=_modes(replication), faults=_master_faults(faults), flushes=_flushes(flush), cycles=cycles,
        runs_dir=runs_dir, work_dir=work_dir, seed=seed, gap_s=_gap(gap),
        load=LoadSpec(msg_size=msg_size, in_flight=in_flight), command=tuple(sys.argv), impls=_impls(broker_impl),
        rocketmq_home=rocketmq_home)
    results = replication_matrix.run_cells(spec, log=_progress(as_json))
    rows = replication_matrix.summary_rows(results)
    click.echo(json.dumps(rows, indent=2, default=str) if as_json else replication_matrix.format_table(rows))
    if gate:
        _apply_gate(replication_matrix.gate_failures(results, require_all))


@main.command("transactions")
@click.option("--faults", default="kill9,producer_kill9", show_default=True,
              help="Faults, comma-separated: " + ", ".join(f.value for f in transactions.TxFault) + ".")
@click.option("--flush", default="sync,async", show_default=True, help="Flush modes, comma-separated.")
@click.option("--cycles", type=click.IntRange(min=1), default=3, show_default=True, help="Fault cycles per cell.")
@click.option("--runs-dir", type=click.Path(path_type=Path), default=Path("runs"), show_default=True)
@click.option("--work-dir", type=click.Path(path_type=Path), default=None, help="Scratch space (default: $TMPDIR).")
@click.option("--seed", type=int, default=None, help="Random seed (the fault moments).")
@click.option("--gap", "gap", default="0.5,2", show_default=True, help="MIN,MAX seconds of load between faults.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--gate", is_flag=True, help="Exit 1 if a reference cell fails its verdict.")
@click.option("--require-all", is_flag=True, help="With --gate, a skipped cell fails too.")
@click.option("--broker-impl", "broker_impl", default="reference", show_default=True,
              help="Brokers, comma-separated: reference, rocketmq, or both.")
@_rocketmq_home_opt
def transactions_cmd(faults: str, flush: str, cycles: int, runs_dir: Path, work_dir: Path | None, seed: int | None,
                     gap: str, as_json: bool, gate: bool, require_all: bool, broker_impl: str,
                     rocketmq_home: Path | None) -> None:
    """Transactional producers (commit, rollback, UNKNOW resolved by check-back, never resolved) and a consumer
    under broker kill -9 / power loss, or a producer killed between prepare and END_TRANSACTION: no rolled-back
    or unresolved message delivered, none before its commit, every committed one delivered (ASYNC power loss:
    within the unflushed window), every UNKNOW resolved by check-back."""
    try:
        tx_faults = [transactions.TxFault(t) for t in _split(faults)]
    except ValueError:
        raise click.BadParameter(f"choose from {', '.join(f.value for f in transactions.TxFault)}",
                                 param_hint="--faults") from None
    spec = transactions.TxMatrixSpec(faults=tx_faults, flushes=_flushes(flush), impls=_impls(broker_impl),
                                     cycles=cycles, runs_dir=runs_dir, work_dir=work_dir, seed=seed, gap_s=_gap(gap),
                                     command=tuple(sys.argv), rocketmq_home=rocketmq_home)
    results = transactions.run_cells(spec, log=_progress(as_json))
    for finding in transactions.rocketmq_findings(results):
        path = findings.record(runs_dir, finding)
        click.echo(f"finding about {finding.broker}: {finding.title} (recorded in {path})", err=True)
    rows = transactions.summary_rows(results)
    click.echo(json.dumps(rows, indent=2, default=str) if as_json else transactions.format_table(rows))
    if gate:
        _apply_gate(transactions.gate_failures(results, require_all))


@main.command("cleanup")
@click.option("--force", is_flag=True, help="Also undo entries whose owning process is still running.")
@click.option("--state-file", type=click.Path(path_type=Path), default=None,
              help="The ledger (default: $RMQ_LAB_CHAOS_STATE or /run/rmq-lab-chaos/state.json).")
def cleanup_cmd(force: bool, state_file: Path | None) -> None:
    """Undo what an interrupted run left: broker processes, mounts, loop devices, scratch files, sysctl."""
    ledger = Ledger(state_file)
    report = cleanup(ledger, force=force)
    for line in report.done:
        click.echo(f"done: {line}")
    for line in report.kept:
        click.echo(f"kept: {line}")
    for line in report.failed:
        click.echo(f"FAILED: {line}", err=True)
    click.echo(f"sysctl: {report.sysctl}")
    if not (report.done or report.kept or report.failed):
        click.echo(f"nothing to clean up ({ledger.path})")
    sys.exit(EXIT_OK if report.ok else EXIT_USAGE)


@main.command("recovery-bench")
@click.option("--sizes", default="64,256,1024", show_default=True, help="Commit-log sizes in MiB, comma-separated.")
@click.option("--file-size", "file_mib", type=click.IntRange(min=1), default=256, show_default=True,
              help="mappedFileSizeCommitLog in MiB.")
@click.option("--runs-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("runs"),
              show_default=True,
              help="Where the run record (scenario \"recovery\"; meta.json names the broker) goes.")
@click.option("--work-dir", type=click.Path(path_type=Path), default=None, help="Scratch space (default: $TMPDIR).")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
@_impl_opt
@_rocketmq_home_opt
def recovery_bench(sizes: str, file_mib: int, runs_dir: Path, work_dir: Path | None, as_json: bool,
                   broker_impl: BrokerImpl, rocketmq_home: Path | None) -> None:
    """Broker restart time after a clean stop and after kill -9 (no tail, a tail, no checkpoint), per log size.

    The rows go into the run record's meta.json ``results.recovery`` (the Spark recovery report reads them)."""
    from chaos.recovery_bench import bench_log_size, format_rows
    from harness.records import RunRecord

    try:
        mibs = [int(x) for x in _split(sizes)]
    except ValueError:
        raise click.BadParameter(f"not a list of MiB counts: {sizes!r}", param_hint="--sizes") from None
    if not mibs or min(mibs) < 1:
        raise click.BadParameter("give at least one size of 1 MiB or more", param_hint="--sizes")
    if broker_impl == "rocketmq" and (reason := rocketmq.unavailable(rocketmq_home)) is not None:
        raise click.UsageError(reason)
    rows = []
    record = RunRecord.create(runs_dir, "recovery", {"sizes_mib": mibs, "file_mib": file_mib,
                                                   "broker_impl": broker_impl}, list(sys.argv))
    try:
        for mib in mibs:
            got = bench_log_size(mib << 20, work_dir=work_dir, file_bytes=file_mib << 20, record=record,
                                 impl=broker_impl, rocketmq_home=rocketmq_home)
            click.echo(format_rows(got), err=True)
            rows += got
    finally:
        record.finish(results={"recovery": [r.to_json() for r in rows]})
    click.echo(json.dumps([r.to_json() for r in rows], indent=2) if as_json else format_rows(rows))
    click.echo(f"run record: {record.run_dir}", err=True)
