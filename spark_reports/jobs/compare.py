"""Compare report: the reference broker beside its peers (NATS JetStream, RabbitMQ classic and quorum queues,
Apache RocketMQ 4.9.8), from one ``python -m harness compare`` session — the same workloads, the same load
generator, one sitting.

Each run's meta.json ``compare`` says which broker and workload it was and the durability mode its broker's
acknowledgement matches (page cache = ASYNC_FLUSH, fsync = SYNC_FLUSH; docs/interop.md "Peer brokers").

- throughput = acknowledged sends ÷ the load window (first send's start → last acknowledged send's ack);
- send latency = ack − start of acknowledged sends: p50 / p99 / p99.9 / max and the CDF, by percentile_approx
  over the run's raw events;
- send-to-consume latency = the consumer's receive time − the producer's send time carried in the message
  (``born_ns``: a header on the peers, the ``LAB_BORN_NS`` user property on the RocketMQ brokers, both in ns;
  runs made before that property read RocketMQ's bornTimestamp, in ms, which adds 0.5 ms on average);
- loss = acknowledged, never received (check.json; every broker here judged against its own promise).

- cost = meta.json ``load`` (harness.load_cost): each load process's and the broker's CPU busy share over the
  load window, the machine's, their CPU per acknowledged message, and which side bounded the run:
  ``generator`` (every load process at ~a full core, the broker not), ``broker``, ``machine`` (the cores
  busy, both short of CPU) or ``neither``.

Claims judged (spark_reports.claims): ``peer-async-vs-nats`` (reference ASYNC_FLUSH against NATS JetStream) and
``peer-sync-vs-rabbitmq`` (reference SYNC_FLUSH against RabbitMQ quorum queues): held when the reference broker's
unbounded throughput is at or above the peer's and its p99 send latency at the fixed rate is at or below the
peer's; "not held" otherwise, with both figures; "inconclusive" ("not measured fairly: generator bound") when
either side's unbounded run was bound by the load generator — its load processes at their ceiling, or the
machine's cores saturated with the load spending more CPU per message than the broker (``generator_bound_why``)
— its throughput then measures the client. Two cases keep a verdict all the same: the fixed-rate p99 fails the
claim by itself ("not held"), or the side behind in the unbounded runs had the strictly lighter load per message, so its
clients cannot explain the order (``_order_survives_the_clients``).
"""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_reports.claims import ClaimId, Finding, Verdict
from spark_reports.fault_loss import FaultRow, fault_rows, standing
from spark_reports.html_report import Page, ReportOutput, write_csv
from spark_reports.percentiles import CDF_GRID, DEFAULT_ACCURACY
from spark_reports.plots import cdf_plot
from spark_reports.report_io import finish_report, fixed, make_report_dir
from spark_reports.run_records import RunInfo, discover_runs, load_events, read_check

NAME: Final = "compare"
QUANTILES: Final = (0.5, 0.99, 0.999)
WORKLOAD_WORDS: Final = {"rate": "fixed rate (open loop)", "max": "unbounded (in-flight window)",
                         "one": "one send in flight"}
# (claim, reference label, peer label)
PAIRS: Final = ((ClaimId.PEER_ASYNC_VS_NATS, "reference-async", "nats"),
                (ClaimId.PEER_SYNC_VS_RABBITMQ, "reference-sync", "rabbitmq-quorum"))


@dataclass(frozen=True)
class Perf:
    run_id: str
    broker: str
    workload: str
    durability: str
    attempted: int
    acknowledged: int
    window_ns: int
    send_q: tuple[int, ...]  # QUANTILES then CDF_GRID, ns
    send_max: int | None
    e2e_q: tuple[int, ...]  # p50, p99, ns
    lost: int | None
    valid: bool | None
    # meta.json "load" (harness.load_cost; absent in runs made before it): what the load and the broker cost.
    processes: int | None = None
    client_util: tuple[float, ...] = ()
    broker_util: float | None = None
    client_us_per_msg: float | None = None
    broker_us_per_msg: float | None = None
    bound: str | None = None
    machine_busy: float | None = None
    others_cores: float | None = None
    # meta.json "peer_client" (harness.drivers): a peer's send path, "lean" or "library"; None for RocketMQ.
    peer_client: str | None = None
    # meta.json "rocketmq_client": a RocketMQ broker's send path, "lean" or "library" (older runs: None).
    rocketmq_client: str | None = None

    @property
    def acks_per_s(self) -> float | None:
        return self.acknowledged / (self.window_ns / 1e9) if self.window_ns > 0 else None

    def send_ms(self, i: int) -> float | None:
        return self.send_q[i] / 1e6 if self.send_q else None

    def e2e_ms(self, i: int) -> float | None:
        return self.e2e_q[i] / 1e6 if self.e2e_q else None


