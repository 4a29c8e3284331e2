"""``python -m reference_broker admin …``: mqadmin-like subcommands over ``tools.admin``. Option letters follow
mqadmin's (-n namesrv, -t topic, -c cluster, -b broker, -g group, -i id, -k key, -o offset); ``--json`` prints
machine-readable output."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from reference_broker.common import message as mc
from reference_broker.common import record as rec
from reference_broker.remoting.errors import RemotingError
from reference_broker.tools import admin

T = TypeVar("T")

_namesrv = click.option("-n", "--namesrv-addr", default=lambda: os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876"),
                        show_default="$NAMESRV_ADDR or 127.0.0.1:9876", help="Name server address(es), ';'-separated.")
_json = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def _run(fn: Callable[[], T]) -> T:
    try:
        return fn()
    except admin.AdminError as exc:
        raise click.ClickException(str(exc)) from None
    except RemotingError as exc:
        raise click.ClickException(f"connection problem: {exc}") from None


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    widths = [max([len(c), *(len(str(r.get(c, ""))) for r in rows)]) for c in columns]
    click.echo("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    for r in rows:
        click.echo("  ".join(str(r.get(c, "")).ljust(w) for c, w in zip(columns, widths, strict=True)))


def _emit(data: Any, as_json: bool, columns: Sequence[str] | None = None) -> None:
    if as_json or columns is None:
        click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
    else:
        _table(data, columns)


@click.group("admin")
def admin_cli() -> None:
    """mqadmin-like administration of a name server and its brokers."""


@admin_cli.command("updateTopic")
@_namesrv
@click.option("-t", "--topic", required=True)
@click.option("-c", "--cluster", help="Create on every master of this cluster.")
@click.option("-b", "--broker-addr", help="Create on this broker only (HOST:PORT).")
@click.option("-r", "--read-queues", type=click.IntRange(1, 1024), default=8, show_default=True)
@click.option("-w", "--write-queues", type=click.IntRange(1, 1024), default=8, show_default=True)
@click.option("-p", "--perm", type=click.IntRange(0, 15), default=6, show_default=True)
@click.option("-o", "--order", is_flag=True)
def update_topic(namesrv_addr: str, topic: str, cluster: str | None, broker_addr: str | None, read_queues: int,
                 write_queues: int, perm: int, order: bool) -> None:
    """Create or update a topic."""
    targets = _run(lambda: admin.update_topic(namesrv_addr, topic, read_queues, write_queues, perm, cluster,
                                              broker_addr, order))
    for addr in targets:
        click.echo(f"create topic to {addr} success.")


@admin_cli.command("updateSubGroup")
@_namesrv
@click.option("-g", "--group", required=True)
@click.option("-c", "--cluster", help="Create on every master of this cluster.")
@click.option("-b", "--broker-addr", help="Create on this broker only (HOST:PORT).")
@click.option("-r", "--retry-max-times", type=click.IntRange(-1, 2**31 - 1), default=16, show_default=True)
@click.option("-q", "--retry-queue-nums", type=click.IntRange(0, 1024), default=1, show_default=True)
@click.option("-d", "--consume-broadcast-enable", type=bool, default=True, show_default=True)
def update_sub_group(namesrv_addr: str, group: str, cluster: str | None, broker_addr: str | None,
                     retry_max_times: int, retry_queue_nums: int, consume_broadcast_enable: bool) -> None:
    """Create or update a subscription group (its retryMaxTimes decides when a failing message goes to the DLQ
    for a client that sends no maxReconsumeTimes)."""
    targets = _run(lambda: admin.update_subscription_group(namesrv_addr, group, retry_max_times, retry_queue_nums,
                                                           consume_broadcast_enable, cluster, broker_addr))
    for addr in targets:
        click.echo(f"create subscription group to {addr} success.")


@admin_cli.command("topicList")
@_namesrv
@_json
def topic_list(namesrv_addr: str, as_json: bool) -> None:
    """Every topic the name server knows."""
    topics = _run(lambda: admin.topic_list(namesrv_addr))
    if as_json:
        _emit(topics, True)
    else:
        for t in topics:
            click.echo(t)


@admin_cli.command("topicStatus")
@_namesrv
@click.option("-t", "--topic", required=True)
@_json
def topic_status(namesrv_addr: str, topic: str, as_json: bool) -> None:
    """Min and max offset per queue."""
    _emit(_run(lambda: admin.topic_status(namesrv_addr, topic)), as_json,
          ["brokerName", "queueId", "minOffset", "maxOffset"])


@admin_cli.command("consumerProgress")
@_namesrv
@click.option("-g", "--group", required=True)
@click.option("-t", "--topic")
@_json
def consumer_progress(namesrv_addr: str, group: str, topic: str | None, as_json: bool) -> None:
    """Broker offset, consumer offset and backlog (diff) per queue."""
    rows = _run(lambda: admin.consumer_progress(namesrv_addr, group, topic))
    _emit(rows, as_json, ["topic", "brokerName", "queueId", "brokerOffset", "consumerOffset", "diff"])
    if not as_json:
        click.echo(f"Diff Total: {sum(r['diff'] for r in rows)}")


@admin_cli.command("resetOffsetByTime")
@_namesrv
@click.option("-g", "--group", required=True)
@click.option("-t", "--topic", required=True)
@click.option("-s", "--timestamp", "timestamp_text", required=True,
              help="now, milliseconds since the epoch, or yyyy-MM-dd#HH:mm:ss:SSS (local time).")
@click.option("-f", "--force", default="true", show_default=True,
              help="true: move to the time even if that is ahead of the committed offset.")
@click.option("-c", "--cplus", is_flag=True, help="Reset C++ clients' offsets (ResetOffsetBodyForC).")
@_json
def reset_offset_by_time(namesrv_addr: str, group: str, topic: str, timestamp_text: str, force: str, cplus: bool,
                         as_json: bool) -> None:
    """Rewind (or advance) a consumer group's offsets on a topic to a time, to the millisecond: live consumers
    pick the new offsets up at once; with none online the stored offsets are moved."""
    forced = force.strip().lower() == "true"  # Boolean.valueOf, as mqadmin reads -f
    timestamp = _run(lambda: admin.parse_timestamp(timestamp_text))
    result = _run(lambda: admin.reset_offset_by_time(namesrv_addr, group, topic, timestamp, forced, cplus))
    if as_json:
        _emit({"mode": result.mode, "timestamp": result.timestamp, "rows": result.rows}, True)
        return
    click.echo(f"rollback consumer offset by specified group[{group}], topic[{topic}], force[{str(forced).lower()}], "
               f"timestamp(string)[{timestamp_text}], timestamp(long)[{timestamp}]")
    columns = ["brokerName", "queueId", "offset"] if result.mode == "broker" else \
        ["brokerName", "queueId", "brokerOffset", "consumerOffset", "timestampOffset", "resetOffset"]
    _table(result.rows, columns)


def _is_offset_msg_id(msg_id: str) -> bool:
    """Does the id decode as an offsetMsgId with a usable broker address? A client id (UNIQ_KEY) has the
    same length and is hex too, but where the port would be it holds the pid and a salt, which rarely
    make a port."""
    try:
        _host, port, offset = rec.decode_message_id(msg_id)
    except rec.MessageIdError:
        return False
    return 0 < port < 65536 and offset >= 0


def _view_message(namesrv_addr: str, msg_id: str, topic: str | None) -> dict[str, Any]:
    """An offsetMsgId is read from the broker inside it; otherwise, or when that fails and a topic is given,
    the id is looked up as a UNIQ_KEY in the topic's index, as DefaultMQAdminExtImpl.viewMessage(topic,
    msgId) does (mqadmin 4.9.8 offers that as queryMsgByUniqueKey; its queryMsgById decodes only)."""
    if _is_offset_msg_id(msg_id):
        try:
            return admin.query_msg_by_id(msg_id)
        except (admin.AdminError, RemotingError):
            if topic is None:
                raise
    elif topic is None:
        raise admin.AdminError(f"{msg_id!r} is not an offsetMsgId; give -t TOPIC to look it up as a client "
                               "message id (UNIQ_KEY)")
    found = [m for m in admin.query_msg_by_key(namesrv_addr, topic, msg_id)
             if m["properties"].get(mc.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) == msg_id]
    if not found:
        raise admin.AdminError(f"no message with offsetMsgId or UNIQ_KEY {msg_id} in topic {topic}")
    return found[0]  # queryMessageByUniqKey: the first match


@admin_cli.command("queryMsgById")
@_namesrv
@click.option("-i", "--msg-id", required=True,
              help="offsetMsgId (the broker address and offset are inside it), or a client id (UNIQ_KEY) with -t.")
@click.option("-t", "--topic", help="The topic to search for a client id (UNIQ_KEY).")
def query_msg_by_id(namesrv_addr: str, msg_id: str, topic: str | None) -> None:
    """Show a message by its offsetMsgId, or by its client id (UNIQ_KEY) in a topic."""
    _emit(_run(lambda: _view_message(namesrv_addr, msg_id.strip(), topic)), True)


@admin_cli.command("queryMsgByKey")
@_namesrv
@click.option("-t", "--topic", required=True)
@click.option("-k", "--key", required=True)
def query_msg_by_key(namesrv_addr: str, topic: str, key: str) -> None:
    """Messages with this key (or unique id) in a topic."""
    _emit(_run(lambda: admin.query_msg_by_key(namesrv_addr, topic, key)), True)


@admin_cli.command("queryMsgByOffset")
@_namesrv
@click.option("-t", "--topic", required=True)
@click.option("-b", "--broker-name", required=True)
@click.option("-i", "--queue-id", type=click.IntRange(min=0), required=True)
@click.option("-o", "--offset", type=click.IntRange(min=0), required=True)
def query_msg_by_offset(namesrv_addr: str, topic: str, broker_name: str, queue_id: int, offset: int) -> None:
    """The message at a queue offset."""
    _emit(_run(lambda: admin.query_msg_by_offset(namesrv_addr, topic, broker_name, queue_id, offset)), True)


@admin_cli.command("clusterList")
@_namesrv
@_json
def cluster_list(namesrv_addr: str, as_json: bool) -> None:
    """Clusters, broker names and addresses."""
    info = _run(lambda: admin.cluster_info(namesrv_addr))
    rows = []
    for cluster, names in sorted(info.get("clusterAddrTable", {}).items()):
        for name in names:
            for bid, addr in sorted(info.get("brokerAddrTable", {}).get(name, {}).get("brokerAddrs", {}).items()):
                rows.append({"cluster": cluster, "brokerName": name, "brokerId": bid, "addr": addr})
    _emit(rows, as_json, ["cluster", "brokerName", "brokerId", "addr"])


@admin_cli.command("brokerStatus")
@click.option("-b", "--broker-addr", required=True)
@_json
def broker_status(broker_addr: str, as_json: bool) -> None:
    """A broker's runtime information."""
    table = _run(lambda: admin.broker_status(broker_addr))
    if as_json:
        _emit(table, True)
    else:
        width = max(map(len, table), default=0)
        for k in sorted(table):
            click.echo(f"{k.ljust(width)} : {table[k]}")


