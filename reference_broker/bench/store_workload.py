"""The store benchmark's workload pieces: messages as a producer sends them, a fresh store per phase, and
waiting for dispatch. Shared by the phases in store_bench.py and store_recovery_bench.py."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

from reference_broker.common.record import MessageExtBrokerInner
from reference_broker.store.config import FlushDiskType, MessageStoreConfig
from reference_broker.store.message_store import MessageStore, raise_open_files_limit
from reference_broker.store.status import PutMessageStatus

Progress = Callable[[str], None]

TOPIC: Final = "BenchTopic"
BODY_BYTES: Final = 1024
PRODUCER_QUEUES: Final = 4  # defaultTopicQueueNums: a producer spreads its sends over 4 queues
CLEAN_DELAY_S: Final = 10 * 86_400.0  # cleaning must not run during a benchmark
DISPATCH_TIMEOUT_S: Final = 1800.0

OK: Final = PutMessageStatus.PUT_OK


class BenchError(RuntimeError):
    """The benchmark could not produce a trustworthy figure (store refused, wrong recovery, no space)."""


class MessageFactory:
    """Messages as a RocketMQ producer sends them: a 1 KiB body, TAGS and, when keyed, a unique UNIQ_KEY
    (MessageClientIDSetter: 32 hex digits, a 20-digit ip/pid/loader prefix and a 12-digit counter)."""

    def __init__(self, keyed: bool, body_bytes: int = BODY_BYTES) -> None:
        self.keyed = keyed
        self.body = os.urandom(body_bytes)
        self.prefix = f"7F000001{os.getpid() & 0xFFFF:04X}{os.urandom(4).hex().upper()}"

    def make(self, i: int, queue_id: int) -> MessageExtBrokerInner:
        # The properties also in their wire form, as the broker hands a message to the store (it keeps the
        # producer's properties string rather than re-encoding the map).
        if self.keyed:
            uniq = f"{self.prefix}{i:012X}"
            props = {"TAGS": "TagA", "UNIQ_KEY": uniq}
            raw = f"TAGS\x01TagA\x02UNIQ_KEY\x01{uniq}".encode()
        else:
            props = {"TAGS": "TagA"}
            raw = b"TAGS\x01TagA"
        return MessageExtBrokerInner(TOPIC, self.body, queue_id=queue_id, properties=props,
                                     born_timestamp=time.time_ns() // 1_000_000, properties_bytes=raw)


def new_store(root: Path, flush: FlushDiskType = FlushDiskType.ASYNC_FLUSH, **config: Any) -> MessageStore:
    store = MessageStore(MessageStoreConfig(store_path_root_dir=root, flush_disk_type=flush, **config))
    store.clean_initial_delay_s = CLEAN_DELAY_S
    return store


def load_and_start(store: MessageStore) -> None:
    if not store.load():
        raise BenchError(f"store at {store.store_root} failed to load")
    store.start()


@contextlib.contextmanager
def running_store(root: Path, flush: FlushDiskType = FlushDiskType.ASYNC_FLUSH,
                  **config: Any) -> Iterator[MessageStore]:
    store = new_store(root, flush, **config)
    try:
        load_and_start(store)
        yield store
    finally:
        store.shutdown()


def wait_dispatched(store: MessageStore, timeout_s: float = DISPATCH_TIMEOUT_S) -> bool:
    """Sleep until the reput thread has caught up; False at the timeout."""
    deadline = time.monotonic() + timeout_s
    while store.dispatch_behind_bytes() > 0:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.0005)
    return True


def must_dispatch(store: MessageStore) -> None:
    if not wait_dispatched(store):
        raise BenchError(f"dispatch still {store.dispatch_behind_bytes()} bytes behind after {DISPATCH_TIMEOUT_S} s")


def rate(count: int, seconds: float) -> float:
    return round(count / seconds, 1) if seconds > 0 else 0.0


def queued_messages(store: MessageStore, queues: int = PRODUCER_QUEUES) -> int:
    return sum(store.get_max_offset_in_queue(TOPIC, q) for q in range(queues))


def open_fd_count() -> int | None:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return None


def raise_fd_limit() -> int:
    """The soft RLIMIT_NOFILE after raising it to the hard limit (as the store does on load)."""
    return raise_open_files_limit()


def warm_up(store: MessageStore) -> None:
    """One message per producer queue, not timed: the commit-log, index and queue files exist before the
    clock starts, as on a broker that has been running (RocketMQ pre-allocates the next commit-log file)."""
    factory = MessageFactory(False)
    for q in range(PRODUCER_QUEUES):
        if store.put_message(factory.make(q, q)).status is not OK:
            raise BenchError("the store refused a warm-up put")
    must_dispatch(store)


def timed_puts(store: MessageStore, make: Callable[[int, int], MessageExtBrokerInner], messages: int,
                queues: int) -> tuple[int, float, float]:
    """Put ``messages`` round-robin over ``queues``: (accepted, seconds to put, seconds until dispatched)."""
    put = store.put_message
    ok = 0
    t0 = time.perf_counter()
    for i in range(messages):
        if put(make(i, i % queues)).status is OK:
            ok += 1
    t_put = time.perf_counter()
    must_dispatch(store)
    return ok, t_put - t0, time.perf_counter() - t0
