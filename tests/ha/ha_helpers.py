"""A master and a slave MessageStore in one process, on temp dirs, replicating over loopback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reference_broker.ha import HAClient, HAService, attach_ha
from reference_broker.store.config import BrokerRole
from reference_broker.store.message_store import MessageStore
from tests.store.store_helpers import Stores, make_config, wait_until

# Fast timers for tests; sizes small enough that records split across frames and files.
FAST = {"ha_send_heartbeat_interval_ms": 200, "ha_housekeeping_interval_ms": 20_000,
        "mapped_file_size_commit_log": 64 * 1024, "ha_listen_port": 0}


def open_master(stores: Stores, root: Path, **overrides: Any) -> tuple[MessageStore, HAService]:
    cfg = make_config(root, **{**FAST, **overrides})
    store = stores.new(cfg)
    ha = attach_ha(store)
    assert isinstance(ha, HAService)
    assert store.load()
    store.start()
    return store, ha


def open_slave(stores: Stores, root: Path, master: HAService | None, **overrides: Any) -> tuple[MessageStore, HAClient]:
    values = {**FAST, "broker_role": BrokerRole.SLAVE, **overrides}
    if master is not None:
        values.setdefault("ha_master_address", f"127.0.0.1:{master.port}")
    store = stores.new(make_config(root, **values))
    ha = attach_ha(store)
    assert isinstance(ha, HAClient)
    ha.reconnect_interval_s = 0.2
    assert store.load()
    store.start()
    return store, ha


def log_bytes(store: MessageStore, start: int, end: int) -> bytes:
    """The commit log's bytes in [start, end), read file by file."""
    out = bytearray()
    offset = start
    while offset < end:
        chunk = store.commit_log.get_bulk_data(offset, end - offset)
        assert chunk, f"no bytes at {offset}"
        out += chunk
        offset += len(chunk)
    return bytes(out)


def wait_replicated(master: MessageStore, slave: MessageStore, timeout_s: float = 30.0) -> None:
    """The slave's log reaches the master's max offset and its dispatch has caught up."""
    wait_until(lambda: slave.get_max_phy_offset() == master.get_max_phy_offset(), timeout_s, "replication")
    wait_until(lambda: slave.dispatch_behind_bytes() == 0, timeout_s, "the slave's dispatch")
