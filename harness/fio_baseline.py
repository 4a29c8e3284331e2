"""The fio baseline step: what the filesystem under the broker's store can do, for meta.json's ``fio``.

Three jobs (sequential write, 4 KiB write + fdatasync, 4 KiB random read), run by the store benchmark's fio
runner (``reference_broker.bench.fio``, which owns the job definitions), on the store's filesystem, so a run's
figures can be read against its device. Where fio cannot run the entry says why (``{"skipped": reason}``)
rather than inventing figures.

``python -m harness.fio_baseline DIR [--full] [--run RUN_DIR]`` measures DIR and prints the JSON, or stores it
in an existing run's meta.json.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import click

from harness.records.run import RunRecord
from reference_broker.bench.fio import FioParams, run_fio_baselines

Mode = Literal["quick", "full"]


def fio_baseline(directory: Path, mode: Mode = "quick", *, params: FioParams | None = None,
                 progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The ``fio`` object of meta.json: figures (bytes/s, IOPS, µs) plus the job sizes and when it ran, or
    ``{"skipped": why}``."""
    params = params or FioParams.for_mode(mode == "quick")
    started = time.time_ns()
    result, skipped = run_fio_baselines(directory, params, progress=progress)
    base: dict[str, Any] = {"mode": mode, "directory": str(directory), "measured_at_ns": started,
                            "params": dataclasses.asdict(params)}
    if result is None:
        return {**base, "skipped": skipped}
    return {**base, **result.as_dict(), "duration_s": round((time.time_ns() - started) / 1e9, 3)}


@click.command()
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--full", is_flag=True, help="The full-size jobs (1 GiB sequential write, 5 s jobs); default quick.")
@click.option("--run", "run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Store the result in this run's meta.json (key \"fio\").")
def main(directory: Path, full: bool, run_dir: Path | None) -> None:
    """Measure the fio baseline of the filesystem holding DIRECTORY."""
    result = fio_baseline(directory, "full" if full else "quick", progress=lambda m: click.echo(m, err=True))
    if run_dir is not None:
        RunRecord.open(run_dir).update_meta(fio=result)
    click.echo(json.dumps(result, indent=2))
    sys.exit(1 if "skipped" in result else 0)


if __name__ == "__main__":
    main()
