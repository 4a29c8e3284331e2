"""Command-line entry point (``python -m reference_broker`` / ``rmq-lab``)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType

import click

from reference_broker import __version__
from reference_broker.namesrv.kv_config import DEFAULT_PATH as KV_CONFIG_DEFAULT_PATH


@click.group()
@click.version_option(__version__, prog_name="rmq-lab")
def main() -> None:
    """RocketMQ store lab."""


@main.group()
def bench() -> None:
    """Benchmarks."""


def _sizes_option(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[int, ...] | None:
    from reference_broker.bench.store_plan import parse_sizes

    if value is None:
        return None
    try:
        return parse_sizes(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


def _sigterm_as_interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@bench.command("store")
@click.option("--quick", is_flag=True, help="Short run, under a minute: fewer messages, 64M/128M logs, short fio jobs.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object on stdout and nothing else; progress goes to stderr.")
@click.option("--dir", "directory", type=click.Path(exists=True, file_okay=False, writable=True, path_type=Path),
              help="Existing directory to put the stores in (a fresh subdirectory is made there and removed "
                   "afterwards). Default: a temporary directory under $TMPDIR or /tmp.")
@click.option("--no-fio", is_flag=True, help="Skip the fio device baselines.")
@click.option("--sizes", callback=_sizes_option, metavar="SIZES",
              help='Commit-log sizes for the recovery runs, comma-separated, binary units (K, M, G). '
                   'Default "1G,4G"; with --quick "64M,128M".')
@click.option("--scale", type=click.FloatRange(min=0.001, max=100.0), default=1.0, hidden=True,
              help="Multiply message counts and durations (tests).")
@click.option("--many-queues", type=click.IntRange(min=2, max=1_000_000), default=10_000, hidden=True,
              help="Queue count of the fan-out comparison (tests; the keys follow the count).")
def store(quick: bool, as_json: bool, directory: Path | None, no_fio: bool, sizes: tuple[int, ...] | None,
          scale: float, many_queues: int) -> None:
    """Benchmark the message store: append, group commit, queue fan-out and recovery, next to fio."""
    from reference_broker.bench.report import format_table
    from reference_broker.bench.store_bench import run_store_bench
    from reference_broker.bench.store_plan import Plan, disk_needed_bytes
    from reference_broker.bench.store_workload import BenchError, raise_fd_limit

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    plan = Plan.make(quick=quick, scale=scale, sizes=sizes, fio=not no_fio, many_queues=many_queues)
    parent = directory if directory is not None else Path(tempfile.gettempdir())
    free = shutil.disk_usage(parent).free
    need = disk_needed_bytes(plan)
    if free < need:
        raise click.ClickException(f"not enough free space in {parent}: the benchmark needs about "
                                   f"{need / 2**30:.1f} GiB, {free / 2**30:.1f} GiB is free "
                                   "(use --dir elsewhere, or smaller --sizes)")
    raise_fd_limit()
    t0 = time.monotonic()

    def progress(msg: str) -> None:
        click.echo(f"[{time.monotonic() - t0:6.1f}s] {msg}", err=True)

    previous = signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    base = Path(tempfile.mkdtemp(prefix="rmq-lab-bench-", dir=parent))
    try:
        result = run_store_bench(plan, base, progress)
    except BenchError as e:
        raise click.ClickException(str(e)) from None
    finally:
        shutil.rmtree(base, ignore_errors=True)
        signal.signal(signal.SIGTERM, previous)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        click.echo(format_table(result))


_NAMESRV = click.option("-n", "--namesrv-addr", default="127.0.0.1:9876", show_default=True,
                        help="Name server address(es), ';'-separated.")


@bench.command("sql92")
@click.option("--number", type=click.IntRange(1), default=20_000, show_default=True, help="Calls per round.")
def bench_sql92(number: int) -> None:
    """What SQL92 filtering costs the broker per message: properties read, selectors evaluated (µs)."""
    from reference_broker.bench.filter_bench import run

    for what, us in run(number):
        click.echo(f"{us:8.2f} µs  {what}")


@bench.command("filtersrv")
@click.option("--batches", type=click.IntRange(1), default=200, show_default=True)
def bench_filtersrv(batches: int) -> None:
    """What the FilterServer's sandbox costs per message: a batch through a sandboxed worker vs in-process (µs)."""
    from reference_broker.bench.filter_bench import run_sandbox

    for what, us in run_sandbox(batches):
        click.echo(f"{us:10.2f} µs  {what}")


