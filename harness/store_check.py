"""This module owns running the offline store check as a user runs it: ``python -m reference_broker admin
checkStore STORE --json``, its report summarised for run records (the chaos cells and the fuzzer use it; the
harness reads the store through the command, not the store's code).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CHECK_TIMEOUT_S = 900.0


def run_check_store(store_root: Path, conf: Mapping[str, str] | None = None,
                    timeout_s: float = CHECK_TIMEOUT_S) -> dict[str, Any]:
    """The check's summary: outcome, exit code, counts, problem totals and the first problems."""
    cmd = [sys.executable, "-m", "reference_broker", "admin", "checkStore", str(store_root), "--json"]
    slots, num = (conf or {}).get("maxHashSlotNum"), (conf or {}).get("maxIndexNum")
    if slots and num:
        cmd += ["--index-slots", slots, "--index-num", num]
    if (conf or {}).get("brokerRole") == "SLAVE":  # its log may end inside a record (a torn tail)
        cmd.append("--slave")
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
        report = json.loads(done.stdout)
    except (subprocess.TimeoutExpired, json.JSONDecodeError) as e:
        return {"outcome": "not_a_store", "exit_code": 2, "clean_stop": False, "counts": {}, "problem_totals": {},
                "problems": [f"checkStore gave no report: {type(e).__name__}: {e}"], "seconds": None}
    problems = [(f"{p['file']}: {p['reason']}" if p["offset"] < 0 else f"{p['file']} @ {p['offset']}: {p['reason']}")
                for p in report.get("problems", [])[:10]]
    return {"outcome": report["outcome"], "exit_code": done.returncode, "clean_stop": report["clean_stop"],
            "counts": report["counts"], "problem_totals": report["problem_totals"], "problems": problems,
            "seconds": report["seconds"]}
