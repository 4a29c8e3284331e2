"""Command line: `python -m sysctl_profiles {list,show,diff,apply,restore,compare}`.

Exit codes (ExitCode): apply passes the command's own code through (128 + N if it died of signal N);
its own outcomes use 2 (error: nothing changed), 3 (profile not applied and --allow-unapplied not
given: command not run), 4 (restore failed: the state file is kept), 128 + N (signal N arrived
before the command started). diff follows diff(1): 0 same, 1 differs, 2 trouble.
"""

from __future__ import annotations

import enum
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import click

from sysctl_profiles import procsys
from sysctl_profiles.catalog import load_profile, profile_names
from sysctl_profiles.compare import PROFILES, WORKLOADS, CompareSpec, Workload, run_compare, summary_lines
from sysctl_profiles.errors import RestoreError, SysctlProfileError
from sysctl_profiles.plan import DiffStatus, Unavailable, check_targets, diff_rows
from sysctl_profiles.profile import Keep, Profile, RamScaled, resolve
from sysctl_profiles.record import update_run_meta, write_record
from sysctl_profiles.runner import SignalForwarder, run_child
from sysctl_profiles.session import AppliedState, ProfileSession, restore_state_file
from sysctl_profiles.state_file import DEFAULT_STATE_FILE


class ExitCode(enum.IntEnum):
    OK = 0
    DIFFERS = 1
    ERROR = 2
    NOT_APPLIED = 3
    RESTORE_FAILED = 4
    COMMAND_NOT_FOUND = 127


def _say(message: str) -> None:
    click.echo(f"sysctl_profiles: {message}", err=True)


def _fail(message: str, code: ExitCode = ExitCode.ERROR) -> NoReturn:
    _say(message)
    sys.exit(code)


def _load(name: str) -> Profile:
    try:
        return load_profile(name)
    except SysctlProfileError as e:
        _fail(str(e))


@click.group()
def main() -> None:
    """vm.* sysctl profiles: applied, recorded, and always restored."""


@main.command("list")
def list_cmd() -> None:
    """Names of the shipped profiles."""
    for name in profile_names():
        click.echo(name)


@main.command()
@click.argument("name")
def show(name: str) -> None:
    """Print a profile with its notes and the values it resolves to on this machine."""
    profile = _load(name)
    ram = procsys.mem_total_bytes()
    click.echo(f"# profile {profile.name} ({profile.source})")
    for line in profile.header.splitlines():
        click.echo(f"# {line}".rstrip())
    for e in profile.entries:
        click.echo()
        for line in e.note.splitlines():
            click.echo(f"# {line}".rstrip())
        line = f"{e.key} = {e.expr.describe()}"
        if isinstance(e.expr, RamScaled):
            line += f"    # = {e.expr.resolve(ram)} here (MemTotal {ram} bytes)"
        elif isinstance(e.expr, Keep):
            line += "    # record only"
        click.echo(line)
    for remark in profile.remarks:
        click.echo()
        for line in remark.splitlines():
            click.echo(f"# {line}".rstrip())


@main.command()
@click.argument("name")
def diff(name: str) -> None:
    """Profile targets vs values in force; exit 0 if all the same, 1 if any differs."""
    profile = _load(name)
    targets = resolve(profile, procsys.mem_total_bytes())
    try:
        current = check_targets(targets, procsys.probe(targets))
    except SysctlProfileError as e:
        _fail(str(e))
    rows = diff_rows(targets, current)
    width = max((len(r.key) for r in rows), default=10)
    click.echo(f"{'key':<{width}}  {'status':<11}  {'profile':<24}  in force")
    for r in rows:
        click.echo(f"{r.key:<{width}}  {r.status.value:<11}  {r.target or '-':<24}  {r.in_force}")
    sys.exit(ExitCode.DIFFERS if any(r.status is DiffStatus.DIFFERS for r in rows) else ExitCode.OK)


def _write_records(state: AppliedState, record: Path | None, run_dir: Path | None) -> None:
    entry = state.record()
    if record is not None:
        write_record(record, entry)
    if run_dir is not None:
        update_run_meta(run_dir, entry)


