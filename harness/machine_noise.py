"""The machine's noise at the time of a run of the main job: the load average and a quick fio baseline of the
runs' filesystem, before the experiments and after them, so a reader of the claims page can tell a slow
machine from a slow broker.

``python -m harness.machine_noise RUNS_DIR --label before|after`` appends one JSON line to
``RUNS_DIR/machine_noise.jsonl``: ``{"label", "ts_ns", "loadavg": [1, 5, 15 min], "cpus", "fio": {...}}`` (fio as
``harness.fio_baseline`` measures it, or ``{"skipped": why}``). The claims page (spark_reports.site) shows them.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import click

from harness.fio_baseline import fio_baseline
from harness.records.noise import append


def sample(directory: Path, label: str, with_fio: bool = True) -> dict[str, Any]:
    """One sample of the machine's noise; fio measures the filesystem holding ``directory``."""
    load = os.getloadavg()
    fio = fio_baseline(directory, "quick") if with_fio else {"skipped": "not asked for"}
    return {"label": label, "ts_ns": time.time_ns(), "loadavg": [round(x, 2) for x in load],
            "cpus": os.cpu_count() or 0, "fio": fio}


@click.command()
@click.argument("runs_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--label", required=True, help="What this sample is, e.g. before or after.")
@click.option("--no-fio", is_flag=True, help="The load average only.")
def main(runs_dir: Path, label: str, no_fio: bool) -> None:
    """Sample the load average and a quick fio baseline into RUNS_DIR/machine_noise.jsonl."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    entry = sample(runs_dir, label, with_fio=not no_fio)
    path = append(runs_dir, entry)
    click.echo(f"{path}: {json.dumps(entry)}")


if __name__ == "__main__":
    main()
