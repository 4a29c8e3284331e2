"""scripts/setup.sh's choice of interpreter: the .venv is made from a Python >= 3.11 whose executable is not
linked against a shared libpython when the machine has one (BENCHMARKS.md, issue 23, session 35: ~15 % less broker
CPU per message), and its test of "static" asks the interpreter for its executable (a pyenv shim is a script)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SETUP = REPO / "scripts" / "setup.sh"


def _functions() -> str:
    """setup.sh's py_ok and py_static, as the script defines them."""
    text = SETUP.read_text()
    start = text.index("py_ok() {")
    end = text.index('PY=""', start)
    return text[start:end]


def _static(python: str) -> bool:
    out = subprocess.run(["bash", "-c", _functions() + '\npy_static "$1"', "_", python], capture_output=True)
    return out.returncode == 0


def _linked_to_libpython(executable: str) -> bool:
    ldd = subprocess.run(["ldd", executable], capture_output=True, text=True)
    return "libpython" in ldd.stdout


@pytest.mark.skipif(shutil.which("ldd") is None, reason="no ldd on this machine")
def test_static_means_no_shared_libpython_and_a_shim_is_judged_by_its_target(tmp_path: Path) -> None:
    base = os.path.realpath(sys._base_executable)  # the interpreter the .venv was made from
    assert _static(base) == (not _linked_to_libpython(base))
    shim = tmp_path / "python-shim"  # a script that runs the interpreter, as pyenv's shims do
    shim.write_text(f'#!/bin/sh\nexec "{base}" "$@"\n')
    shim.chmod(0o755)
    assert _static(str(shim)) == _static(base)
    assert not _static(str(tmp_path / "no-such-python"))


@pytest.mark.skipif(bool(os.environ.get("LAB_PYTHON")), reason="LAB_PYTHON chose the interpreter")
def test_the_venv_is_made_from_a_static_interpreter_when_there_is_one() -> None:
    candidates = [c for c in ("/usr/bin/python3.11", shutil.which("python3.11"), shutil.which("python3")) if c]
    usable = [c for c in candidates
              if subprocess.run([c, "-c", "import sys; sys.exit(sys.version_info < (3, 11))"]).returncode == 0]
    statics = [c for c in usable if _static(c)]
    if not statics:
        pytest.skip("no Python >= 3.11 here is statically linked: setup falls back to the first one")
    want = subprocess.run([statics[0], "-c", "import os, sys; print(os.path.realpath(sys.executable))"],
                          capture_output=True, text=True).stdout.strip()
    assert os.path.realpath(sys._base_executable) == want, "scripts/setup.sh remakes a .venv made from another"
