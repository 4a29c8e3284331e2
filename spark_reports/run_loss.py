"""Per-run loss rows: a run's check.json counts beside the faults it went through (faults.jsonl) and the
unflushed window at each power loss, and their sums per flush mode, fault and sysctl profile.

A broker group's runs (chaos/replication.py) add the master's brokerRole (meta.json), the checker's
``acked_master_only`` and ``lost_promised``, and the replication lag sampled before the master was lost.

The loss report shows and judges them; the flush-compare report shows the same headline table per flush mode,
and the broker-group runs' per replication mode.
"""

from dataclasses import asdict, dataclass
from typing import Any, Final

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

from spark_reports.run_records import RunInfo, read_check, read_faults, read_passed_over

NO_FAULT: Final = "none"
KILL9: Final = "kill9"
POWER_LOSS: Final = "power_loss"
POWER_LOSS_TORN: Final = "power_loss_torn"  # a power loss that also tears a page: a power loss all the same
POWER_LOSSES: Final = frozenset({POWER_LOSS, POWER_LOSS_TORN})
DISK_FILL: Final = "disk_fill"
# The faults that end a broker group's master (harness FaultKind): the run is then read from the slave.
MASTER_FAULTS: Final = frozenset({"master_kill9", "master_disk_destroyed", "master_power_loss"})
SYNC_FLUSH: Final = "SYNC_FLUSH"
ASYNC_FLUSH: Final = "ASYNC_FLUSH"
CRASHES: Final = (KILL9, POWER_LOSS, POWER_LOSS_TORN)  # the "abnormal shutdowns" of the seed's flush-mode claims
# faults.jsonl entries that end a fault rather than inject one (harness FaultKind RESTART, RESUME, HEAL and
# chaos/disk_fill.py's disk_free): they do not name what the run was exposed to.
NOT_FAULTS: Final = frozenset({"restart", "resume", "heal", "disk_free"})


@dataclass(frozen=True)
class RunLoss:
    run_id: str
    flush_mode: str
    fault: str
    profile: str
    attempted: int
    acknowledged: int
    lost: int
    lost_bytes: int
    unflushed_bytes: int | None
    duplicated: int
    recovered: int
    unexpected: int
    valid: bool
    unread: int = 0  # acknowledged, never delivered, but the final read found it stored (harness.final_read)
    replication: str = "ASYNC_MASTER"  # the master's brokerRole
    acked_master_only: int = 0  # acknowledged only with FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE
    lost_promised: int = 0  # lost keys that had a plain SEND_OK
    replication_lag_bytes: int | None = None  # master − slave commit-log end just before the master was lost
    # Sends answered a plain SEND_OK in the final cycle's window (from the last restart's first SEND_OK to the
    # master fault that ended the run): what a SYNC_MASTER promised just before it was lost. None: not recorded.
    promised_final_window: int | None = None
    # Acknowledged, kept by the store, never delivered to the live group, whose position was past them after a
    # power cut (chaos.json; docs/findings.md F14). Not lost: the run's final read found them.
    passed_over: int = 0


_SCHEMA = StructType([
    StructField("run_id", StringType(), False),
    StructField("flush_mode", StringType(), False),
    StructField("fault", StringType(), False),
    StructField("profile", StringType(), False),
    *(StructField(name, LongType(), name == "unflushed_bytes")
      for name in ("attempted", "acknowledged", "lost", "lost_bytes", "unflushed_bytes", "duplicated",
                   "recovered", "unexpected")),
    StructField("valid", BooleanType(), False),
    StructField("unread", LongType(), False),
    StructField("replication", StringType(), False),
    StructField("acked_master_only", LongType(), False),
    StructField("lost_promised", LongType(), False),
    StructField("replication_lag_bytes", LongType(), True),
    StructField("promised_final_window", LongType(), True),
    StructField("passed_over", LongType(), False),
])


