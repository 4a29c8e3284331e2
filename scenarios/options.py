"""The scenarios' own command-line options (locust's custom-argument hook) and the typed ``Settings`` read back.

Every option also reads an environment variable (``RMQ_LAB_<NAME>``) and shows in the web UI, except those
that shape the embedded topology or the host (flush mode, broker.conf keys, store directory, sysctl profile,
fio): they take effect once, when locust starts, and are hidden from the web form so it cannot suggest
otherwise. ``--host`` selects the broker: none = an embedded name server + broker started for the locust
process; ``rmq://HOST:PORT`` (or ``HOST:PORT[;HOST:PORT]``) = an existing name server.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Final

from harness.drivers import (
    DEFAULT_PEER_CLIENT,
    DEFAULT_ROCKETMQ_CLIENT,
    DRIVER_NAMES,
    PEER_CLIENTS,
    ROCKETMQ_CLIENTS,
    PeerClient,
    RocketMQClient,
)
from harness.memory_cgroup import parse_size
from harness.rocketmq import IMPLS, BrokerImpl

FLUSH_TYPES: Final = ("ASYNC_FLUSH", "SYNC_FLUSH")
HOST_SCHEME: Final = "rmq://"


class OptionError(ValueError):
    """An option value the scenario cannot run with."""


@dataclass(frozen=True)
class Settings:
    """What a run is asked to do (defaults are the scenario's; see ``register``)."""

    run_dir: str = "runs"
    message_size: int = 1024
    rate: float = 1000.0  # msgs/s over all producers; 0 = as fast as possible (closed loop)
    batch: int = 1
    queues: int = 8
    in_flight: int = 256  # per process: async sends (or batches) outstanding
    sync: bool = False
    consumers: int = 1  # consumer instances per process
    consume_threads: int = 4
    consume_batch: int = 32
    topic: str = ""  # "" = a fresh topic per run
    send_timeout_s: float = 3.0
    drain_timeout_s: float = 30.0
    final_read_s: float = 60.0  # at the end: time to read back acknowledged, unreceived messages; 0 = no read
    record: bool = True
    flush: str = "ASYNC_FLUSH"
    driver: str = "rocketmq"  # harness.drivers.DRIVER_NAMES: the client (and, for a peer, the broker) driven
    broker_impl: BrokerImpl = "reference"  # the embedded topology's broker: "reference" or "rocketmq"
    peer_client: PeerClient = DEFAULT_PEER_CLIENT  # a peer driver's send path: "lean" or "library"
    # The rocketmq driver's send path: "library" (the faithful client: its behaviour is part of what a scenario
    # tests) or "lean" (harness.rocketmq_lean).
    rocketmq_client: RocketMQClient = DEFAULT_ROCKETMQ_CLIENT
    rocketmq_home: str = ""  # "" = $ROCKETMQ_HOME, else ../shared/rocketmq-4.9.8 (harness/rocketmq.py)
    broker_conf: tuple[str, ...] = ()
    store_dir: str = ""
    sysctl_profile: str = ""
    fio: str = ""  # "", "quick" or "full"
    # backlog
    backlog_bytes: int = 16 << 20
    drain_ratio: float = 1.0
    drain_rate: float = -1.0  # -1 = keep the production rate while draining; 0 = stop producers
    warmup_s: float = 2.0
    cold: bool = False
    memory_max: int = 0  # embedded broker in a memory cgroup of this limit, bytes (harness.memory_cgroup); 0 = none
    stop_after_drain: bool = False  # end the run once the backlog is drained (a backlog of GiB: no idle minutes)
    head_readers: int = 0  # consumers (per process) of a second group that keeps up with the sends, never paused
    # queues
    queue_counts: tuple[int, ...] = (1, 100, 1000, 10000)
    max_queues_per_topic: int = 1000
    phase_s: float = 0.0  # 0 = the run time split evenly over the phases
    # transactions: each plan's share of the transactions (scenarios/tx_driver.py)
    tx_mix: str = "commit=0.5,rollback=0.2,unknown_commit=0.2,unknown_rollback=0.1,never=0"
    # filtering
    selectivity: float = 0.1  # share of the messages each filter matches
    filter_messages: int = 20_000  # messages produced for the filter comparison
    filter_modes: str = "tag,sql92,filterserver"
    extra: dict[str, Any] = field(default_factory=dict)

    def params(self) -> dict[str, Any]:
        """meta.json ``params``."""
        d = asdict(self)
        d.pop("extra")
        d["broker_conf"] = list(self.broker_conf)
        d["queue_counts"] = list(self.queue_counts)
        return {**d, **self.extra}

    def broker_conf_dict(self) -> dict[str, str]:
        conf = {"flushDiskType": self.flush}
        for item in self.broker_conf:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise OptionError(f"--broker-conf {item!r}: expected KEY=VALUE")
            conf[key.strip()] = value.strip()
        return conf


def parse_host(host: str | None) -> str | None:
    """The name-server address list in ``--host``, or None for the embedded topology."""
    if not host or not host.strip():
        return None
    h = host.strip()
    if h.startswith(HOST_SCHEME):
        h = h[len(HOST_SCHEME):]
    elif "://" in h:
        raise OptionError(f"--host {host!r}: expected rmq://HOST:PORT (a name server), not {h.split('://')[0]}://")
    addrs = [a.strip().rstrip("/") for a in h.split(";") if a.strip()]
    for a in addrs:
        name, sep, port = a.rpartition(":")
        if not sep or not name or not port.isdigit():
            raise OptionError(f"--host {host!r}: {a!r} is not HOST:PORT")
    return ";".join(addrs)


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in str(text).replace(" ", "").split(",") if x)
    except ValueError:
        raise OptionError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise OptionError(f"expected positive integers, got {text!r}")
    return values


