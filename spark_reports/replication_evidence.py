"""The replication claim (docs/claims.md, ``replication-master-loss``) judged from the loss report's per-run rows
of the broker-group runs (chaos/replication.py) whose master lost its disk.

SYNC_MASTER is judged on the sends it promised: a plain SEND_OK means the slave held the message too. A send
answered FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE was acknowledged but stored on the master alone, so its
loss with the master's disk breaks no promise; it is counted apart. ASYNC_MASTER promises nothing about the
slave, so it is judged on the share of all acknowledged sends the slave still served.

"No promised send lost" says little when few sends were promised just before the master was lost: a
SYNC_MASTER answers SLAVE_NOT_AVAILABLE until its slave has reconnected after a restart, so a short run may hold
almost none. The experiment records the SEND_OK answers of the final cycle's window (faults.jsonl
``promised_in_window``); below ``PROMISED_MIN`` over the SYNC_MASTER runs the verdict is "inconclusive", not
held (a lost promise is "not held" whatever the count).
"""

from __future__ import annotations

from typing import Final

from spark_reports.claims import ClaimId, Finding, Verdict
from spark_reports.run_loss import RunLoss

SYNC_MASTER: Final = "SYNC_MASTER"
ASYNC_MASTER: Final = "ASYNC_MASTER"
DISK_DESTROYED: Final = "master_disk_destroyed"
# The seed's "about 99 %" read as at least 99 % of the acknowledged sends kept, over the ASYNC_MASTER runs.
ASYNC_KEPT_MIN: Final = 0.99
# SEND_OK answers in the final cycles' windows of the SYNC_MASTER runs, summed, needed to call the claim held.
PROMISED_MIN: Final = 500
EXPERIMENT: Final = "python -m chaos replication --replication sync,async --faults master_disk_destroyed"


def disk_loss_runs(losses: list[RunLoss], role: str) -> list[RunLoss]:
    """The runs of one master brokerRole that ended with the master's store destroyed (the seed's lost disk; a
    master that was only killed keeps its disk, and is not this claim's evidence)."""
    return [r for r in losses if r.replication == role and DISK_DESTROYED in r.fault.split("+")]


def _runs(n: int) -> str:
    return f"{n} run{'s' if n != 1 else ''}"


def _lag_text(rows: list[RunLoss]) -> str:
    lags = sorted(r.replication_lag_bytes for r in rows if r.replication_lag_bytes is not None)
    if not lags:
        return "lag at the crash not recorded"
    span = f"{lags[0]:,} B" if lags[0] == lags[-1] else f"{lags[0]:,}–{lags[-1]:,} B"
    return f"slave {span} behind at the crash"


