"""This module owns the broker fuzzer's run: a real name server and broker (harness/launcher.py), the cases of
``fuzz_cases`` sent over real sockets, the probe of ``fuzz_probe`` beside them, and the invariant checked
throughout, h11-style:

* every request gets a well-formed response frame carrying a RocketMQ response code (success or an error);
  the broker closes a connection only after a frame the codec refuses (NettyDecoder closes the channel);
* the broker process stays alive and the probe's send + pull round is answered within the limit (1 s);
* every message the probe got acknowledged is pullable and findable by key and by message id afterwards,
  again after a SIGTERM + restart and after a kill -9 + restart;
* the store passes the offline check (``admin checkStore``) after the SIGTERM and after the kill -9 cycle.

``python -m harness fuzz --seconds N --seed S`` runs it; the seed is printed first, and ``--case I`` replays
single cases of a seed.
"""

from __future__ import annotations

import os
import secrets
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from harness.fuzz_cases import Case, CaseGenerator, CaseKind, Expect, Frame, request_code_name
from harness.fuzz_probe import Probe, create_probe_topic, verify_acked
from harness.fuzz_report import FuzzReport, ViolationKind, check_store, code_name, looks_raised
from harness.launcher import BrokerProcess, LaunchError, Topology, env_broker_conf
from reference_broker.remoting.codec import FrameDecoder, ProtocolError
from reference_broker.remoting.codes import ResponseCode
from reference_broker.remoting.command import RemotingCommand

JSON_ENV: Final = "RMQ_LAB_FUZZ_JSON"  # where the run's JSON goes when --json-out is not given
CLOSE_WAIT_S: Final = 5.0  # how long a malformed frame's connection may take to close
SLOW_TAIL_BYTES: Final = 20  # a slowloris frame's last bytes go one per second
SLOW_BYTE_INTERVAL_S: Final = 1.0
MAX_LINGERING: Final = 6  # half-open and slowloris connections open at once
MAX_PARKED: Final = 20  # long-held pulls parked on their own connections
PARK_OVER_S: Final = 20.0  # a pull the broker may hold longer than this is parked, not awaited
REPLAY_OBSERVE_S: Final = 15.0  # the probe runs on after replayed cases (delay level 3 is 10 s)
FLOOD_FRAME_MAX: Final = 64 * 1024  # larger frames are left out of floods (their count multiplies)

# Small files, as the test suite uses (RocketMQ's 1 GiB commit-log files are reserved on disk up front).
SMALL_FILES: Final = {"mappedFileSizeCommitLog": str(64 * 1024 * 1024), "maxHashSlotNum": "100000",
                      "maxIndexNum": "400000"}
RESPONSE_CODES: Final = frozenset(int(c) for c in ResponseCode)


@dataclass
class FuzzOptions:
    seconds: float = 60.0
    seed: int | None = None
    skip_known: bool = False  # step around the known defects (a) and (b); never in the test suite
    probe_limit_s: float = 1.0
    response_timeout_s: float = 10.0
    workdir: Path | None = None
    json_out: Path | None = None
    cases: list[int] = field(default_factory=list)  # replay only these case indexes
    lifecycle: bool = True  # SIGTERM and kill -9 cycles with lookups and store checks afterwards


