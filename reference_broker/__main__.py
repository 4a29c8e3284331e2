"""Command-line entry point (``python -m reference_broker`` / ``rmq-lab``).

Temporary stub: will be replaced by the real CLI.
"""

from __future__ import annotations

import sys

import click


@click.group()
def main() -> None:
    """RocketMQ store lab."""


@main.group()
def bench() -> None:
    """Benchmarks."""


@bench.command("store")
@click.option("--quick", is_flag=True, help="Short run.")
@click.option("--json", "as_json", is_flag=True, help="Emit JSON.")
def store(quick: bool, as_json: bool) -> None:
    """Benchmark the message store."""
    click.echo("store benchmark not implemented yet", err=True)
    sys.exit(1)


if __name__ == "__main__":
    main()
