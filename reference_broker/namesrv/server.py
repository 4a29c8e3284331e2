"""This module owns the name server's shell: a RemotingServer, the processor, and the periodic expiry scan.

NamesrvController in 4.9.8 schedules scanNotActiveBroker every 10 s (after a 5 s delay; we scan after the first
interval). All table access happens on the server's one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

from reference_broker.namesrv.kv_config import KVConfigManager
from reference_broker.namesrv.processor import NamesrvProcessor, wall_clock_ms
from reference_broker.namesrv.route_info import BROKER_CHANNEL_EXPIRED_TIME_MS, RouteInfoManager
from reference_broker.remoting.server import LoopThread, RemotingServer

log = logging.getLogger(__name__)


class NameServer:
    def __init__(self, host: str = "0.0.0.0", port: int = 9876, scan_interval_s: float = 10.0,
                 broker_expired_ms: int = BROKER_CHANNEL_EXPIRED_TIME_MS, kv_config_path: Path | None = None) -> None:
        """``kv_config_path``: the KV config's file (kvConfigPath); None keeps it in memory only (tests)."""
        self.host = host
        self._requested_port = port
        self.scan_interval_s = scan_interval_s
        self.broker_expired_ms = broker_expired_ms
        self.route_info = RouteInfoManager()
        self.kv_config = KVConfigManager(kv_config_path)
        self.kv_config.load()  # NamesrvController.initialize
        self.processor = NamesrvProcessor(self.route_info, kv_config=self.kv_config)
        self.remoting = RemotingServer()
        self.processor.register_with(self.remoting)
        self.remoting.close_hooks.append(self.processor.on_channel_close)
        self._scan_task: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        return self.remoting.port

    def scan_once(self) -> list[str]:
        return self.route_info.scan_not_active_broker(wall_clock_ms(), self.broker_expired_ms)

    async def _scan_loop(self) -> None:
        while True:
            await asyncio.sleep(self.scan_interval_s)
            try:
                self.scan_once()
            except Exception:  # keep scanning; Java logs and the scheduled task carries on
                log.exception("scanNotActiveBroker failed")

    async def start(self) -> None:
        await self.remoting.start(self.host, self._requested_port)
        self._scan_task = asyncio.get_running_loop().create_task(self._scan_loop())

    async def stop(self) -> None:
        task, self._scan_task = self._scan_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.remoting.stop()

    def start_in_thread(self, timeout_s: float = 10.0) -> NameServerThread:
        """Run on a fresh event loop in a daemon thread (tests); returns once listening."""
        st = NameServerThread(self, self.start, self.stop, "namesrv")
        st.start(timeout_s)
        return st


NameServerThread = LoopThread[NameServer]


async def serve_forever(server: NameServer, stop: asyncio.Event,
                        on_started: Callable[[NameServer], None] | None = None) -> None:
    """Start, run until ``stop`` is set, then stop (the CLI's loop)."""
    await server.start()
    try:
        if on_started is not None:
            on_started(server)
        await stop.wait()
    finally:
        await server.stop()