# option name -> (Settings field, type, help, in web UI)
_OPTIONS: Final[list[tuple[str, str, Callable[[Any], Any], str, bool]]] = [
    ("--run-dir", "run_dir", str, "Directory of run records (runs/<run-id>/)", True),
    ("--message-size", "message_size", int, "Message body size, bytes", True),
    ("--rate", "rate", float, "Messages/s over all producers, open loop (intended send times recorded); "
                              "0 = as fast as possible", True),
    ("--batch", "batch", int, "Messages per send (a RocketMQ batch)", True),
    ("--queues", "queues", int, "Queues of the run's topic (per broker)", True),
    ("--in-flight", "in_flight", int, "Sends outstanding per process (async pipelining)", True),
    ("--consumers", "consumers", int, "Consumer instances per process", True),
    ("--consume-threads", "consume_threads", int, "Listener threads per consumer", True),
    ("--consume-batch", "consume_batch", int, "Messages per pull and per listener call", True),
    ("--topic", "topic", str, "Use this existing topic (consumed from the run's start time) instead of a "
                              "fresh one", True),
    ("--send-timeout", "send_timeout_s", float, "Send timeout, s (a timeout is outcome unknown)", True),
    ("--drain-timeout", "drain_timeout_s", float, "At the end: how long consumers may take to catch up, s", True),
    ("--final-read", "final_read_s", float, "At the end: at most this long to read back, by position, each "
                                            "acknowledged message no consumer received (found = unread, not "
                                            "lost); 0 = no final read, s", True),
    ("--flush", "flush", str, "Embedded broker: flushDiskType (ASYNC_FLUSH or SYNC_FLUSH)", False),
    ("--driver", "driver", str, "Client and broker: rocketmq (this project's client), cpp (RocketMQ's C++ "
                                "client as producer), or a peer broker started embedded: nats, "
                                "rabbitmq-classic, rabbitmq-quorum (docs/interop.md)", False),
    ("--peer-client", "peer_client", str, "A peer driver's send path: lean (the wire protocol spoken directly) or "
                                          "library (nats-py, pika); NATS's consumer follows it, RabbitMQ's uses pika",
     False),
    ("--rocketmq-client", "rocketmq_client", str, "The rocketmq driver's send path: library (this project's "
                                                  "client, the default) or lean (SEND_MESSAGE_V2 frames written "
                                                  "directly, harness.rocketmq_lean); consumers use the library",
     False),
    ("--broker-impl", "broker_impl", str, "Embedded topology: which broker runs, reference or rocketmq (Apache "
                                          "RocketMQ from --rocketmq-home)", False),
    ("--rocketmq-home", "rocketmq_home", str, "Embedded topology: a RocketMQ distribution directory (default "
                                              "$ROCKETMQ_HOME, else ../shared/rocketmq-4.9.8)", False),
    ("--store-dir", "store_dir", str, "Embedded topology: directory for its stores (default: a temporary "
                                      "directory)", False),
    ("--sysctl-profile", "sysctl_profile", str, "Apply this vm.* profile (sysctl_profiles) around the run "
                                                "(needs root; recorded either way)", False),
]


