"""This module owns running a broker as a process: logging to stderr and ``{storePathRootDir}/logs/broker.log``,
the event loop, SIGTERM/SIGINT → graceful shutdown (BrokerStartup / ShutdownHookThread, 4.9.8)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable

from reference_broker.broker.broker_config import BrokerConfig
from reference_broker.broker.controller import BrokerController, BrokerStartError
from reference_broker.common import compiled
from reference_broker.remoting.server import new_event_loop
from reference_broker.store.config import MessageStoreConfig
from reference_broker.store.message_store import StoreLockedError

log = logging.getLogger("reference_broker.broker")

# The event loop shares the GIL with the store's dispatch and flush threads; with CPython's default 5 ms
# switch interval a busy dispatch thread holds every request back by up to 5 ms. Measured in BENCHMARKS.md.
SWITCH_INTERVAL_S = float(os.environ.get("RMQ_LAB_SWITCH_INTERVAL_S", "0.0005"))


def setup_logging(store_config: MessageStoreConfig) -> None:
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    err = logging.StreamHandler(sys.stderr)
    err.setFormatter(fmt)
    root.addHandler(err)
    logs = store_config.store_path_root_dir / "logs"
    try:
        logs.mkdir(parents=True, exist_ok=True)
        fh = logging.FileHandler(logs / "broker.log", encoding="utf-8")
        fh.setFormatter(fmt)
        root.addHandler(fh)
    except OSError as exc:
        log.warning("cannot write the log file under %s: %s", logs, exc)


def run_broker(broker_config: BrokerConfig, store_config: MessageStoreConfig, host: str = "0.0.0.0",
               announce: Callable[[str], None] = print) -> int:
    """Run until SIGINT/SIGTERM; 0 after a clean shutdown, 1 when the broker cannot start."""
    setup_logging(store_config)
    try:
        controller = BrokerController(broker_config, store_config, host)
        controller.initialize()
        log.info("put path: %s", compiled.runtime_info())  # compiled or pure (common/compiled.py)
    except (BrokerStartError, StoreLockedError, OSError, ValueError) as exc:
        log.error("the broker cannot start: %s", exc)
        return 1
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    if SWITCH_INTERVAL_S:
        sys.setswitchinterval(SWITCH_INTERVAL_S)
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)

    async def main() -> int:
        try:
            await controller.start()
        except OSError as exc:
            log.error("the broker cannot listen on %s:%d: %s", host, broker_config.listen_port, exc)
            await controller.shutdown()
            return 1
        # BrokerStartup's line, which scripts wait for.
        announce(f"The broker[{broker_config.broker_name}, {controller.broker_addr}] boot success. "
                 f"serializeType=JSON and name server is {broker_config.namesrv_addr}")
        await stop.wait()
        log.info("shutdown hook was invoked")
        await controller.shutdown()
        return 0

    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()