@main.command(context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option("--allow-unapplied", is_flag=True, help="Run the command even if the profile could not be applied.")
@click.option("--record", type=click.Path(dir_okay=False, path_type=Path), help="Write what was in force here (JSON).")
@click.option(
    "--run-dir", type=click.Path(file_okay=False, path_type=Path), help="Set the 'sysctl' entry of DIR/meta.json."
)
@click.option(
    "--state-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=DEFAULT_STATE_FILE,
    show_default=True,
    help="Where the values to put back are saved before anything changes.",
)
def apply(
    name: str,
    command: tuple[str, ...],
    allow_unapplied: bool,
    record: Path | None,
    run_dir: Path | None,
    state_file: Path,
) -> None:
    """Apply profile NAME, run COMMAND (after `--`), restore every changed value afterwards.

    Restores also when the command fails or on SIGINT/SIGTERM/SIGHUP (forwarded to the command first).
    If this process is SIGKILLed, `restore` undoes the change from the state file.
    """
    sys.exit(
        _apply(name, command, allow_unapplied=allow_unapplied, record=record, run_dir=run_dir, state_file=state_file)
    )


def _apply(
    name: str,
    command: Sequence[str],
    *,
    allow_unapplied: bool,
    record: Path | None,
    run_dir: Path | None,
    state_file: Path,
) -> int:
    profile = _load(name)
    session = ProfileSession(profile, state_file=state_file)
    with SignalForwarder() as signals:
        try:
            state = session.apply()
        except SysctlProfileError as e:
            _fail(str(e))
        except OSError as e:  # e.g. the state file's directory is not writable; nothing was changed
            _fail(f"cannot apply {profile.name}: {e}")
        try:
            code = _run(state, command, allow_unapplied, record, run_dir, signals)
        finally:
            # Signals stay caught here: a second Ctrl-C must not cut the restore short.
            try:
                session.restore()
            except RestoreError as e:
                _say(f"{e}\n  state file kept: run `python -m sysctl_profiles restore {session.state_file}`")
                code = ExitCode.RESTORE_FAILED
            else:
                if state.changes:
                    _say(f"{profile.name}: restored {len(state.changes)} value(s)")
    return code


def _run(
    state: AppliedState,
    command: Sequence[str],
    allow_unapplied: bool,
    record: Path | None,
    run_dir: Path | None,
    signals: SignalForwarder,
) -> int:
    """Record, then run the command if the profile is in force (or unapplied runs are allowed)."""
    if state.applied:
        _say(f"{state.profile}: {state.status.value}, {len(state.changes)} value(s) changed")
    else:
        _say(f"{state.profile}: NOT applied: {state.reason}")
    try:
        _write_records(state, record, run_dir)
    except (OSError, ValueError) as e:
        _say(f"cannot write the record: {e}; command not run")
        return ExitCode.ERROR
    if not state.applied and not allow_unapplied:
        _say("command not run (give --allow-unapplied to run it anyway)")
        return ExitCode.NOT_APPLIED
    interrupted = signals.exit_code()
    if interrupted is not None:
        _say("interrupted before the command started")
        return interrupted
    try:
        return run_child(command, signals)
    except FileNotFoundError:
        _say(f"command not found: {shlex.join(command)}")
        return ExitCode.COMMAND_NOT_FOUND


@main.command()
@click.argument("state_file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Restore even while an apply holds the lock.")
def restore(state_file: Path | None, force: bool) -> None:
    """Put back the values saved in STATE_FILE (default: the apply default) by an apply that was killed."""
    path = state_file if state_file is not None else DEFAULT_STATE_FILE
    try:
        outcome = restore_state_file(path, force=force)
    except RestoreError as e:
        _fail(f"{e}\n  state file kept: {path}", ExitCode.RESTORE_FAILED)
    except SysctlProfileError as e:
        _fail(str(e))
    _say(f"{path}: {outcome.value}")
    sys.exit(ExitCode.OK)


@main.command()
@click.argument("keys", nargs=-1, required=True)
def values(keys: tuple[str, ...]) -> None:
    """Print the values in force for KEYS (sysctl -n style, one `key = value` a line)."""
    failed = False
    for key, reading in procsys.probe(keys).items():
        if isinstance(reading, Unavailable):
            _say(f"{key}: {reading.value}")
            failed = True
        else:
            click.echo(f"{key} = {reading}")
    sys.exit(ExitCode.ERROR if failed else ExitCode.OK)


@main.command()
@click.option("--profiles", default=",".join(PROFILES), show_default=True, help="Profiles, comma-separated.")
@click.option("--runs-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("runs"),
              show_default=True, help="Where the run records (and profiles-<id>.json) go.")
@click.option("--seconds", type=click.IntRange(min=1), default=15, show_default=True,
              help="Length of each throughput and latency workload.")
@click.option("--cycles", type=click.IntRange(min=1), default=3, show_default=True,
              help="Power cuts per profile (ASYNC_FLUSH power-loss cell).")
@click.option("--latency-rate", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Offered rate of the latency workloads, msg/s; 0 = half the first profile's throughput.")
@click.option("--workloads", default=",".join(WORKLOADS), show_default=True,
              help="Workloads, comma-separated: throughput, latency, power_loss.")
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Scratch for the power-loss cells' stores and disk images (default $TMPDIR).")
def compare(profiles: str, runs_dir: Path, seconds: int, cycles: int, latency_rate: float, workloads: str,
            work_dir: Path | None) -> None:
    """The same throughput, half-rate latency and ASYNC power-loss workloads under each profile; the machine's
    values restored after each workload and at the end (also on failure or Ctrl-C). Report: python -m
    spark_reports profiles."""
    names = tuple(p.strip() for p in profiles.split(",") if p.strip())
    try:
        chosen = tuple(Workload(w.strip()) for w in workloads.split(",") if w.strip())
    except ValueError:
        raise click.BadParameter(f"{workloads!r}: expected {', '.join(WORKLOADS)}", param_hint="--workloads") from None
    spec = CompareSpec(profiles=names, runs_dir=runs_dir, seconds=seconds, cycles=cycles, latency_rate=latency_rate,
                       work_dir=work_dir, workloads=chosen)
    try:
        manifest, code = run_compare(spec, _say)
    except RestoreError as e:
        _fail(str(e), ExitCode.RESTORE_FAILED)
    except SysctlProfileError as e:
        _fail(str(e))
    for line in summary_lines(manifest):
        click.echo(line)
    if not manifest["restore"]["restored"]:
        code = ExitCode.RESTORE_FAILED
    sys.exit(code)