# Scenario-specific options: Settings field -> (flag, type, help); a scenario names the ones it takes.
SCENARIO_OPTIONS: Final[dict[str, tuple[str, Callable[[Any], Any], str]]] = {
    "backlog_bytes": ("--backlog-bytes", parse_size, "Backlog to build while consumers are paused, bytes "
                                                     "(4GiB, 512MiB, or a number)"),
    "memory_max": ("--memory-max", parse_size, "Embedded broker: run it in a memory cgroup limited to this "
                                               "(1GiB ...; root, cgroup v1 or v2 with memory), so its page "
                                               "cache is at most this; 0 = no cgroup"),
    "head_readers": ("--head-readers", int, "Consumers of a second group at the head (never paused), whose "
                                            "send-to-consume latency is recorded while the paused group drains"),
    "drain_ratio": ("--drain-ratio", float, "Share of the backlog to drain (OMB backlogDrainRatio)"),
    "drain_rate": ("--drain-rate", float, "Production rate while draining, msgs/s: -1 = unchanged, 0 = stop "
                                          "producers"),
    "warmup_s": ("--warmup", float, "Seconds of normal production and consumption before the backlog build"),
    "queue_counts": ("--queue-counts", str, "Queue counts of the phases, comma-separated"),
    "max_queues_per_topic": ("--max-queues-per-topic", int, "Queues per topic at most (more queues = more "
                                                           "topics; the broker allows 1024)"),
    "phase_s": ("--phase", float, "Seconds per phase (0 = the run time split evenly)"),
    "tx_mix": ("--tx-mix", str, "Transactions: PLAN=FRACTION,... over commit, rollback, unknown_commit, "
                                "unknown_rollback, never (UNKNOW resolved by check-back as the plan says)"),
    "selectivity": ("--selectivity", float, "Share of the messages each mode's filter matches, in (0, 1]"),
    "filter_messages": ("--filter-messages", int, "Messages produced once, then consumed by each filter mode"),
    "filter_modes": ("--filter-modes", str, "Filter modes to compare, comma-separated: tag, sql92, filterserver"),
}


TOPOLOGY_OPTIONS: Final = frozenset({"memory_max"})
SIZE_OPTIONS: Final = frozenset({"backlog_bytes", "memory_max"})  # read with parse_size (4GiB, 512MiB, bytes)


def register(parser: Any, defaults: Settings, scenario_options: tuple[str, ...] = ()) -> None:
    """Add the options to locust's parser (``events.init_command_line_parser``), with this scenario's
    defaults, plus the scenario-specific ones named in ``scenario_options`` (keys of SCENARIO_OPTIONS, "cold"
    and "stop_after_drain")."""
    group = parser  # LocustArgumentParser: its add_argument knows include_in_web_ui (argument groups do not)
    for flag, name, typ, help_text, web in _OPTIONS:
        default = getattr(defaults, name)
        group.add_argument(flag, dest=name, type=typ, default=default, help=f"{help_text} (default {default!r})",
                           env_var="RMQ_LAB_" + name.upper(), include_in_web_ui=web)
    group.add_argument("--sync", dest="sync", action="store_true", default=defaults.sync,
                       help="Synchronous sends (one outstanding per User) instead of async pipelining",
                       env_var="RMQ_LAB_SYNC")
    group.add_argument("--no-record", dest="record", action="store_false", default=defaults.record,
                       help="Do not record events (for measuring the recording's cost; no check)",
                       env_var="RMQ_LAB_NO_RECORD")
    group.add_argument("--broker-conf", dest="broker_conf", action="append", default=list(defaults.broker_conf),
                       metavar="KEY=VALUE", help="Embedded broker: a broker.conf key (repeatable)",
                       include_in_web_ui=False)
    group.add_argument("--fio", dest="fio", nargs="?", const="quick", default=defaults.fio,
                       choices=["", "quick", "full"], help="Measure the fio baseline of the store's filesystem "
                       "(quick or full) at start; figures go into meta.json", include_in_web_ui=False)
    for name in scenario_options:
        if name == "cold":
            group.add_argument("--cold", dest="cold", action="store_true", default=defaults.cold,
                               help="Drop the page cache before draining (root: sync; echo 1 > "
                                    "/proc/sys/vm/drop_caches), recorded as a fault", env_var="RMQ_LAB_COLD")
            continue
        if name == "stop_after_drain":
            group.add_argument("--stop-after-drain", dest="stop_after_drain", action="store_true",
                               default=defaults.stop_after_drain, env_var="RMQ_LAB_STOP_AFTER_DRAIN",
                               help="End the run as soon as the backlog is drained (-t is then a bound)")
            continue
        flag, typ, help_text = SCENARIO_OPTIONS[name]
        default = getattr(defaults, name)
        if name == "queue_counts":
            default = ",".join(map(str, default))
        # The memory cgroup shapes the embedded topology once, at start: not offered in the web form.
        group.add_argument(flag, dest=name, type=typ, default=default, help=f"{help_text} (default {default!r})",
                           env_var="RMQ_LAB_" + name.upper(), include_in_web_ui=name not in TOPOLOGY_OPTIONS)