class _Conn:
    """One client socket and the decoder for what the broker sends back."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5.0)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.decoder = FrameDecoder()
        self.eof = False
        self.garbled: str | None = None

    def send(self, data: bytes) -> bool:
        try:
            self.sock.sendall(data)
        except OSError:
            return False
        return True

    def read(self, deadline: float) -> RemotingCommand | None:
        """The next frame from the broker, or None at EOF / deadline / a frame our codec refuses."""
        while True:
            try:
                cmd = self.decoder.next_frame()
            except ProtocolError as exc:
                self.garbled = str(exc)
                return None
            if cmd is not None:
                return cmd
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.eof:
                return None
            self.sock.settimeout(min(remaining, 1.0))
            try:
                data = self.sock.recv(1 << 16)
            except TimeoutError:
                continue
            except OSError:
                data = b""
            if not data:
                self.eof = True
                return None
            self.decoder.feed(data)

    def responses(self, opaques: set[int], deadline: float) -> dict[int, RemotingCommand]:
        """Responses for ``opaques`` until all came, EOF, garbage or the deadline; the broker's own requests
        (NOTIFY_CONSUMER_IDS_CHANGED) are skipped."""
        got: dict[int, RemotingCommand] = {}
        while len(got) < len(opaques):
            cmd = self.read(deadline)
            if cmd is None:
                break
            if cmd.is_response and cmd.opaque in opaques:
                got[cmd.opaque] = cmd
            elif cmd.is_response:
                self.garbled = f"a response with an opaque nobody asked for: {cmd.opaque} (code {cmd.code})"
                break
        return got

    def wait_closed(self, deadline: float) -> bool:
        while not self.eof and self.garbled is None:
            if self.read(deadline) is None and time.monotonic() >= deadline:
                break
        return self.eof

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


@dataclass
class _Lingering:
    conn: _Conn
    frame: Frame
    case: int
    sent: int
    next_at: float
    slow: bool  # slowloris (completes, then is answered) or half-open (never completes)


class Fuzzer:
    def __init__(self, broker: BrokerProcess, options: FuzzOptions, report: FuzzReport,
                 progress: Callable[[str], None]) -> None:
        self.broker = broker
        self.port = broker.port
        self.opt = options
        self.report = report
        self.progress = progress
        self.gen = CaseGenerator(report.seed, options.skip_known)
        self.conn: _Conn | None = None
        self.lingering: list[_Lingering] = []
        self.parked: list[_Conn] = []
        self.timeline: list[tuple[float, int, str]] = []  # (time.monotonic() at start, case index, label)

    # -- the loop
    def run(self, indexes: Iterable[int]) -> None:
        deadline = time.monotonic() + self.opt.seconds
        last_note = time.monotonic()
        for index in indexes:
            if not self.opt.cases and time.monotonic() >= deadline:
                break
            if not self.broker.alive:
                rc = self.broker.proc.returncode if self.broker.proc is not None else None
                self.report.violate(ViolationKind.BROKER_DIED, f"the broker exited with {rc}", index - 1)
                break
            case = self.gen.case(index)
            self.timeline.append((time.monotonic(), index, case.label))
            self.report.cases += 1
            self.report.case_kinds[case.kind.value] += 1
            try:
                self._run_case(case)
            except OSError as exc:  # cannot even connect: the broker is gone or wedged
                self.report.violate(ViolationKind.DROPPED, f"cannot connect: {exc!r}", index)
                self._drop_conn()
            self._tend_lingering()
            if time.monotonic() - last_note > 10:
                last_note = time.monotonic()
                self.progress(f"{self.report.cases:,} cases, {self.report.frames_tried:,} frames, "
                              f"violations {dict(self.report.violation_counts)}")
        self._finish_lingering()

    def in_flight(self, start: float, end: float, before: int = 3) -> list[str]:
        """The cases that ran while the probe was stalled from ``start`` to ``end`` (and a few just before)."""
        first = next((i for i, (t, _, _) in enumerate(self.timeline) if t >= start), len(self.timeline))
        chosen = [e for e in self.timeline[max(0, first - before):] if e[0] <= end][:12]
        return [f"case {index} ({label})" for _, index, label in chosen]

    def close(self) -> None:
        self._drop_conn()
        for item in self.lingering:
            item.conn.close()
        for c in self.parked:
            c.close()
        self.lingering.clear()
        self.parked.clear()

    def _main_conn(self) -> _Conn:
        if self.conn is None:
            self.conn = _Conn(self.port)
        return self.conn

    def _drop_conn(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    # -- cases
    def _run_case(self, case: Case) -> None:
        if case.kind in (CaseKind.REQUEST, CaseKind.GARBAGE):
            self._one(case, case.frames[0])
        elif case.kind is CaseKind.FLOOD:
            self._flood(case)
        elif case.kind is CaseKind.CLOSE_MID_FRAME:
            c = _Conn(self.port)
            self._count(case.frames[0])
            c.send(case.frames[0].data)
            c.close()
            self.report.outcomes["closed mid-frame"] += 1
        else:
            self._linger(case)

    def _count(self, frame: Frame) -> None:
        self.report.frames_tried += 1
        if frame.code != -999:
            self.report.request_codes[request_code_name(frame.code)] += 1

    def _one(self, case: Case, frame: Frame) -> None:
        self._count(frame)
        if frame.expect is Expect.RESPONSE and frame.hold_s > PARK_OVER_S:
            self._park(frame)
            return
        conn = self._main_conn()
        sent = conn.send(frame.data)
        if frame.expect is Expect.RESPONSE:
            wait = self.opt.response_timeout_s + frame.hold_s
            got = conn.responses({frame.opaque}, time.monotonic() + wait)
            self._check_answers(case, [frame], got, conn, sent)
            if frame.opaque not in got:
                self._drop_conn()
        elif frame.expect is Expect.CLOSE:
            if conn.wait_closed(time.monotonic() + CLOSE_WAIT_S):
                self.report.outcomes["closed as due (malformed frame)"] += 1
            else:
                self.report.violate(ViolationKind.NOT_CLOSED, f"the connection stayed open {CLOSE_WAIT_S:.0f} s "
                                    f"after a malformed frame ({conn.garbled or 'no answer'})", case.index,
                                    frame.summary)
            self._drop_conn()
        else:
            # Nothing is due (oneway, a response frame, or an incomplete frame that leaves the stream
            # mid-frame): this connection is done.
            self.report.outcomes["nothing due"] += 1
            self._drop_conn()

    def _check_answers(self, case: Case, frames: list[Frame], got: dict[int, RemotingCommand], conn: _Conn,
                       sent: bool) -> None:
        for frame in frames:
            resp = got.get(frame.opaque)
            if resp is None:
                if conn.garbled is not None:
                    kind, why = ViolationKind.BAD_RESPONSE, f"unreadable answer: {conn.garbled}"
                elif conn.eof or not sent:
                    kind, why = ViolationKind.DROPPED, "the broker closed the connection instead of answering"
                else:
                    kind, why = ViolationKind.NO_RESPONSE, "no answer in time"
                self.report.violate(kind, f"{case.label}: {why}", case.index, frame.summary)
                conn.garbled = None
                return  # one per case: the rest of a flood shares the cause
            name = code_name(resp.code)
            self.report.codes_seen[name] += 1
            if resp.code not in RESPONSE_CODES:
                self.report.violate(ViolationKind.BAD_RESPONSE, f"code {resp.code} is not a RocketMQ response "
                                    f"code (remark {resp.remark!r})", case.index, frame.summary)
            elif looks_raised(resp.code, resp.remark):
                self.report.violate(ViolationKind.HANDLER_RAISED, f"SYSTEM_ERROR {resp.remark!r}", case.index,
                                    frame.summary)

    def _flood(self, case: Case) -> None:
        frames = [f for f in case.frames if len(f.data) <= FLOOD_FRAME_MAX]
        conn = _Conn(self.port)
        try:
            for f in frames:
                self._count(f)
            malformed = next((i for i, f in enumerate(frames) if f.expect is not Expect.RESPONSE), None)
            payload = b"".join(f.data for f in frames)
            # Written from another thread while this one reads, so neither side's buffers can deadlock.
            writer = threading.Thread(target=conn.send, args=(payload,), daemon=True)
            writer.start()
            deadline = time.monotonic() + self.opt.response_timeout_s + 0.05 * len(frames)
            if malformed is None:
                got = conn.responses({f.opaque for f in frames}, deadline)
                self._check_answers(case, frames, got, conn, True)
            else:
                # A burst with a malformed or incomplete frame in it: the broker closes the connection while
                # the rest of the burst is unread, so TCP resets it and answers already sent may never be read
                # (Netty's close does the same). Whatever arrives must be well-formed; the close is due.
                sent_before = frames[:malformed]
                got = conn.responses({f.opaque for f in sent_before}, deadline)
                self._check_answers(case, [f for f in sent_before if f.opaque in got], got, conn, True)
                self.report.outcomes["floods cut by a malformed frame"] += 1
            writer.join(self.opt.response_timeout_s)
            self.report.outcomes["flood frames answered"] += len(got)
        finally:
            conn.close()

    def _park(self, frame: Frame) -> None:
        """A pull the broker may hold for a long time: sent on its own connection, not awaited."""
        c = _Conn(self.port)
        c.send(frame.data)
        self.parked.append(c)
        self.report.outcomes["held pulls parked"] += 1
        while len(self.parked) > MAX_PARKED:
            self.parked.pop(0).close()

    # -- half-open and slowloris connections, tended between cases
    def _linger(self, case: Case) -> None:
        frame = case.frames[0]
        self._count(frame)
        slow = case.kind is CaseKind.SLOWLORIS
        c = _Conn(self.port)
        first = len(frame.data) - SLOW_TAIL_BYTES if slow else len(frame.data)
        c.send(frame.data[:max(0, first)])
        self.lingering.append(_Lingering(c, frame, case.index, max(0, first), time.monotonic(), slow))
        self.report.outcomes["slowloris" if slow else "half-open"] += 1
        while len(self.lingering) > MAX_LINGERING:
            self.lingering.pop(0).conn.close()

    def _tend_lingering(self) -> None:
        now = time.monotonic()
        for item in list(self.lingering):
            if not item.slow or now < item.next_at:
                continue
            if item.sent < len(item.frame.data):
                item.conn.send(item.frame.data[item.sent:item.sent + 1])
                item.sent += 1
                item.next_at = now + SLOW_BYTE_INTERVAL_S
                continue
            self.lingering.remove(item)
            got = item.conn.responses({item.frame.opaque}, now + self.opt.response_timeout_s)
            self._check_answers(Case(item.case, CaseKind.SLOWLORIS, "slowloris", (item.frame,)), [item.frame],
                                got, item.conn, True)
            item.conn.close()

    def _finish_lingering(self) -> None:
        for item in self.lingering:
            item.conn.close()
        self.lingering.clear()


def _broker_log_summary(broker: BrokerProcess) -> dict[str, object]:
    try:
        text = broker.log_path.read_text(errors="replace")
    except OSError:
        return {}
    raised = [line for line in text.splitlines() if "failed on a request" in line or "failed on" in line]
    return {"tracebacks": text.count("Traceback (most recent call last)"), "handler_failures": len(raised),
            "samples": raised[:5]}


def _lifecycle(topo: Topology, broker: BrokerProcess, acked_check: Callable[[str], None], report: FuzzReport,
               progress: Callable[[str], None]) -> None:
    """SIGTERM → store check → restart → lookups → kill -9 → restart → lookups → SIGTERM → store check."""
    def store_check(when: str) -> None:
        result, detail = check_store(broker.store_root)
        report.store_checks.append({"when": when, "result": result.value, "detail": detail})
        progress(f"store check {when}: {result.value} {detail[:200]}")
        if result.value == "failed":
            report.violate(ViolationKind.STORE_CHECK, f"{when}: {detail}")

    def restart(when: str) -> bool:
        try:
            broker.start()
        except LaunchError as exc:
            report.violate(ViolationKind.RESTART_FAILED, f"{when}: {exc}")
            return False
        return True

    rc = broker.stop()
    if rc != 0:
        report.violate(ViolationKind.BROKER_DIED, f"SIGTERM: the broker exited with {rc}")
    store_check("after SIGTERM")
    if not restart("after SIGTERM"):
        return
    acked_check("after SIGTERM + restart")
    broker.kill()
    if not restart("after kill -9"):
        return
    acked_check("after kill -9 + restart")
    broker.stop()
    store_check("after kill -9 + restart + SIGTERM")


def run_fuzz(options: FuzzOptions, progress: Callable[[str], None] = lambda line: None) -> FuzzReport:
    seed = options.seed if options.seed is not None else secrets.randbelow(2**31)
    progress(f"fuzz seed {seed} (replay with --seed {seed})")
    report = FuzzReport(seed, options.seconds, options.skip_known)
    tmp: tempfile.TemporaryDirectory[str] | None = None
    root = options.workdir
    if root is None:
        tmp = tempfile.TemporaryDirectory(prefix="rmq-lab-fuzz-")
        root = Path(tmp.name)
    # enablePropertyFilter: the SQL92 paths (compiling hostile selectors at pull and check) are fuzzed too
    conf = {**SMALL_FILES, "enablePropertyFilter": "true", **env_broker_conf()}
    started = time.monotonic()
    topo = Topology(root, broker_conf=conf)
    try:
        topo.start()
        broker = topo.brokers[0]
        create_probe_topic(broker.port)
        probe = Probe(broker.port, options.probe_limit_s, str(seed))
        probe.start()
        fuzzer = Fuzzer(broker, options, report, progress)
        try:
            fuzzer.run(options.cases if options.cases else _count_from(0))
            if options.cases:
                time.sleep(REPLAY_OBSERVE_S)  # a replay is short: give the probe time to see a wedge
        finally:
            fuzzer.close()
            stats = probe.stop()
        report.probe = {**stats.to_json(), "limit_ms": round(options.probe_limit_s * 1000),
                        # the cases that ran as the probe's longest silence began (its likely cause)
                        "cases_around_worst_stall": fuzzer.in_flight(
                            stats.unanswered_from, stats.unanswered_from + min(stats.longest_unanswered_s, 1.0))}
        if stats.over_limit:
            report.violate(ViolationKind.PROBE_STALL, f"{stats.over_limit} probe rounds over "
                           f"{options.probe_limit_s:.1f} s; worst {stats.worst_stall_s * 1000:.0f} ms at "
                           f"{stats.worst_at_s:.0f} s into the run (longest without an answer "
                           f"{stats.longest_unanswered_s:.1f} s, which began around "
                           f"{', '.join(report.probe['cases_around_worst_stall'])})")
        for failure in stats.failures[:10]:
            report.violate(ViolationKind.PROBE_FAILED, failure)

        def acked_check(when: str) -> None:
            if not broker.alive:
                report.violate(ViolationKind.BROKER_DIED, f"{when}: the broker is not running")
                return
            for problem in verify_acked(broker.port, stats.acked):
                report.violate(ViolationKind.ACKED_MISSING, f"{when}: {problem}")

        progress(f"fuzzing done ({report.cases:,} cases); checking {len(stats.acked):,} acknowledged messages")
        acked_check("after the run")
        if options.lifecycle and broker.alive:
            _lifecycle(topo, broker, acked_check, report, progress)
        report.broker_log = _broker_log_summary(broker)
    finally:
        topo.stop()
        report.elapsed_s = time.monotonic() - started
        if tmp is not None:
            tmp.cleanup()
    out = options.json_out or (Path(os.environ[JSON_ENV]) if os.environ.get(JSON_ENV) else None)
    if out is not None:
        report.write_json(out)
    return report


def _count_from(start: int) -> Iterable[int]:
    i = start
    while True:
        yield i
        i += 1