def fault_label(faults: list[dict[str, Any]]) -> str:
    """The run's fault kinds, sorted and joined with "+" ("none" for a run without faults); entries that end a
    fault (restart, resume, heal, disk_free) are not faults."""
    kinds = sorted({str(f.get("kind", "?")) for f in faults} - NOT_FAULTS)
    return "+".join(kinds) if kinds else NO_FAULT


def power_loss_windows(faults: list[dict[str, Any]]) -> list[int]:
    """Per power-loss fault, the unflushed window at the crash in commit-log bytes: the fault's own
    ``unflushed_bytes`` (chaos: written bound − flushed offset, counting sends acknowledged after the offsets
    were sampled) when given, else written_offset − flushed_offset. A negative value is no window: the broker
    reported no flushed offset (Apache RocketMQ 4.9.8), and the crash is left out."""
    windows = []
    for fault in faults:
        params = fault.get("params") or {}
        if fault.get("kind") not in POWER_LOSSES:
            continue
        if "unflushed_bytes" in params:
            window = int(params["unflushed_bytes"])
        elif "written_offset" in params and "flushed_offset" in params and int(params["flushed_offset"]) >= 0:
            window = int(params["written_offset"]) - int(params["flushed_offset"])
        else:
            continue
        if window >= 0:
            windows.append(window)
    return windows


def unflushed_bytes(faults: list[dict[str, Any]]) -> int | None:
    """Sum of the power-loss windows; None when no power loss was injected."""
    windows = power_loss_windows(faults)
    return sum(windows) if windows else None


def replication_lag(faults: list[dict[str, Any]]) -> int | None:
    """The lag sampled before the master fault that ended the run (its params ``lag_bytes``); None without one
    or when it could not be sampled (-1)."""
    lags = [int(f["params"]["lag_bytes"]) for f in faults
            if f.get("kind") in MASTER_FAULTS and "lag_bytes" in (f.get("params") or {})]
    return lags[-1] if lags and lags[-1] >= 0 else None


def promised_final_window(faults: list[dict[str, Any]]) -> int | None:
    """``promised_in_window`` of the master fault that ended the run (chaos/replication.py); None without one."""
    counts = [int(f["params"]["promised_in_window"]) for f in faults
              if f.get("kind") in MASTER_FAULTS and "promised_in_window" in (f.get("params") or {})]
    return counts[-1] if counts else None


def lost_master(loss: RunLoss) -> bool:
    """Whether the run ended with its group's master lost (so it was read from the slave)."""
    return bool(set(loss.fault.split("+")) & MASTER_FAULTS)


def crash_counts(faults: list[dict[str, Any]]) -> dict[str, int]:
    """How many kill -9 and power-loss crashes the run went through, by kind."""
    out: dict[str, int] = {}
    for fault in faults:
        kind = str(fault.get("kind"))
        if kind in CRASHES:
            out[kind] = out.get(kind, 0) + 1
    return out


def run_loss(run: RunInfo) -> RunLoss | None:
    check = read_check(run)
    if check is None:
        return None
    faults = read_faults(run)

    def count(key: str) -> int:
        return int(check.get(key) or 0)

    return RunLoss(
        run_id=run.run_id, flush_mode=run.flush_mode, fault=fault_label(faults), profile=run.sysctl_profile,
        attempted=count("attempted"), acknowledged=count("acknowledged"), lost=count("lost"),
        lost_bytes=count("lost_bytes"), unflushed_bytes=unflushed_bytes(faults), duplicated=count("duplicated"),
        recovered=count("recovered"), unexpected=count("unexpected"), valid=bool(check.get("valid", False)),
        unread=count("unread"), replication=run.replication_mode, acked_master_only=count("acked_master_only"),
        lost_promised=count("lost_promised"), replication_lag_bytes=replication_lag(faults),
        promised_final_window=promised_final_window(faults), passed_over=read_passed_over(run),
    )


@dataclass(frozen=True)
class GroupLoss:
    flush_mode: str
    fault: str
    profile: str
    runs: int
    acknowledged: int
    lost: int
    lost_bytes: int
    unflushed_bytes: int | None
    duplicated: int
    recovered: int
    unexpected: int
    invalid_runs: int
    unread: int = 0
    replication: str = "(all)"
    acked_master_only: int = 0
    lost_promised: int = 0
    passed_over: int = 0


