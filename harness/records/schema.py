"""Run-record schema v1: the contract between the producing half (scenarios, chaos) and the reports.

This module owns the layout of ``runs/<run-id>/``, the column types of the event and metric tables, the
vocabularies (ops, outcomes, fault kinds, metric names) and the run id format. Bump ``SCHEMA_VERSION`` on any
change that an old reader would misread; optional columns may be added without a bump.

Layout::

    runs/<run-id>/                 run id: YYYYmmddTHHMMSS-<scenario>-<6 hex>  (UTC start time)
      meta.json                    see META_KEYS
      events/part-<worker>-<n>.parquet   one or more per worker (or events.jsonl at the run root, small runs)
      metrics/part-<source>-<n>.parquet  long format (or metrics.jsonl)
      faults.jsonl                 {"ts_ns", "kind", "target", "params": {...}} one per line
      check.json                   the checker's verdict (harness.checker): CHECK_KEYS, plus optional counts;
                                   among them acked_master_only (acknowledged only with code 11 or 12: stored
                                   on the master, not promised on a slave) and lost_promised (lost keys that
                                   had a plain SEND_OK, code 0: what a SYNC_MASTER group must never lose)

Events (one row per client operation)::

    column        type    meaning
    op            string  "send", "receive" (a delivery to a consumer), "ack" (offset commit; optional), "read"
                          (OPTIONAL, added in v1: the harness's final read of an acknowledged message no consumer
                          received, pulled back from the broker by its position after the run; harness.final_read.
                          A reader that ignores these rows judges the run as before they existed), "tx"
                          (OPTIONAL, added in v1: a transactional message's local decision, one row per decision
                          — the local transaction's, then each check-back answer; outcome "ok" = COMMIT_MESSAGE,
                          "fail" = ROLLBACK_MESSAGE, "unknown" = UNKNOW; the key's send row is its half message)
    key           string  unique message key chosen by the workload (e.g. "w0-000001"); the checker's identity
    topic         string
    queue_id      int32   -1 when unknown
    queue_offset  int64   -1 when unknown
    intended_ns   int64   wall-clock ns when the op was meant to start (open loop); = start_ns for closed loop
    start_ns      int64   wall-clock ns when the op started (time.time_ns anchor + perf_counter_ns delta)
    end_ns        int64   wall-clock ns when it ended (send: ack received; receive: delivered to the listener;
                          read: pulled back)
    outcome       string  "ok" (acknowledged / delivered), "fail" (definitely not stored; for a receive: the
                          listener declined it, e.g. RECONSUME_LATER), "unknown" (timeout, connection lost)
    code          int32   RocketMQ response code, -1 if none. An ok send keeps its SendStatus's: 0 SEND_OK,
                          10 FLUSH_DISK_TIMEOUT, 11 SLAVE_NOT_AVAILABLE, 12 FLUSH_SLAVE_TIMEOUT (11 and 12:
                          the master stored it, no slave acknowledged it)
    bytes         int32   message body size
    worker        string  locust worker / process id
    born_ns       int64   receive only: the message's born timestamp (ms x 1e6), else -1
    store_ns      int64   receive only: the message's store timestamp (ms x 1e6), else -1
    session       string  OPTIONAL (added in v1): receive only, the consumer session (one consumer instance's
                          lifetime, e.g. "c0#2" after a restart); "" = the worker is the session; "final-read"
                          on read rows; on tx rows who decided: "local" (the local
                          transaction) or "check" (an answer to a check-back)

Derived: send latency = end_ns - start_ns; publish delay = start_ns - intended_ns; end-to-end latency of a
receive = its end_ns - the matching send's start_ns (join on key), or end_ns - born_ns.

Metrics (long format, one row per sample)::

    column  type     meaning
    ts_ns   int64    wall-clock ns of the sample
    metric  string   one of MetricName
    value   float64
    label   string   backlog_msgs: consumer group; page_cache_bytes: file set; head_latency_ms: p50, p99 or
                     max (of the second before ts_ns); else ""

The backlog scenario's head readers (added in v1, optional): head_latency_ms and head_msgs per second from each
load process (metrics/part-head-<worker>-*), send-to-consume latency of a second consumer group that is never
paused; with ``--memory-max``, the broker's memory cgroup sampled by the controller (metrics/part-cgroup-*):
cgroup_cache_bytes, cgroup_usage_bytes, and broker_major_faults (majflt of /proc/PID/stat, cumulative).
"""