def compare_runs(runs_dir: Path) -> list[RunInfo]:
    return [r for r in discover_runs(runs_dir) if isinstance(r.meta.get("compare"), dict)]


def compute(spark: SparkSession, runs: list[RunInfo], accuracy: int = DEFAULT_ACCURACY) -> list[Perf]:
    if not runs:
        return []
    events = load_events(spark, runs, ["op", "start_ns", "end_ns", "outcome", "born_ns"])
    sends = events.where(F.col("op") == "send").select(
        "run_id", "start_ns", F.when(F.col("outcome") == "ok", F.col("end_ns")).alias("ack_ns"))
    sends = sends.withColumn("latency", F.col("ack_ns") - F.col("start_ns"))
    per_run = {r["run_id"]: r for r in sends.groupBy("run_id").agg(
        F.count(F.lit(1)).alias("attempted"), F.count("ack_ns").alias("acked"),
        (F.max("ack_ns") - F.min("start_ns")).alias("window"),
        F.percentile_approx("latency", [*QUANTILES, *CDF_GRID], accuracy).alias("q"),
        F.max("latency").alias("max")).collect()}
    rx = events.where((F.col("op") == "receive") & (F.col("born_ns") > 0)).select(
        "run_id", (F.col("end_ns") - F.col("born_ns")).alias("e2e"))
    e2e = {r["run_id"]: r for r in rx.groupBy("run_id").agg(
        F.percentile_approx("e2e", [0.5, 0.99], accuracy).alias("q")).collect()}
    out = []
    for run in runs:
        c = per_run.get(run.run_id)
        if c is None:
            continue
        cmp = run.meta["compare"]
        check = read_check(run) or {}
        e = e2e.get(run.run_id)
        load = run.meta.get("load")
        cost: dict[str, Any] = load if isinstance(load, dict) else {}
        out.append(Perf(run.run_id, str(cmp.get("broker")), str(cmp.get("workload")), str(cmp.get("durability")),
                        int(c["attempted"]), int(c["acked"]), int(c["window"] or 0),
                        tuple(int(v) for v in c["q"]) if c["q"] else (),
                        None if c["max"] is None else int(c["max"]),
                        tuple(int(v) for v in e["q"]) if e and e["q"] else (),
                        check.get("lost"), check.get("valid"),
                        _opt_int(cost.get("processes")), tuple(float(u) for u in cost.get("client_util") or ()),
                        _opt_float(cost.get("broker_util")), _opt_float(cost.get("client_cpu_us_per_msg")),
                        _opt_float(cost.get("broker_cpu_us_per_msg")),
                        None if cost.get("bound") is None else str(cost["bound"]),
                        _opt_float(cost.get("machine_busy")), _opt_float(cost.get("others_cores")),
                        None if run.meta.get("peer_client") is None else str(run.meta["peer_client"]),
                        None if run.meta.get("rocketmq_client") is None else str(run.meta["rocketmq_client"])))
    return out


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


def _opt_int(v: Any) -> int | None:
    return None if v is None else int(v)


def _find(perfs: list[Perf], broker: str, workload: str) -> Perf | None:
    return next((p for p in perfs if p.broker == broker and p.workload == workload), None)