@admin_cli.command("haStatus")
@_namesrv
@click.option("-c", "--cluster", help="Only this cluster's broker groups.")
@_json
def ha_status(namesrv_addr: str, cluster: str | None, as_json: bool) -> None:
    """Replication: each broker group's master and slaves, the offset each slave acknowledged and its lag."""
    rows = _run(lambda: admin.ha_status(namesrv_addr, cluster))
    _emit(rows, as_json, ["brokerName", "brokerId", "addr", "role", "maxOffset", "slaves", "fallBehind",
                          "ackOffset", "lagBytes", "connected"])


@admin_cli.command("checkStore")
@click.argument("store_dir", metavar="DIR", type=click.Path(path_type=Path))
@click.option("--index-slots", type=click.IntRange(min=1), help="maxHashSlotNum of the index files (default: "
              "inferred from their length, with maxIndexNum = 4 x maxHashSlotNum as RocketMQ's defaults).")
@click.option("--index-num", type=click.IntRange(min=1), help="maxIndexNum of the index files (with --index-slots).")
@click.option("--max-problems", type=click.IntRange(min=1), default=50, show_default=True,
              help="Problems listed per kind (the totals count them all).")
@click.option("--slave", is_flag=True, help="The store of a slave: its log may end inside a record its master "
              "had not sent whole (a warning, not a problem).")
