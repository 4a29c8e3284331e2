"""PySpark reports over run records (`runs/<run-id>/`, schema v1): offset overflow, latency, loss.

This package owns the consuming half of the run-record contract. It reads only files (meta.json,
events, metrics, faults.jsonl, check.json) and takes their layout from the one definition the writer uses
(``harness.records.schema``); it never imports the broker or the load generator, so its reports work on
records produced anywhere.
"""

from typing import Final

REPORT_NAMES: Final = ("offset-overflow", "latency", "loss", "flush-compare", "recovery", "queues",
                       "accumulation", "backlog-capacity", "transactions",
                       "filtering", "profiles")