def judge(perfs: list[Perf], faults: list[FaultRow] | None = None) -> list[Finding]:
    """One finding per pair whose four runs (max and rate, both brokers) are all there; with ``faults`` (the
    session's chaos cells, spark_reports.fault_loss), its details also say where the pair stands under them."""
    findings = []
    for claim, ours, peer in PAIRS:
        ours_max, peer_max = _find(perfs, ours, "max"), _find(perfs, peer, "max")
        ours_rate, peer_rate = _find(perfs, ours, "rate"), _find(perfs, peer, "rate")
        if None in (ours_max, peer_max, ours_rate, peer_rate):
            continue
        assert ours_max and peer_max and ours_rate and peer_rate
        t_ours, t_peer = ours_max.acks_per_s or 0.0, peer_max.acks_per_s or 0.0
        p_ours, p_peer = ours_rate.send_ms(1), peer_rate.send_ms(1)
        if p_ours is None or p_peer is None:
            continue
        held = t_ours >= t_peer and p_ours <= p_peer
        measured = (f"{ours}: {t_ours:,.0f} msg/s unbounded, p99 {p_ours:.2f} ms at the fixed rate; {peer}: "
                    f"{t_peer:,.0f} msg/s, p99 {p_peer:.2f} ms")
        why = []
        if t_ours < t_peer:
            why.append(f"throughput {t_ours / t_peer:.2f}x the peer's" if t_peer else "no throughput")
        if p_ours > p_peer:
            why.append(f"p99 {p_ours / p_peer:.2f}x the peer's" if p_peer else "p99 above the peer's")
        verdict = Verdict.HELD if held else Verdict.NOT_HELD
        generator_bound = [p for p in (ours_max, peer_max) if generator_bound_why(p)]
        if generator_bound and p_ours > p_peer:
            # The p99 at the fixed rate (no side at its ceiling there) fails the claim by itself, whatever the
            # unbounded runs measured.
            why.append(f"{_names(generator_bound)} generator bound, so the throughput figures are the clients' as "
                       "much as the brokers'")
        elif generator_bound and not _order_survives_the_clients(t_ours, t_peer, ours_max, peer_max):
            # The unbounded figure of a generator-bound run is the client's ceiling, not the broker's: comparing
            # it says nothing about the brokers, whichever way it falls.
            verdict = Verdict.INCONCLUSIVE
            measured = ("not measured fairly: generator bound (" + "; ".join(
                f"{p.broker}: {generator_bound_why(p)}" for p in generator_bound) + f") — {measured}")
            if (bound := broker_cost_words(ours_max, peer_max)):
                why.append(bound)
        elif generator_bound:
            why.append(_survives_words(t_ours, t_peer, ours_max, peer_max, generator_bound))
        procs = sorted({p.processes for p in (ours_max, peer_max, ours_rate, peer_rate) if p.processes})
        load = (f"the load in {'/'.join(str(n) for n in procs)} process(es)" if procs
                else "the load in one process")
        findings.append(Finding(
            claim, verdict, measured, NAME,
            (ours_max.run_id, peer_max.run_id, ours_rate.run_id, peer_rate.run_id),
            f"Same load generator (harness.driver_load), {load}, one sitting. "
            + ("; ".join(why) if why else "At or above on both.")
            + "".join(f" {p.broker} unbounded: {p.bound}-bound." for p in (ours_max, peer_max) if p.bound)
            + (f" {peer} sent through its {peer_max.peer_client} client." if peer_max.peer_client else "")
            + (f" {ours_max.broker} sent through the {ours_max.rocketmq_client} client."
               if ours_max.rocketmq_client else "")
            + (f" {under}" if (under := standing(faults or [], ours, peer)) else ""),
            {"ours_acks_per_s": t_ours, "peer_acks_per_s": t_peer, "ours_p99_ms": p_ours, "peer_p99_ms": p_peer}))
    return findings


def _order_survives_the_clients(t_ours: float, t_peer: float, ours: Perf, peer: Perf) -> bool:
    """Whether the unbounded runs' order stands although their clients bounded them: the side that came out
    behind had the cheaper load per message. A heavier client only takes CPU from its own
    side, so it cannot have made the winner win; on a machine where rate ≈ cores ÷ (client + broker CPU per
    message), the loser with the lighter client has the heavier broker."""
    c_ours, c_peer = ours.client_us_per_msg, peer.client_us_per_msg
    if c_ours is None or c_peer is None:
        return False
    return c_ours < c_peer if t_ours < t_peer else c_ours > c_peer  # strictly: equal loads leave it open


def broker_cost_words(ours: Perf, peer: Perf) -> str:
    """What bounds the pair once the load generator is taken away: each broker's CPU per acknowledged message in
    its unbounded run, and the ceiling that puts on one core's worth of it; "" when either was not measured."""
    a, b = ours.broker_us_per_msg, peer.broker_us_per_msg
    if not a or not b:
        return ""
    order = "less" if a < b else "more" if a > b else "as much"
    return (f"the brokers' own cost, which a free load generator would leave as the bound: {ours.broker} "
            f"{a:,.0f} µs of CPU per acknowledged message ({1e6 / a:,.0f} msg/s per core), {peer.broker} "
            f"{b:,.0f} µs ({1e6 / b:,.0f} msg/s per core): ours costs {order}"
            + ("" if a == b else f", {max(a, b) / min(a, b):.2f}x"))


def _names(bound: list[Perf]) -> str:
    """Which unbounded runs were generator bound, in words."""
    return " and ".join(f"{p.broker}'s unbounded run" for p in bound) + (" were" if len(bound) > 1 else " was")


