"""Which tests share a pytest-xdist worker, and a scheduler that keeps each group on one worker.

``--dist loadgroup`` normally does this: each worker appends ``@group`` to the node ids of tests marked
``xdist_group`` and the scheduler keeps one suffix on one worker. With pytest 9.2 (node ids computed from a
structured id) pytest-xdist 3.8's suffix no longer reaches the node id, so every test was scheduled alone
and the groups were silently ignored. So the groups travel another way: each worker writes the groups of
the tests it collected to a file in a directory the controller names (``GROUPS_DIR_ENV``), and the
scheduler reads them when it splits the collection into work units. Node ids that do carry a suffix (an
xdist that works again) are still honoured.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

GROUPS_DIR_ENV = "RMQ_LAB_XDIST_GROUPS_DIR"


def group_of(item: pytest.Item) -> str | None:
    names = {str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")}
    return "_".join(sorted(names)) if names else None


def write_groups(items: list[pytest.Item], worker: str) -> None:
    """On a worker: record the group of every grouped test it collected."""
    directory = os.environ.get(GROUPS_DIR_ENV)
    if not directory:
        return
    groups = {item.nodeid: g for item in items if (g := group_of(item)) is not None}
    path = Path(directory) / f"groups-{worker}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(groups))
    tmp.replace(path)  # the controller never reads half a file


def read_groups(directory: Path) -> dict[str, str]:
    groups: dict[str, str] = {}
    for path in sorted(directory.glob("groups-*.json")):
        groups.update(json.loads(path.read_text()))
    return groups


def make_scheduler(config: pytest.Config, log: Any) -> Any:
    """A LoadGroupScheduling whose scopes come from the workers' group files."""
    from xdist.scheduler import LoadGroupScheduling

    class FileGroupScheduling(LoadGroupScheduling):  # type: ignore[misc]
        _groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:
                # Called once every worker has finished collecting, so every file is there.
                self._groups = read_groups(Path(os.environ[GROUPS_DIR_ENV]))
            group = self._groups.get(nodeid)
            if group is not None:
                return group  # as LoadGroupScheduling names a suffixed node id's scope
            scope: str = super()._split_scope(nodeid)
            return scope

    return FileGroupScheduling(config, log)