def grouped(spark: SparkSession, losses: list[RunLoss], keys: tuple[str, ...]) -> list[GroupLoss]:
    """Sum the per-run counts over ``keys`` (a subset of flush_mode, replication, fault, profile) in Spark."""
    df = spark.createDataFrame([asdict(x) for x in losses], _SCHEMA)
    sums = [F.sum(c).alias(c) for c in ("acknowledged", "lost", "lost_bytes", "unflushed_bytes", "duplicated",
                                         "recovered", "unexpected", "unread", "acked_master_only",
                                         "lost_promised", "passed_over")]
    agg = df.groupBy(*keys).agg(F.count(F.lit(1)).alias("runs"), *sums,
                                F.sum(F.when(F.col("valid"), 0).otherwise(1)).alias("invalid_runs"))
    rows = agg.orderBy(*keys).collect()
    return [GroupLoss(
        flush_mode=r["flush_mode"], fault=r["fault"], profile=r["profile"] if "profile" in keys else "(all)",
        runs=int(r["runs"]), acknowledged=int(r["acknowledged"]), lost=int(r["lost"]), lost_bytes=int(r["lost_bytes"]),
        unflushed_bytes=None if r["unflushed_bytes"] is None else int(r["unflushed_bytes"]),
        duplicated=int(r["duplicated"]), recovered=int(r["recovered"]), unexpected=int(r["unexpected"]),
        invalid_runs=int(r["invalid_runs"]), unread=int(r["unread"]),
        replication=r["replication"] if "replication" in keys else "(all)",
        acked_master_only=int(r["acked_master_only"]), lost_promised=int(r["lost_promised"]),
        passed_over=int(r["passed_over"])) for r in rows]


def headline_cell(group: GroupLoss) -> str:
    kept = group.acknowledged - group.lost
    share = f"{100 * kept / group.acknowledged:.4g} %" if group.acknowledged else "–"
    runs = f"{group.runs} run{'s' if group.runs != 1 else ''}"
    if group.lost == 0:
        return f"all {group.acknowledged:,} acknowledged kept ({runs})"
    return f"{kept:,} of {group.acknowledged:,} kept ({share}); {group.lost:,} lost, {group.lost_bytes:,} B ({runs})"


def headline_table(by_mode_fault: list[GroupLoss]) -> tuple[list[str], list[tuple[str, ...]]]:
    """The fault columns and one row per flush mode of "what each flush mode keeps under each fault"."""
    modes = sorted({g.flush_mode for g in by_mode_fault})
    faults = sorted({g.fault for g in by_mode_fault})
    cells = {(g.flush_mode, g.fault): headline_cell(g) for g in by_mode_fault}
    return faults, [(mode, *(cells.get((mode, fault), "no runs") for fault in faults)) for mode in modes]


def replication_cell(group: GroupLoss) -> str:
    """``headline_cell`` naming, apart, the lost sends that had a plain SEND_OK (the ones a SYNC_MASTER's slave
    must hold) and the sends acknowledged on the master only (FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE)."""
    text = headline_cell(group)
    if group.lost:
        text += f"; {group.lost_promised:,} of the lost had a SEND_OK"
    if group.acked_master_only:
        text += f"; {group.acked_master_only:,} acknowledged on the master only"
    return text


def replication_table(by_role_fault: list[GroupLoss]) -> tuple[list[str], list[tuple[str, ...]]]:
    """The fault columns and one row per replication mode (and flush mode) of the broker-group runs, from groups
    over flush_mode, replication and fault."""
    def row(g: GroupLoss) -> str:
        return f"{g.replication} ({g.flush_mode})"

    labels = sorted({row(g) for g in by_role_fault})
    faults = sorted({g.fault for g in by_role_fault})
    cells = {(row(g), g.fault): replication_cell(g) for g in by_role_fault}
    return faults, [(label, *(cells.get((label, fault), "no runs") for fault in faults)) for label in labels]