def _survives_words(t_ours: float, t_peer: float, ours: Perf, peer: Perf, bound: list[Perf]) -> str:
    behind, ahead = (ours, peer) if t_ours < t_peer else (peer, ours)
    return (f"{_names(bound)} generator bound, but the side behind ({behind.broker}) had the lighter load "
            f"({behind.client_us_per_msg:,.0f} µs CPU/msg against {ahead.client_us_per_msg:,.0f}), so its "
            "clients do not explain the order")


def generator_bound_why(p: Perf) -> str:
    """Why ``p``'s figure measures its load generator more than its broker, or "" when it does not: the load
    processes at their ceiling and the broker not (``bound`` "generator"), or the cores saturated ("machine")
    with the load spending more CPU per message than the broker — then most of what the machine could give went
    to the client, and the throughput is mostly the client's cost (on 2 cores: rate ≈ 2 s ÷ (client + broker
    CPU per message))."""
    if p.bound == "generator":
        return f"load processes {_busy(p.client_util)} busy, broker {_busy_one(p.broker_util)}"
    if (p.bound == "machine" and p.client_us_per_msg is not None and p.broker_us_per_msg is not None
            and p.client_us_per_msg > p.broker_us_per_msg):
        others = "" if p.others_cores is None else f", other work {p.others_cores:.2f} cores"
        return (f"cores saturated (machine {_busy_one(p.machine_busy)} busy{others}), the load "
                f"{p.client_us_per_msg:,.0f} µs CPU/msg against the broker's {p.broker_us_per_msg:,.0f}")
    return ""


def _busy(utils: tuple[float, ...]) -> str:
    return "/".join(f"{u:.0%}" for u in utils) if utils else "?"


def _busy_one(util: float | None) -> str:
    return "?" if util is None else f"{util:.0%}"


