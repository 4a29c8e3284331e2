"""Which implementation of the put path's hot functions runs: the compiled one (Cython) or pure Python.

The pure-Python functions in ``record``, ``message`` and ``message_batch`` are the reference. Beside some of
them sits an optional Cython module (``_record_c``, ``_message_c``, ``_message_batch_c``, ``_index_c`` (the
index's key hashes and entry linking; java_hash and store/index_file use it), ``_frame_c`` (the remoting
decoder's common case: a whole frame with a JSON header; remoting/codec uses it); the ``.pyx`` next to
this file), built by ``scripts/setup.sh`` (``scripts/build_compiled.py``) when a C compiler is present. The
owning module asks ``load`` for its compiled twin at import time and rebinds its names to it when there is
one; every bad input the compiled function does not handle itself is handed to the pure one, so both raise
the same exceptions (tests/common/test_compiled.py checks it with hypothesis).

``RMQ_PURE_PYTHON=1`` in the environment forces the pure path (read once, at import). ``runtime_info`` says
which path this process runs; the broker logs it at start.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Final

ENV_PURE: Final = "RMQ_PURE_PYTHON"
MODULES: Final = ("_record_c", "_message_c", "_message_batch_c", "_index_c", "_frame_c")

FORCED_PURE: Final = os.environ.get(ENV_PURE, "") not in ("", "0")
_loaded: dict[str, str] = {}  # module name -> "compiled" or why it is pure


def load(name: str) -> ModuleType | None:
    """The compiled module ``reference_broker.common.<name>``, or None (forced pure, or not built)."""
    if FORCED_PURE:
        _loaded[name] = f"pure ({ENV_PURE}=1)"
        return None
    try:
        mod = importlib.import_module(f"reference_broker.common.{name}")
    except ImportError:
        _loaded[name] = "pure (not built: scripts/build_compiled.py)"
        return None
    _loaded[name] = "compiled"
    return mod


def compiled_available(name: str) -> bool:
    """Whether the compiled module is built (whatever ``RMQ_PURE_PYTHON`` says): the tests' skip condition."""
    try:
        importlib.import_module(f"reference_broker.common.{name}")
    except ImportError:
        return False
    return True


def runtime_info() -> dict[str, str]:
    """``{"path": "compiled" | "pure" | "mixed", <module>: "compiled" | "pure (why)"}`` for the modules loaded
    so far (the owners load theirs at import)."""
    kinds = {v == "compiled" for v in _loaded.values()}
    path = "compiled" if kinds == {True} else "pure" if kinds <= {False} else "mixed"
    return {"path": path, **dict(sorted(_loaded.items()))}