def settings_from(options: Any, defaults: Settings) -> Settings:
    """Read ``Settings`` from locust's parsed options (values typed again: the web form may give strings)."""
    ns: Mapping[str, Any] = vars(options) if options is not None else {}
    values: dict[str, Any] = {}
    for f in fields(Settings):
        if f.name == "extra" or f.name not in ns or ns[f.name] is None:
            continue
        raw = ns[f.name]
        current = getattr(defaults, f.name)
        if f.name == "queue_counts":
            values[f.name] = _ints(",".join(map(str, raw)) if isinstance(raw, list | tuple) else raw)
        elif f.name == "broker_conf":
            values[f.name] = tuple(raw) if isinstance(raw, list | tuple) else (str(raw),)
        elif f.name in SIZE_OPTIONS:
            try:
                values[f.name] = raw if isinstance(raw, int) else parse_size(str(raw))
            except ValueError as exc:
                raise OptionError(f"option {f.name}: {exc}") from None
        elif isinstance(current, bool):
            values[f.name] = raw if isinstance(raw, bool) else str(raw).lower() in ("1", "true", "yes", "on")
        else:
            try:
                values[f.name] = type(current)(raw)
            except (TypeError, ValueError):
                raise OptionError(f"option {f.name}: cannot read {raw!r} as {type(current).__name__}") from None
    s = replace(defaults, **values)
    validate(s)
    return s


def validate(s: Settings) -> None:
    problems = []
    if s.message_size < 1:
        problems.append("--message-size must be >= 1")
    if s.rate < 0:
        problems.append("--rate must be >= 0")
    if s.batch < 1:
        problems.append("--batch must be >= 1")
    if not 1 <= s.queues <= 1024:
        problems.append("--queues must be in [1, 1024] (the broker's limit per topic)")
    if s.in_flight < 1 or s.consumers < 0 or s.consume_threads < 1 or not 1 <= s.consume_batch <= 1024:
        problems.append("--in-flight >= 1, --consumers >= 0, --consume-threads >= 1, --consume-batch in [1, 1024]")
    if s.flush not in FLUSH_TYPES:
        problems.append(f"--flush must be one of {', '.join(FLUSH_TYPES)}")
    if s.driver not in DRIVER_NAMES:
        problems.append(f"--driver must be one of {', '.join(DRIVER_NAMES)}")
    if s.peer_client not in PEER_CLIENTS:
        problems.append(f"--peer-client must be one of {', '.join(PEER_CLIENTS)}")
    if s.rocketmq_client not in ROCKETMQ_CLIENTS:
        problems.append(f"--rocketmq-client must be one of {', '.join(ROCKETMQ_CLIENTS)}")
    if s.broker_impl not in IMPLS:
        problems.append(f"--broker-impl must be one of {', '.join(IMPLS)}")
    if s.backlog_bytes < 1 or s.memory_max < 0 or s.head_readers < 0:
        problems.append("--backlog-bytes must be > 0, --memory-max >= 0, --head-readers >= 0")
    if not 0 < s.drain_ratio <= 1:
        problems.append("--drain-ratio must be in (0, 1]")
    if not 1 <= s.max_queues_per_topic <= 1024:
        problems.append("--max-queues-per-topic must be in [1, 1024]")
    if not (s.drain_timeout_s >= 0 and s.final_read_s >= 0):  # also refuses nan
        problems.append("--drain-timeout and --final-read must be >= 0 s")
    if not 0 < s.selectivity <= 1 or s.filter_messages < 1:
        problems.append("--selectivity must be in (0, 1] and --filter-messages >= 1")
    modes = [m.strip() for m in s.filter_modes.split(",") if m.strip()]
    if not modes or set(modes) - {"tag", "sql92", "filterserver"}:
        problems.append("--filter-modes: comma-separated tag, sql92 and filterserver")
    if problems:
        raise OptionError("; ".join(problems))
