"""This module owns reading the broker's state for a chaos run: one-off status reads (the written and
flushed commit-log offsets right before a crash, the recovered end right after a restart) and a background
sampler that writes the run's ``metrics`` (schema v1 names) several times a second.

Offsets come from GET_BROKER_RUNTIME_INFO (``commitLogMaxOffset``, ``commitLogFlushedOffset``,
``dispatchBehindBytes``, ``commitLogDiskRatio``), the same table ``mqadmin brokerStatus`` prints; RSS comes
from /proc. A broker that is down or stopped simply yields no sample.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.records import MetricName, MetricsWriter, WallClock
from reference_broker.common.record import MessageExt, RecordError, decode_messages
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import create_request
from reference_broker.remoting.errors import RemotingError
from reference_broker.tools.admin import AdminError, broker_status


@dataclass(frozen=True)
class BrokerSample:
    ts_ns: int
    max_offset: int  # commitLogMaxOffset: written (in the page cache at least)
    flushed_offset: int  # commitLogFlushedOffset: forced to the device
    min_offset: int
    dispatch_behind: int
    disk_ratio: float
    put_count: int
    writeable: bool
    disk_full: bool
    version: str

    @property
    def unflushed(self) -> int:
        return max(0, self.max_offset - self.flushed_offset)


def read_status(addr: str, clock: WallClock) -> BrokerSample:
    """One GET_BROKER_RUNTIME_INFO. Raises AdminError / OSError when the broker does not answer."""
    t = broker_status(addr)
    return BrokerSample(
        ts_ns=clock.now_ns(),
        max_offset=int(t.get("commitLogMaxOffset", -1)),
        flushed_offset=int(t.get("commitLogFlushedOffset", -1)),
        min_offset=int(t.get("commitLogMinOffset", -1)),
        dispatch_behind=int(t.get("dispatchBehindBytes", 0)),
        disk_ratio=float(t.get("commitLogDiskRatio", -1.0)),
        put_count=int(t.get("putMessageCount", 0)),
        writeable=t.get("writeable", "true") == "true",
        disk_full=t.get("diskFull", "false") == "true",
        version=t.get("brokerVersionDesc", ""),
    )


def try_status(addr: str, clock: WallClock) -> BrokerSample | None:
    try:
        return read_status(addr, clock)
    except (AdminError, RemotingError, OSError, ValueError):
        return None


def first_status(addr: str, clock: WallClock, timeout_s: float = 5.0) -> BrokerSample | None:
    """``try_status``, asked again for up to ``timeout_s``: RocketMQ 4.9.8 answers SYSTEM_ERROR for about a
    second after its boot line, until its stats service took a first sample (docs/findings.md, F4)."""
    deadline = time.monotonic() + timeout_s
    while (status := try_status(addr, clock)) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    return status


def rss_bytes(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class Sampler:
    """Samples every ``interval_s`` on its own thread into ``metrics``; ``counters()`` gives the workload's
    running (sent ok, received) totals, turned into send_tps / consume_tps per interval."""

    def __init__(self, addr: Callable[[], str], pid: Callable[[], int | None], metrics: MetricsWriter,
                 clock: WallClock, counters: Callable[[], tuple[int, int]], interval_s: float = 0.25) -> None:
        self._addr = addr
        self._pid = pid
        self._metrics = metrics
        self._clock = clock
        self._counters = counters
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-sampler", daemon=True)
        self.last: BrokerSample | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        last_counts = self._counters()
        last_ns = self._clock.now_ns()
        while not self._stop.wait(self.interval_s):
            now = self._clock.now_ns()
            counts = self._counters()
            dt = max(1, now - last_ns) / 1e9
            m = self._metrics
            m.record(MetricName.SEND_TPS, (counts[0] - last_counts[0]) / dt, ts_ns=now)
            m.record(MetricName.CONSUME_TPS, (counts[1] - last_counts[1]) / dt, ts_ns=now)
            last_counts, last_ns = counts, now
            pid = self._pid()
            if pid is not None and (rss := rss_bytes(pid)) is not None:
                m.record(MetricName.BROKER_RSS_BYTES, rss, ts_ns=now)
            s = try_status(self._addr(), self._clock)
            if s is None:
                continue
            self.last = s
            m.record(MetricName.COMMITLOG_MAX_OFFSET, s.max_offset, ts_ns=s.ts_ns)
            m.record(MetricName.COMMITLOG_FLUSHED_OFFSET, s.flushed_offset, ts_ns=s.ts_ns)
            m.record(MetricName.DISPATCH_LAG_BYTES, s.dispatch_behind, ts_ns=s.ts_ns)
            if s.disk_ratio >= 0:
                m.record(MetricName.DISK_USED_RATIO, s.disk_ratio, ts_ns=s.ts_ns)


def messages_at(addr: str, offsets: list[int], timeout_s: float = 5.0) -> dict[int, MessageExt | None]:
    """The commit-log record at each offset (VIEW_MESSAGE_BY_ID, what ``mqadmin queryMsgById`` uses), read
    straight from the log, bypassing the consume queues; None where there is no intact record."""
    out: dict[int, MessageExt | None] = {}
    with RemotingClient.from_addr(addr, timeout_s) as client:
        for off in offsets:
            resp = client.invoke(create_request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(off)}))
            found = None
            if resp.code == ResponseCode.SUCCESS:
                try:
                    msgs = decode_messages(resp.body or b"")
                except (RecordError, ValueError):
                    msgs = []
                found = msgs[0] if msgs else None
            out[off] = found
    return out
