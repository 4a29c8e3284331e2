"""A store with a running schedule service, to be killed: puts delayed messages and acknowledges each.

    python tests/broker/schedule_writer_proc.py --dir D --flush sync|async [--start I]

Opens a MessageStore and a ScheduleMessageService on ``D`` (recovering whatever a previous run left,
``load()`` of the saved delay offsets included) and puts message ``i`` for ``i = start, start+1, …``
to topic ``DelayTopic``, queue ``i % 2``, key ``k<i>``, delay level ``1 + i % 3``. After a put
returns PUT_OK it writes and flushes ``ack <i>``. It prints ``ready`` once both have started, then
runs until killed: it never shuts down.

Also the test-side configuration: ``MsDelayConfig`` accepts millisecond delay levels.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from reference_broker.broker.delay_level import parse_delay_levels
from reference_broker.broker.schedule_message import ScheduleMessageService
from reference_broker.common import message as mc
from reference_broker.common.record import MessageExtBrokerInner
from reference_broker.store.config import FlushDiskType, MessageStoreConfig
from reference_broker.store.message_store import MessageStore
from reference_broker.store.status import PutMessageStatus

TOPIC = "DelayTopic"
QUEUES = 2
LEVELS = "100ms 200ms 300ms"
PERSIST_INTERVAL_MS = 200


class MsDelayConfig(MessageStoreConfig):
    """The store config with millisecond delay levels ("100ms"): MessageStoreConfig.delay_level_table_ms
    accepts only RocketMQ's s/m/h/d, and tests cannot wait seconds per level."""

    def delay_level_table_ms(self) -> dict[int, int]:
        return parse_delay_levels(self.message_delay_level)


def config(root: Path, flush: FlushDiskType) -> MsDelayConfig:
    return MsDelayConfig(store_path_root_dir=root, mapped_file_size_commit_log=256 * 1024,
                         mapped_file_size_consume_queue=20 * 1000, max_hash_slot_num=1000, max_index_num=4000,
                         flush_disk_type=flush, message_delay_level=LEVELS)


def level_of(i: int) -> int:
    return 1 + i % 3


def key_of(i: int) -> str:
    return f"k{i}"


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("--flush", choices=["sync", "async"], required=True)
    ap.add_argument("--start", type=int, default=0, help="index of the first message")
    args = ap.parse_args()

    flush = FlushDiskType.SYNC_FLUSH if args.flush == "sync" else FlushDiskType.ASYNC_FLUSH
    store = MessageStore(config(args.dir, flush))
    if not store.load():
        sys.stderr.write("store load failed\n")
        sys.exit(2)
    svc = ScheduleMessageService(store, args.dir, first_delay_ms=0, persist_interval_ms=PERSIST_INTERVAL_MS)
    if not svc.load():
        sys.stderr.write(f"schedule service load failed: {svc.offsets.last_error}\n")
        sys.exit(3)
    store.start()
    svc.start()
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    i = args.start
    while True:
        msg = MessageExtBrokerInner(TOPIC, f"body-{i}".encode(), i % QUEUES,
                                    properties={mc.PROPERTY_KEYS: key_of(i),
                                                mc.PROPERTY_DELAY_TIME_LEVEL: str(level_of(i))},
                                    born_timestamp=int(time.time() * 1000))
        r = store.put_message(msg)
        out.write(f"ack {i}\n" if r.status is PutMessageStatus.PUT_OK else f"nack {i} {r.status.name}\n")
        out.flush()
        i += 1
        time.sleep(0.002)  # spread the puts over the delays so deliveries interleave with them


if __name__ == "__main__":
    main()
