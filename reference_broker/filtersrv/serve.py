"""This module owns running a filter server as a process (FiltersrvStartup, 4.2.0): logging to stderr, the
event loop, SIGTERM/SIGINT → shutdown (its workers killed), and the boot line the broker's supervisor reads."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Callable

from reference_broker.filtersrv.controller import FiltersrvController, die_with_parent
from reference_broker.filtersrv.filter_worker import SandboxLimits
from reference_broker.remoting.server import new_event_loop

BOOT_LINE_PREFIX = "The Filter Server boot success, "


def run_filtersrv(broker_addr: str, host: str, port: int, limits: SandboxLimits, register_interval_s: float,
                  parent_pid: int, announce: Callable[[str], None] = print) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if parent_pid:
        die_with_parent(parent_pid)
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    controller = FiltersrvController(broker_addr, host, port, limits, register_interval_s, parent_pid)
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, controller.stopped.set)

    async def main() -> int:
        try:
            await controller.start()
        except OSError as exc:
            logging.getLogger(__name__).error("the filter server cannot listen on %s:%d: %s", host, port, exc)
            return 1
        announce(BOOT_LINE_PREFIX + controller.addr)
        await controller.stopped.wait()
        await controller.shutdown()
        return 0

    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()