def replication_master_loss(losses: list[RunLoss], report: str) -> Finding:
    """Held when no SYNC_MASTER disk-loss run lost a promised send and the ASYNC_MASTER ones kept ≥ 99 %."""
    claim = ClaimId.REPLICATION_MASTER_LOSS
    sync, async_ = disk_loss_runs(losses, SYNC_MASTER), disk_loss_runs(losses, ASYNC_MASTER)
    ids = tuple(r.run_id for r in (*sync, *async_))
    missing = [role for role, rows in ((SYNC_MASTER, sync), (ASYNC_MASTER, async_))
               if sum(r.acknowledged for r in rows) == 0]
    if missing:
        return Finding(claim, Verdict.NOT_MEASURED, f"no {' or '.join(missing)} run", report, ids,
                       f"No {' and no '.join(missing)} run with an acknowledged send whose master lost its disk "
                       f"({EXPERIMENT}); both modes are needed to judge the claim.")

    s_acked, s_master_only = sum(r.acknowledged for r in sync), sum(r.acked_master_only for r in sync)
    s_lost, s_promised_lost = sum(r.lost for r in sync), sum(r.lost_promised for r in sync)
    a_acked, a_lost = sum(r.acknowledged for r in async_), sum(r.lost for r in async_)
    a_kept = (a_acked - a_lost) / a_acked
    worst = min(async_, key=lambda r: (r.acknowledged - r.lost) / r.acknowledged if r.acknowledged else 1.0)
    worst_kept = (worst.acknowledged - worst.lost) / worst.acknowledged if worst.acknowledged else 1.0

    windows = [r.promised_final_window for r in sync if r.promised_final_window is not None]
    s_window = sum(windows)
    window_text = (f"{s_window:,} promised in the final cycles' windows" if windows
                   else "promised sends in the final cycles' windows not recorded")
    sync_text = (f"SYNC_MASTER: {s_promised_lost:,} of {s_acked - s_master_only:,} promised (SEND_OK) lost "
                 f"({_runs(len(sync))}; {window_text}; {_lag_text(sync)})")
    if s_master_only:
        sync_text += (f"; apart, {s_master_only:,} answered FLUSH_SLAVE_TIMEOUT/SLAVE_NOT_AVAILABLE, of which "
                      f"{s_lost - s_promised_lost:,} lost")
    async_text = (f"ASYNC_MASTER: {100 * a_kept:.2f} % of {a_acked:,} acknowledged kept, {a_lost:,} lost "
                  f"({_runs(len(async_))}; {_lag_text(async_)}; lowest run {100 * worst_kept:.2f} %)")
    problems = []
    if s_promised_lost:
        problems.append("SYNC_MASTER lost promised sends in "
                        + ", ".join(r.run_id for r in sync if r.lost_promised))
    if a_kept < ASYNC_KEPT_MIN:
        problems.append(f"ASYNC_MASTER kept under {100 * ASYNC_KEPT_MIN:.0f} %")
    inconclusive = not problems and s_window < PROMISED_MIN
    measured = (f"{sync_text}. {async_text}" + (f". Not held: {'; '.join(problems)}" if problems else "")
                + (f". Inconclusive: fewer than {PROMISED_MIN:,} promised sends just before the master was lost"
                   if inconclusive else ""))
    detail = (f"Held when, in every SYNC_MASTER run whose master's store was destroyed ({DISK_DESTROYED}), no "
              "send answered with a plain SEND_OK was lost (check.json lost_promised; sends answered "
              "FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE were stored on the master only and are counted apart), "
              f"and the ASYNC_MASTER runs kept at least {100 * ASYNC_KEPT_MIN:.0f} % of their acknowledged sends "
              "(the seed's \"about 99 %\"; acknowledged − lost, over all runs), read from the slave after the "
              "master was lost. The lag is the master's commit-log end minus the slave's, sampled just before "
              "the fault (faults.jsonl lag_bytes): what ASYNC_MASTER can lose depends on it, i.e. on the load. "
              "Runs whose master was only killed (master_kill9) keep their disk and are not used. At least "
              f"{PROMISED_MIN:,} sends answered SEND_OK in the final cycles' windows of the SYNC_MASTER runs "
              "(from the restarted master's first SEND_OK to the fault; faults.jsonl promised_in_window) are "
              "needed to call it held: fewer is \"inconclusive\".")
    invalid = [r.run_id for r in (*sync, *async_) if not r.valid]
    if invalid:
        detail += f" The checker marked these runs invalid (see the per-run table): {', '.join(invalid)}."
    figures = {"sync_runs": float(len(sync)), "sync_acknowledged": float(s_acked),
               "sync_acked_master_only": float(s_master_only), "sync_lost_promised": float(s_promised_lost),
               "sync_promised_final_window": float(s_window),
               "async_runs": float(len(async_)), "async_acknowledged": float(a_acked), "async_lost": float(a_lost),
               "async_kept_share": a_kept}
    lags = [r.replication_lag_bytes for r in async_ if r.replication_lag_bytes is not None]
    if lags:
        figures["async_lag_max_bytes"] = float(max(lags))
    verdict = Verdict.NOT_HELD if problems else Verdict.INCONCLUSIVE if inconclusive else Verdict.HELD
    return Finding(claim, verdict, measured, report, ids, detail, figures)