@_json
def check_store(store_dir: Path, index_slots: int | None, index_num: int | None, max_problems: int,
                slave: bool, as_json: bool) -> None:
    """Check a stopped broker's store (storePathRootDir) offline, changing nothing.

    Exit 0: clean; 1: problems found; 2: not a store, or unreadable."""
    from reference_broker.store.check import CheckOptions
    from reference_broker.store.check import check_store as run_check
    from reference_broker.store.check_report import render_text

    if (index_slots is None) != (index_num is None):
        raise click.BadParameter("give both --index-slots and --index-num, or neither", param_hint="--index-num")
    report = run_check(store_dir, CheckOptions(index_slots, index_num, max_problems, slave))
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        for line in render_text(report):
            click.echo(line)
    sys.exit(report.exit_code)


@admin_cli.command("quarantineList")
@click.option("-s", "--store-root", required=True, type=click.Path(file_okay=False),
              help="The broker's storePathRootDir.")
@_json
def quarantine_list(store_root: str, as_json: bool) -> None:
    """Commit-log bytes recovery cut and kept under {storePathRootDir}/quarantine (offline)."""
    rows = admin.store_quarantine(store_root)
    if not rows and not as_json:
        click.echo(f"no quarantined files under {store_root}")
        return
    _emit(rows, as_json, ["name", "offset", "bytes", "intact_records", "reason", "path"])
