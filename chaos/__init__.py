"""Chaos experiments against the reference broker, each a real fault on real processes and real storage, each
ending in a run record (schema v1) and a Jepsen-style verdict:

- ``kill9``: SIGKILL the broker under load, restart it on the same store (chaos.kill9);
- ``power_loss`` / ``power_loss_torn``: SIGKILL, then copy the loop-mounted disk image while the page cache
  still holds the unflushed pages, restart on the copy; optionally tear pages past the flushed offset
  (chaos.power_loss, chaos.loopfs, chaos.torn);
- ``disk_fill``: fill a small filesystem past 90 %, ENOSPC on a new commit-log file, cleaning at the
  watermarks (chaos.disk_fill);
- ``pause``: SIGSTOP / SIGCONT (chaos.pause);
- ``master_kill9`` / ``master_disk_destroyed``: a master and its slave; the master is killed for good, or
  killed and its store deleted, and the topic is drained from the slave (chaos.replication; the verdict per
  replication mode in chaos.replication_verdict, ``python -m chaos replication``).

``python -m chaos matrix`` runs flush modes x faults x sysctl profiles and prints the summary table; ``--gate``
turns it into the ``tox -e crash`` check (chaos.matrix, chaos.verdict). ``python -m chaos cleanup`` undoes an
interrupted run's processes, mounts and loop devices (chaos.leftovers). Deliberate store damage for recovery
tests is in chaos.damage; the recovery-time benchmark in chaos.recovery_bench.

Library use::

    from chaos import ExperimentSpec, FaultName, FlushMode, make_fault, run_experiment
    result = run_experiment(ExperimentSpec(FaultName.KILL9, FlushMode.ASYNC, cycles=5), make_fault(FaultName.KILL9))
    result.ok, result.summary()
"""

from chaos.experiment import CycleRecord, ExperimentResult, ExperimentSpec, Fault, FaultName, FlushMode, run_experiment
from chaos.load import LoadSpec
from chaos.matrix import MatrixSpec, format_table, gate_failures, make_fault, run_matrix, summary_rows

__all__ = [
    "CycleRecord",
    "ExperimentResult",
    "ExperimentSpec",
    "Fault",
    "FaultName",
    "FlushMode",
    "LoadSpec",
    "MatrixSpec",
    "format_table",
    "gate_failures",
    "make_fault",
    "run_experiment",
    "run_matrix",
    "summary_rows",
]