# pyarrow ships no type information; its names are Any here.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

import re
import secrets
import time
from enum import StrEnum
from typing import Final

import pyarrow as pa

SCHEMA_VERSION: Final = 1

EVENTS_SCHEMA: Final = pa.schema([
    pa.field("op", pa.string(), nullable=False),
    pa.field("key", pa.string(), nullable=False),
    pa.field("topic", pa.string(), nullable=False),
    pa.field("queue_id", pa.int32(), nullable=False),
    pa.field("queue_offset", pa.int64(), nullable=False),
    pa.field("intended_ns", pa.int64(), nullable=False),
    pa.field("start_ns", pa.int64(), nullable=False),
    pa.field("end_ns", pa.int64(), nullable=False),
    pa.field("outcome", pa.string(), nullable=False),
    pa.field("code", pa.int32(), nullable=False),
    pa.field("bytes", pa.int32(), nullable=False),
    pa.field("worker", pa.string(), nullable=False),
    pa.field("born_ns", pa.int64(), nullable=False),
    pa.field("store_ns", pa.int64(), nullable=False),
])
"""The required event columns, in file order."""

EVENTS_OPTIONAL_SCHEMA: Final = pa.schema([
    pa.field("session", pa.string(), nullable=False),
])
"""Optional event columns: a reader fills them with their default when a file lacks them."""

EVENTS_OPTIONAL_DEFAULTS: Final[dict[str, object]] = {"session": ""}

EVENTS_FULL_SCHEMA: Final = pa.schema(list(EVENTS_SCHEMA) + list(EVENTS_OPTIONAL_SCHEMA))
"""What the writer writes and what ``load_events`` returns."""

METRICS_SCHEMA: Final = pa.schema([
    pa.field("ts_ns", pa.int64(), nullable=False),
    pa.field("metric", pa.string(), nullable=False),
    pa.field("value", pa.float64(), nullable=False),
    pa.field("label", pa.string(), nullable=False),
])


class Op(StrEnum):
    SEND = "send"
    RECEIVE = "receive"
    ACK = "ack"
    READ = "read"
    TX = "tx"  # a transactional message's local decision (see the events table above)


class Outcome(StrEnum):
    OK = "ok"
    FAIL = "fail"
    UNKNOWN = "unknown"


class FaultKind(StrEnum):
    """Known fault kinds; faults.jsonl may name others (the set grows with chaos/)."""

    KILL9 = "kill9"
    POWER_LOSS = "power_loss"
    POWER_LOSS_TORN = "power_loss_torn"  # a power loss that also tears the last unflushed page
    DISK_FILL = "disk_fill"
    PAUSE = "pause"
    RESUME = "resume"
    PARTITION = "partition"
    HEAL = "heal"
    RESTART = "restart"
    # A broker group's master (chaos/replication.py): killed for good, or killed and its store deleted; the slave
    # is what remains. Their params carry the replication lag sampled just before.
    MASTER_KILL9 = "master_kill9"
    MASTER_DISK_DESTROYED = "master_disk_destroyed"
    MASTER_POWER_LOSS = "master_power_loss"  # the master's loop image crashed (chaos/replication.py)
    # The slave killed -9 (then restarted) or SIGSTOPped (then resumed) while the master lives on.
    SLAVE_KILL9 = "slave_kill9"
    SLAVE_PAUSED = "slave_paused"
    # A broker group cut by nftables on the lab network and healed (chaos/replication_partition.py): params carry
    # the cut and heal times, the lag at both and the answers heard meanwhile; a HEAL line follows.
    PARTITION_MASTER_SLAVE = "partition_master_slave"
    PARTITION_CLIENTS_MASTER = "partition_clients_master"


