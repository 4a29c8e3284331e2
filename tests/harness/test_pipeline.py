"""harness.pipeline: the main job's stages — what runs as root and what does not, and that every command parses."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from locust.argument_parser import LocustArgumentParser

from chaos.cli import main as chaos_main
from harness.__main__ import main as harness_main
from harness.machine_noise import main as noise_main
from harness.pipeline import stages
from harness.rocketmq import parse_impls
from scenarios.options import SCENARIO_OPTIONS, Settings, register
from spark_reports.cli import cli as spark_cli

ROOT = Path(__file__).resolve().parents[2]


def _all_argv(why_not_root: str | None) -> list[list[str]]:
    return [s.argv for s in stages(Path("/r/runs"), Path("/r/reports"), 30, 3, why_not_root)]


def test_root_runs_power_loss_cold_backlog_and_disk_fill() -> None:
    text = [" ".join(a) for a in _all_argv(None)]
    assert any("kill9,power_loss" in t for t in text)
    assert any("--cold" in t for t in text)
    assert any(" disk-fill " in t for t in text)


def test_without_root_those_stages_are_left_out() -> None:
    text = [" ".join(a) for a in _all_argv("not root")]
    assert not any("power_loss" in t or "--cold" in t or "disk-fill" in t for t in text)
    assert any(" kill9 " in t or t.endswith(" kill9") or "--faults kill9 " in t for t in text)


def test_reports_come_last_and_every_experiment_writes_into_runs() -> None:
    todo = stages(Path("/r/runs"), Path("/r/reports"), 30, 3, None)
    assert todo[-1].argv[1:4] == ["-m", "spark_reports", "all"] and todo[-1].required
    for stage in todo[:-1]:
        assert "/r/runs" in stage.argv, stage.name


@pytest.mark.parametrize("why", [None, "not root"])
def test_every_command_parses(why: str | None, tmp_path: Path) -> None:
    """Each chaos and spark_reports command line, for either broker, is accepted by its own CLI; each locust file
    exists and takes the option its command line gives it."""
    (tmp_path / "runs").mkdir()
    for stage in stages(tmp_path / "runs", tmp_path / "reports", 30, 3, why, ("reference", "rocketmq")):
        argv = stage.argv
        module = argv[2]
        if module == "locust":
            assert (ROOT / "scenarios" / Path(argv[argv.index("-f") + 1]).name).is_file()
            parser = LocustArgumentParser()
            register(parser, Settings(), (*SCENARIO_OPTIONS, "cold"))
            parser.parse_args(argv[argv.index("--run-dir"):argv.index("--only-summary")]
                              + argv[argv.index("--only-summary") + 1:])  # exits on an unknown option
            continue
        if module == "harness.machine_noise":
            with noise_main.make_context("machine_noise", argv[3:]) as ctx:
                assert ctx.params["label"] in ("before", "after")
            continue
        group = {"chaos": chaos_main, "spark_reports": spark_cli, "harness": harness_main}[module]
        name, *args = argv[3:]
        command = group.get_command(click.Context(group), name)  # type: ignore[attr-defined]
        assert command is not None, argv
        with command.make_context(name, list(args)) as ctx:
            assert ctx.params


def test_each_broker_runs_every_experiment_and_the_reports_run_once() -> None:
    both = stages(Path("/r/runs"), Path("/r/reports"), 30, 3, None, ("reference", "rocketmq"))
    one = stages(Path("/r/runs"), Path("/r/reports"), 30, 3, None)
    # The machine's noise is sampled once before the experiments and once after them, whatever the brokers.
    assert [s.argv[-1] for s in (one[0], one[-2])] == ["before", "after"]
    assert both[0] == one[0] and both[-2] == one[-2]
    experiments = one[1:-2]
    assert len(both) == 2 * len(experiments) + 3 and both[-1] == one[-1]
    theirs = both[1 + len(experiments):-2]
    assert all(s.argv[-2:] == ["--broker-impl", "rocketmq"] and s.name.endswith("[rocketmq]") for s in theirs)
    assert not any(s.required for s in theirs), "RocketMQ's stages are reported and skipped if they fail"
    assert [s.argv[:-2] for s in theirs] == [s.argv for s in experiments]


def test_broker_lists_parse_in_order_once_each() -> None:
    assert parse_impls("both") == ["reference", "rocketmq"]
    assert parse_impls("rocketmq, reference,rocketmq") == ["rocketmq", "reference"]
    with pytest.raises(ValueError, match="unknown broker 'kafka'"):
        parse_impls("reference,kafka")


@pytest.mark.parametrize("why", [None, "not root"])
def test_each_broker_loses_a_master_under_sync_and_async_replication(why: str | None) -> None:
    """The replication claim is measured on every machine (no root needed), and a failure only skips the stage."""
    todo = stages(Path("/r/runs"), Path("/r/reports"), 30, 3, why, ("reference", "rocketmq"))
    mine = [s for s in todo if s.argv[2:4] == ["chaos", "replication"]]
    assert len(mine) == 2 and not any(s.required for s in mine)
    for stage in mine:
        args = stage.argv[4:]
        assert args[args.index("--replication") + 1] == "sync,async"
        assert args[args.index("--faults") + 1] == "master_disk_destroyed"
        assert args[args.index("--cycles") + 1] == "2"


def test_the_timing_claims_experiments_run_repeatedly_and_the_others_say_why_once_suffices() -> None:
    """Claims judged from a timing (cold backlog read, queue counts, recovery) get REPEATS runs each, so the claims
    page can say "held in k of n"; each claim judged from a single run names why one suffices on the page."""
    from harness.pipeline import REPEATS
    from spark_reports.claims import ONE_RUN_SUFFICES, ClaimId

    text = [" ".join(a) for a in _all_argv(None)]
    assert REPEATS >= 3
    assert sum("--cold" in t for t in text) == REPEATS
    assert sum("scenarios/queues.py" in t for t in text) == REPEATS
    assert sum(" recovery-bench " in t for t in text) == REPEATS
    assert all("10000" in t.split("--queue-counts ")[1].split()[0] for t in text if "scenarios/queues.py" in t)
    once = {ClaimId.SYNC_NO_LOSS, ClaimId.ASYNC_KILL9_NO_LOSS, ClaimId.ASYNC_POWER_LOSS_TAIL,
            ClaimId.DISK_FULL_PROTECTION, ClaimId.REPLICATION_MASTER_LOSS, ClaimId.PAGE_CACHE_CAPACITY,
            ClaimId.OFFSET_616_YEARS}
    assert once <= set(ONE_RUN_SUFFICES)