@bench.command("producer")
@_NAMESRV
@click.option("-t", "--topic", default="BenchmarkTest", show_default=True)
@click.option("-w", "--threads", type=click.IntRange(1, 1024), default=64, show_default=True,
              help="Sending threads (sync mode).")
@click.option("-s", "--size", type=click.IntRange(1, 4 * 1024 * 1024), default=128, show_default=True,
              help="Message body size in bytes.")
@click.option("-k", "--key-enable", is_flag=True, help="Give every message a key (indexed).")
@click.option("-l", "--tag-count", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("-b", "--batch-size", type=click.IntRange(1, 1024), default=1, show_default=True,
              help="Messages per request (SEND_BATCH_MESSAGE when > 1).")
@click.option("-y", "--async-send", is_flag=True, help="Asynchronous sends from one thread, --in-flight at once.")
@click.option("--in-flight", type=click.IntRange(1, 100_000), default=64, show_default=True)
@click.option("-r", "--rate", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Fixed send rate per process (implies --async-send; open loop: latency counts from each "
                   "message's intended send time). 0: as fast as possible.")
@click.option("-q", "--quantity", type=click.IntRange(min=0), default=0, show_default=True,
              help="Stop after this many messages per process (0: run for --duration).")
@click.option("-d", "--duration", type=click.FloatRange(min=0.1, max=86_400), default=30.0, show_default=True,
              help="Seconds to run.")
@click.option("-i", "--report-interval", type=click.FloatRange(min=0.1), default=10.0, show_default=True)
@click.option("-p", "--processes", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Producer processes; their samples are merged (exact percentiles).")
@click.option("--lean", is_flag=True,
              help="Pre-encoded frames on one connection per process instead of the client library (~10x less "
                   "client CPU per message; async with --in-flight, batches allowed, no keys; with --rate, latency "
                   "counts from each frame's write and the client's pacing lag is reported).")
@click.option("--json", "as_json", is_flag=True, help="Print the final summary as JSON on stdout.")
def bench_producer(namesrv_addr: str, topic: str, threads: int, size: int, key_enable: bool, tag_count: int,
                   batch_size: int, async_send: bool, in_flight: int, rate: float, quantity: int, duration: float,
                   report_interval: float, processes: int, lean: bool, as_json: bool) -> None:
    """Send as fast as possible and print RocketMQ's benchmark line (plus percentiles)."""
    from reference_broker.bench.client_bench import complete_line, run_producers
    from reference_broker.bench.producer_stats import ProducerOptions

    async_send = async_send or rate > 0 or lean
    if lean and key_enable:
        raise click.BadParameter("--lean sends no KEYS (each message still gets its UNIQ_KEY)", param_hint="-k")
    if async_send and batch_size > 1 and not lean:
        raise click.BadParameter("--async-send (or --rate) and --batch-size > 1 cannot be combined",
                                 param_hint="-b")
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    opts = ProducerOptions(namesrv_addr, topic, threads, size, key_enable, tag_count, batch_size, async_send,
                           in_flight, duration, quantity, report_interval, rate=rate, lean=lean)
    echo = (lambda line: click.echo(line, err=True)) if as_json else click.echo
    summary = run_producers(opts, processes, echo)
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        click.echo(complete_line(summary))
    if summary["messages"] == 0:
        sys.exit(1)


@bench.command("consumer")
@_NAMESRV
@click.option("-t", "--topic", default="BenchmarkTest", show_default=True)
@click.option("-g", "--group", default="benchmark_consumer", show_default=True)
@click.option("-w", "--threads", type=click.IntRange(1, 1024), default=20, show_default=True)
@click.option("-e", "--expression", default="*", show_default=True, help="Tag expression.")
@click.option("--from-first", is_flag=True, help="A new group starts at the first offset.")
@click.option("-d", "--duration", type=click.FloatRange(min=0.1, max=86_400), default=30.0, show_default=True)
@click.option("-i", "--report-interval", type=click.FloatRange(min=0.1), default=10.0, show_default=True)
@click.option("-p", "--processes", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Consumer processes in the group (they share the queues); their counts and samples are merged.")
@click.option("--json", "as_json", is_flag=True)
def bench_consumer(namesrv_addr: str, topic: str, group: str, threads: int, expression: str, from_first: bool,
                   duration: float, report_interval: float, processes: int, as_json: bool) -> None:
    """Consume and print the Consumer tool's line: TPS, born-to-consume and store-to-consume times."""
    from reference_broker.bench.client_bench import ConsumerOptions, run_consumers

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    opts = ConsumerOptions(namesrv_addr, topic, group, threads, expression, from_first, duration, report_interval)
    summary = run_consumers(opts, processes, (lambda line: click.echo(line, err=True)) if as_json else click.echo)
    click.echo(json.dumps(summary, indent=2) if as_json else
               f"[Complete] Consumed: {summary['consumed']} TPS: {int(summary['tps'])} "
               f"AVG(B2C) RT(ms): {summary['avg_b2c_ms']:7.3f} p99 send-to-consume(ms): {summary['e2e_p99_ms']:.3f}")


@bench.command("bare-broker")
@_NAMESRV
@click.option("-p", "--port", type=click.IntRange(1, 65535), required=True, help="Listen port on 127.0.0.1.")
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Directory for its recycled mapped files (created).")
@click.option("-t", "--topic", "topics", multiple=True, default=("BareBenchmark",), show_default=True,
              help="Topic to register (4 queues); repeatable.")
def bench_bare_broker(namesrv_addr: str, port: int, root: Path, topics: tuple[str, ...]) -> None:
    """The baseline of the broker benchmark: parse, append a record and a unit, answer; nothing else.
    Never a store: it recycles its files and keeps nothing."""
    from reference_broker.bench.bare_broker import serve

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    serve(namesrv_addr, port, root, list(topics), ready=lambda: click.echo("The bare broker boot success", err=True))


@main.command("namesrv")
@click.option("-p", "--port", type=click.IntRange(min=0, max=65535), default=9876, show_default=True,
              help="Listen port (0: any free port).")
@click.option("--host", default="0.0.0.0", show_default=True, help="Listen address.")
@click.option("--broker-expired-s", type=click.FloatRange(min=0.001), default=120.0, show_default=True,
              help="Drop a broker not heard from for this long (BROKER_CHANNEL_EXPIRED_TIME).")
@click.option("--scan-interval-s", type=click.FloatRange(min=0.001), default=10.0, show_default=True,
              help="How often to look for expired brokers.")
@click.option("--kv-config-path", type=click.Path(dir_okay=False, path_type=Path),
              default=KV_CONFIG_DEFAULT_PATH, show_default=True,
              help="The KV config's file (kvConfigPath; PUT/GET/DELETE_KV_CONFIG).")
def namesrv(port: int, host: str, broker_expired_s: float, scan_interval_s: float, kv_config_path: Path) -> None:
    """Run a name server until SIGINT or SIGTERM."""
    import asyncio

    from reference_broker.namesrv.server import NameServer, serve_forever
    from reference_broker.remoting.server import new_event_loop

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    server = NameServer(host, port, scan_interval_s=scan_interval_s,
                        broker_expired_ms=max(1, round(broker_expired_s * 1000)), kv_config_path=kv_config_path)

    def booted(srv: NameServer) -> None:
        logging.getLogger("reference_broker.namesrv").info("listening on %s:%d", host, srv.port)
        click.echo("The Name Server boot success. serializeType=JSON")  # NamesrvStartup's line

    loop = new_event_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        loop.run_until_complete(serve_forever(server, stop, booted))
    except OSError as e:
        raise click.ClickException(f"cannot listen on {host}:{port}: {e}") from None
    finally:
        loop.close()


@main.command("broker")
@click.option("-n", "--namesrv-addr", metavar="HOST:PORT[;HOST:PORT]",
              help="Name server address list (default: namesrvAddr from the config, or $NAMESRV_ADDR).")
@click.option("-c", "--config-file", type=click.Path(dir_okay=False, path_type=Path),
              help="broker.conf with RocketMQ's key names (brokerName, listenPort, storePathRootDir, ...).")
@click.option("--host", default="0.0.0.0", show_default=True, help="Listen address.")
def broker(namesrv_addr: str | None, config_file: Path | None, host: str) -> None:
    """Run a broker until SIGINT or SIGTERM (then shut down cleanly: flush, persist, remove abort)."""
    from reference_broker.broker.broker_config import BrokerConfError, BrokerConfig, load_broker_conf, parse_conf_value
    from reference_broker.broker.serve import run_broker
    from reference_broker.store.config import MessageStoreConfig

    if config_file is not None:
        try:
            broker_config, store_config = load_broker_conf(config_file)
        except BrokerConfError as e:
            raise click.ClickException(str(e)) from None
    else:
        broker_config, store_config = BrokerConfig(), MessageStoreConfig()
    if namesrv_addr:
        try:  # the same check as namesrvAddr in the file
            broker_config.namesrv_addr = parse_conf_value("namesrvAddr", namesrv_addr)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="-n") from None
    code = run_broker(broker_config, store_config, host, announce=click.echo)
    if code:
        sys.exit(code)


@main.command("filtersrv")
@click.option("--broker", "broker_addr", required=True, metavar="HOST:PORT", help="The broker to serve.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Listen address (loopback).")
@click.option("-p", "--port", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="Listen port (0: any free port, as 4.2.0's filter server).")
@click.option("--parent-pid", type=click.IntRange(min=0), default=0, show_default=True,
              help="Exit when this process (the broker) is gone.")
@click.option("--register-interval-s", type=click.FloatRange(min=0.05), default=10.0, show_default=True,
              help="REGISTER_FILTER_SERVER to the broker this often.")
@click.option("--cpu-s", type=click.IntRange(min=1), default=60, show_default=True,
              help="RLIMIT_CPU of each sandboxed filter worker (over its life).")
@click.option("--memory-mib", type=click.IntRange(min=64), default=256, show_default=True,
              help="RLIMIT_AS of each sandboxed filter worker.")
@click.option("--budget-ms", type=click.IntRange(min=1), default=100, show_default=True,
              help="CPU-time budget of one match(message) call.")
@click.option("--hide-path", "hidden", multiple=True, type=click.Path(file_okay=False),
              help="A directory the sandboxed workers must not read (the broker's store); repeatable.")
def filtersrv(broker_addr: str, host: str, port: int, parent_pid: int, register_interval_s: float, cpu_s: int,
              memory_mib: int, budget_ms: int, hidden: tuple[str, ...]) -> None:
    """Run a filter server (RocketMQ 4.2.0's FilterServer; the broker starts filterServerNums of them)."""
    from reference_broker.filtersrv.filter_worker import SandboxLimits
    from reference_broker.filtersrv.serve import run_filtersrv

    code = run_filtersrv(broker_addr, host, port, SandboxLimits(cpu_s, memory_mib, budget_ms,
                                                                 tuple(os.path.abspath(h) for h in hidden)),
                         register_interval_s, parent_pid, announce=lambda line: click.echo(line, err=True))
    if code:
        sys.exit(code)


def _add_admin() -> None:
    from reference_broker.tools.admin_cli import admin_cli

    main.add_command(admin_cli)


_add_admin()


if __name__ == "__main__":
    main()