class MetricName(StrEnum):
    COMMITLOG_MAX_OFFSET = "commitlog_max_offset"
    COMMITLOG_FLUSHED_OFFSET = "commitlog_flushed_offset"
    DISPATCH_LAG_BYTES = "dispatch_lag_bytes"
    BACKLOG_MSGS = "backlog_msgs"
    DISK_USED_RATIO = "disk_used_ratio"
    BROKER_RSS_BYTES = "broker_rss_bytes"
    PAGE_CACHE_BYTES = "page_cache_bytes"
    SEND_TPS = "send_tps"
    CONSUME_TPS = "consume_tps"
    HEAD_LATENCY_MS = "head_latency_ms"
    HEAD_MSGS = "head_msgs"
    CGROUP_CACHE_BYTES = "cgroup_cache_bytes"
    CGROUP_USAGE_BYTES = "cgroup_usage_bytes"
    BROKER_MAJOR_FAULTS = "broker_major_faults"
    # The host's page cache and reclaim (harness/vm_stats.py): /proc/meminfo and /proc/vmstat, label "".
    HOST_DIRTY_BYTES = "host_dirty_bytes"
    HOST_WRITEBACK_BYTES = "host_writeback_bytes"
    VM_NR_DIRTY = "vm_nr_dirty"
    VM_NR_WRITEBACK = "vm_nr_writeback"
    VM_PGMAJFAULT = "vm_pgmajfault"
    VM_ALLOCSTALL = "vm_allocstall"


OPS: Final = frozenset(o.value for o in Op)
OUTCOMES: Final = frozenset(o.value for o in Outcome)

# meta.json: key -> accepted JSON types (None = null allowed). Extra keys are allowed.
META_KEYS: Final[dict[str, tuple[type | None, ...]]] = {
    "schema_version": (int,),
    "run_id": (str,),
    "scenario": (str,),
    "command": (list,),
    "started_at_ns": (int,),
    "ended_at_ns": (int, None),
    "broker": (dict,),
    "broker_impl": (str, None),
    "sysctl": (dict,),
    "host": (dict,),
    "fio": (dict, None),
    "git_rev": (str, None),
    "params": (dict,),
}
SYSCTL_KEYS: Final[dict[str, tuple[type | None, ...]]] = {
    "profile": (str, None), "applied": (bool,), "reason": (str, None), "values": (dict,),
}
HOST_KEYS: Final[dict[str, tuple[type | None, ...]]] = {
    "cores": (int,), "ram_bytes": (int,), "kernel": (str,), "python": (str,), "disk": (dict,),
}
FAULT_KEYS: Final[dict[str, tuple[type | None, ...]]] = {
    "ts_ns": (int,), "kind": (str,), "target": (str,), "params": (dict,),
}
CHECK_KEYS: Final[tuple[str, ...]] = (
    "schema_version", "attempted", "acknowledged", "failed", "unknown", "lost", "lost_bytes", "unexpected",
    "duplicated", "recovered", "order_violations", "samples", "valid", "allow_loss",
)

SCENARIO_RE: Final = re.compile(r"[A-Za-z0-9_.]+(?:-[A-Za-z0-9_.]+)*")
RUN_ID_RE: Final = re.compile(r"(?P<ts>\d{8}T\d{6})-(?P<scenario>.+)-(?P<tag>[0-9a-f]{6})")
WORKER_FILE_RE: Final = re.compile(r"[^A-Za-z0-9_.]")

META_FILE: Final = "meta.json"
EVENTS_DIR: Final = "events"
EVENTS_JSONL: Final = "events.jsonl"
METRICS_DIR: Final = "metrics"
METRICS_JSONL: Final = "metrics.jsonl"
FAULTS_FILE: Final = "faults.jsonl"
CHECK_FILE: Final = "check.json"
PART_RE: Final = re.compile(r"part-(?P<name>.+)-(?P<n>\d+)\.parquet")


def new_run_id(scenario: str, now_ns: int | None = None) -> str:
    """``YYYYmmddTHHMMSS-<scenario>-<6 hex>``, the time in UTC so ids sort by start across hosts."""
    if not SCENARIO_RE.fullmatch(scenario):
        raise ValueError(f"scenario name {scenario!r} must be letters, digits, '_', '.' and inner '-'")
    secs = (time.time_ns() if now_ns is None else now_ns) // 1_000_000_000
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(secs))
    return f"{stamp}-{scenario}-{secrets.token_hex(3)}"


def file_safe(name: str) -> str:
    """A worker or source id made safe for a file name ('-' too, so ``part-<name>-<n>`` splits unambiguously)."""
    return WORKER_FILE_RE.sub("_", name) or "_"
