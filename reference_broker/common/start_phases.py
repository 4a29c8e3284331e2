"""The store's start, timed phase by phase, so that "recovery work grows with the unflushed tail, not with the
log" is judged from the phase that does that work rather than from process start to the boot line (which also
holds the interpreter's start, the imports, the configs and the listening socket).

Not a RocketMQ format: 4.9.8 logs its load and recover steps without durations. The phases are reported in the
runtime info (``storeStartPhasesMs``: ``name:ms`` pairs in start order) and logged once the store is started.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

# The phases, in the order a start runs them (DefaultMessageStore.load / recover / start).
LOAD_COMMIT_LOG = "loadCommitLog"  # map the log's files
LOAD_CONSUME_QUEUES = "loadConsumeQueues"  # map every consume queue's files
LOAD_INDEX = "loadIndex"  # open the index files (a dirty one after a crash is deleted)
RECOVER_CONSUME_QUEUES = "recoverConsumeQueues"  # each queue's valid end
RECOVER_COMMIT_LOG = "recoverCommitLog"  # scan the log's tail (normal: the last 3 files; abnormal: from the
#                                          checkpoint), re-dispatching what an abnormal recovery scans
TRUNCATE_INDEX = "truncateIndex"  # after a crash: index entries past the recovered end
RECOVER_TOPIC_QUEUE_TABLE = "recoverTopicQueueTable"
DISPATCH_TAIL = "dispatchTail"  # reput from the consume queues' end to the log's end before serving

RUNTIME_KEY = "storeStartPhasesMs"


class StartPhases:
    """Seconds spent in each phase of one start (a phase entered twice adds up)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0

    def runtime_value(self) -> str:
        return ",".join(f"{name}:{s * 1000:.1f}" for name, s in self.seconds.items())


def parse_runtime_value(text: str) -> dict[str, float]:
    """``runtime_value``'s text back to seconds per phase; malformed pairs are left out."""
    out: dict[str, float] = {}
    for pair in text.split(","):
        name, _, ms = pair.partition(":")
        try:
            out[name.strip()] = float(ms) / 1000
        except ValueError:
            continue
    return {k: v for k, v in out.items() if k}
