#!/usr/bin/env python3
"""Build the optional compiled twins of the put path's hot functions (reference_broker/common/_*_c.pyx) in
place, with Cython and the system's C compiler. Run by scripts/setup.sh; safe to re-run (only what changed is
rebuilt). Without a compiler or Cython it prints why and exits 0: the pure-Python path then runs
(reference_broker/common/compiled.py). ``--clean`` removes the built modules and the generated C."""

from __future__ import annotations

import shutil
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted((ROOT / "reference_broker" / "common").glob("_*_c.pyx"))


def clean() -> None:
    for pyx in SOURCES:
        for built in [pyx.with_suffix(".c"), *pyx.parent.glob(pyx.stem + ".*.so")]:
            built.unlink(missing_ok=True)
            print(f"[build_compiled] removed {built.relative_to(ROOT)}")


def main() -> int:
    if "--clean" in sys.argv[1:]:
        clean()
        return 0
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        print(f"[build_compiled] no C compiler ({cc}): skipped; the pure-Python path runs")
        return 0
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").exists():
        print(f"[build_compiled] no Python headers ({include}/Python.h; Debian: python3-dev): skipped; "
              "the pure-Python path runs")
        return 0
    try:
        from Cython.Build import cythonize
        from setuptools import Extension
        from setuptools.dist import Distribution
    except ImportError:
        print("[build_compiled] Cython is not installed (pip install -e '.[dev]'): skipped; the pure-Python path runs")
        return 0
    started = time.monotonic()
    flags = ["-O2", "-Wno-maybe-uninitialized"]
    exts = [Extension(f"reference_broker.common.{p.stem}", [str(p.relative_to(ROOT))], extra_compile_args=flags)
            for p in SOURCES]
    dist = Distribution({"ext_modules": cythonize(exts, quiet=True, compiler_directives={"language_level": 3})})
    cmd = dist.get_command_obj("build_ext")
    cmd.inplace = True
    cmd.build_temp = str(ROOT / "build" / "compiled")
    cmd.ensure_finalized()
    cmd.run()
    names = ", ".join(p.stem for p in SOURCES)
    print(f"[build_compiled] built {names} in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    import os

    os.chdir(ROOT)
    sys.exit(main())