def run(spark: SparkSession, runs_dir: Path, out_dir: Path, accuracy: int = DEFAULT_ACCURACY) -> ReportOutput:
    report_dir = make_report_dir(out_dir, NAME)
    runs = compare_runs(runs_dir)
    perfs = compute(spark, runs, accuracy)
    chaos_runs = [r for r in discover_runs(runs_dir) if r.scenario.startswith("chaos-")]
    faults = fault_rows(chaos_runs)
    page = Page("Brokers compared: the reference broker beside NATS JetStream, RabbitMQ and RocketMQ 4.9.8")
    page.paragraph("One python -m harness compare session: the same workloads through the same load generator, "
                   "one broker after another. Durability = the RocketMQ flush mode whose promise the broker's "
                   "acknowledgement matches (page cache = ASYNC_FLUSH, fsync = SYNC_FLUSH; docs/interop.md). "
                   "Latencies in ms; throughput = acknowledged ÷ load window.")
    skipped = {}
    summary = Path(runs_dir) / "compare.json"
    if summary.is_file():
        skipped = json.loads(summary.read_text()).get("skipped", {})
    procs = sorted({p.processes for p in perfs if p.processes and p.workload != "one"})
    bound_max = [f"{p.broker} {p.bound}-bound" for p in sorted(perfs, key=lambda p: p.broker)
                 if p.workload == "max" and p.bound]
    if procs:
        page.paragraph(f"The load in {'/'.join(str(n) for n in procs)} process(es) per workload (python -m harness "
                       "compare --load-processes; one send in flight always runs in one). Unbounded runs: "
                       + (", ".join(bound_max) or "none") + ". A generator-bound figure is the client's ceiling, "
                       "not the broker's.")
    clients = sorted({f"{p.broker}: {p.peer_client}" for p in perfs if p.peer_client})
    if clients:
        page.paragraph("The peers' send path (python -m harness compare --peer-client): " + ", ".join(clients)
                       + " (lean = the wire protocol written directly, harness.nats_lean / harness.amqp_lean; "
                       "library = nats-py / pika). NATS's consumer goes with it (lean = harness.nats_lean_consumer, "
                       "a JetStream pull consumer written directly); RabbitMQ's consumer uses pika either way.")
    rmq_clients = sorted({f"{p.broker}: {p.rocketmq_client}" for p in perfs if p.rocketmq_client})
    if rmq_clients:
        page.paragraph("The RocketMQ brokers' send path (python -m harness compare --rocketmq-client): "
                       + ", ".join(rmq_clients) + " (lean = SEND_MESSAGE_V2 frames written directly, "
                       "harness.rocketmq_lean; library = this project's client). Consumers use the library.")
    if skipped:
        page.paragraph("Not run here: " + "; ".join(f"{b} ({why})" for b, why in skipped.items()), note=True)
    header = ["broker", "durability", "acknowledged", "acknowledged/s", "send p50", "send p99", "send p99.9",
              "send max", "send→consume p50", "send→consume p99", "lost", "check"]
    cost_header = ["broker", "bound", "load processes", "load CPU busy", "broker CPU busy", "machine busy",
                   "other work (cores)", "load CPU µs/msg", "broker CPU µs/msg"]
    files: list[Path] = []
    csv_rows: list[list[Any]] = []
    for w in ("rate", "max", "one"):
        mine = sorted((p for p in perfs if p.workload == w), key=lambda p: (p.durability, p.broker))
        if not mine:
            continue
        page.heading(f"Workload: {WORKLOAD_WORDS.get(w, w)}")
        rows = [[p.broker, p.durability, fixed(p.acknowledged), fixed(p.acks_per_s), fixed(p.send_ms(0), 2),
                 fixed(p.send_ms(1), 2), fixed(p.send_ms(2), 2),
                 fixed(None if p.send_max is None else p.send_max / 1e6, 2), fixed(p.e2e_ms(0), 2),
                 fixed(p.e2e_ms(1), 2), p.lost, "valid" if p.valid else ("INVALID" if p.valid is False else None)]
                for p in mine]
        page.table(header, rows, text_columns=2)
        cost_rows = [[p.broker, p.bound, p.processes, _busy(p.client_util), _busy_one(p.broker_util),
                      _busy_one(p.machine_busy), fixed(p.others_cores, 2), fixed(p.client_us_per_msg),
                      fixed(p.broker_us_per_msg)] for p in mine]
        if any(p.bound for p in mine):
            page.paragraph("What the load and the broker cost: CPU busy over the load window (100 % = one core; "
                           "machine busy: all cores, whoever used them; other work: the cores' worth neither the "
                           "load nor the broker used), CPU per acknowledged message (µs, load window and drain), "
                           "and which side was the bound (generator: every load process at ~a full core, the broker "
                           "not; machine: the cores were busy, both sides short of CPU).")
            page.table(cost_header, cost_rows, text_columns=2)
        csv_rows.extend([w, *r, *c[1:]] for r, c in zip(rows, cost_rows, strict=True))
        series = {f"{p.broker} ({p.durability})": [(g, v / 1e6) for g, v in
                                                   zip(CDF_GRID, p.send_q[len(QUANTILES):], strict=True)]
                  for p in mine if p.send_q}
        files.append(cdf_plot(report_dir / f"cdf_{w}.png", f"Send latency, {WORKLOAD_WORDS.get(w, w)}", series))
        page.figure(f"cdf_{w}.png", f"send latency CDF per broker, workload {w}")
    if not perfs:
        page.paragraph("No compare runs in this directory (python -m harness compare makes them).", note=True)
    files.append(write_csv(report_dir / "compare.csv", ["workload", *header, *cost_header[1:]], csv_rows))
    if faults:
        files.append(_fault_section(page, report_dir, faults))
    used = [*runs, *(r for r in chaos_runs if r.run_id in {f.run_id for f in faults})]
    return finish_report(page, report_dir, NAME, used, files, link_csvs=True, findings=judge(perfs, faults))


FAULT_HEADER: Final = ["fault", "broker", "durability", "cycles", "acknowledged", "lost", "allowed by its promise",
                       "beyond its promise", "recovery max (s)", "verdict", "run"]


def _fault_section(page: Page, report_dir: Path, faults: list[FaultRow]) -> Path:
    """The loss under each fault, per broker and durability mode (spark_reports.fault_loss)."""
    page.heading("Loss under each fault")
    page.paragraph("The chaos cells of this session (python -m harness compare --faults, or python -m chaos matrix "
                   "--driver ... --runs-dir into it): the same faults on every broker, each judged against its "
                   "own acknowledgement's promise. Lost = acknowledged and never delivered; allowed = what the "
                   "promise lets go (a page-cache acknowledgement under a power loss, within its unflushed window "
                   "or sync interval); a RocketMQ-protocol cell's verdict does not split its loss, so a failed one "
                   "shows its first violation. Recovery = from the fault until a send is acknowledged again.")
    page.table(FAULT_HEADER, [[f.fault, f.broker, f.durability, f.cycles, fixed(f.acknowledged), f.lost, f.allowed,
                               f.beyond, fixed(f.recovery_s_max, 2), f.verdict, f.run_id] for f in faults],
               text_columns=3)
    return write_csv(report_dir / "faults.csv", FAULT_HEADER,
                     [[f.fault, f.broker, f.durability, f.cycles, f.acknowledged, f.lost, f.allowed, f.beyond,
                       f.recovery_s_max, f.verdict, f.run_id] for f in faults])
