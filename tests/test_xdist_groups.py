"""tests/xdist_groups.py and the hooks in tests/conftest.py: a group's tests run on one pytest-xdist worker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests import xdist_groups

REPO = Path(__file__).resolve().parents[1]

CONFTEST = """
from tests.conftest import (pytest_collection_modifyitems, pytest_configure, pytest_unconfigure,
                            pytest_xdist_make_scheduler)
"""

TESTS = """
import os
import time

import pytest

def note(name):
    with open(os.path.join(os.environ["NOTES"], name), "w") as f:
        f.write(os.environ.get("PYTEST_XDIST_WORKER", "main"))

@pytest.mark.xdist_group("g")
@pytest.mark.parametrize("i", range(6))
def test_grouped(i):
    time.sleep(0.2)
    note(f"g{i}")

@pytest.mark.parametrize("i", range(6))
def test_free(i):
    time.sleep(0.2)
    note(f"f{i}")
"""


def test_write_and_read_groups(tmp_path: Path, monkeypatch) -> None:
    class Item:
        def __init__(self, nodeid: str, *groups: str) -> None:
            self.nodeid = nodeid
            self._marks = [type("M", (), {"args": (g,), "kwargs": {}})() for g in groups]

        def iter_markers(self, name: str):
            return iter(self._marks)

    monkeypatch.setenv(xdist_groups.GROUPS_DIR_ENV, str(tmp_path))
    items = [Item("a.py::t1", "machine"), Item("a.py::t2"), Item("b.py::t3", "y", "x")]
    xdist_groups.write_groups(items, "gw0")  # type: ignore[arg-type]
    xdist_groups.write_groups(items[:1], "gw1")  # type: ignore[arg-type]
    assert xdist_groups.read_groups(tmp_path) == {"a.py::t1": "machine", "b.py::t3": "x_y"}
    assert not list(tmp_path.glob("*.tmp"))


def test_a_groups_tests_run_on_one_worker(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "conftest.py").write_text(CONFTEST)
    (project / "test_groups.py").write_text(TESTS)
    notes = tmp_path / "notes"
    notes.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "NOTES": str(notes)}
    env.pop(xdist_groups.GROUPS_DIR_ENV, None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist",
                           "loadgroup", "--rootdir", str(project), "-c", os.devnull, str(project)],
                          cwd=project, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    workers = {p.name: p.read_text() for p in notes.iterdir()}
    assert len(workers) == 12
    assert len({workers[f"g{i}"] for i in range(6)}) == 1  # the group on one worker
    assert len(set(workers.values())) == 2  # and the run still used both
