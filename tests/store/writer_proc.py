"""A store writer to be killed: puts messages and acknowledges each one on stdout once its put returns.

    python tests/store/writer_proc.py --dir D --flush sync|async [--count N] [--threads T] [--start I]

Opens a MessageStore on ``D`` (recovering whatever a previous run left) and puts message ``i`` for
``i = start, start+1, …`` (up to ``count`` of them; 0 = no limit) to topic ``KillTopic``, queue
``i % 4``, key ``k<i>``, body ``body_of(i)``. After a put returns PUT_OK it writes and flushes

    ack <i> <queue_id> <queue_offset> <phys_offset>

(any other status: ``nack <i> <status>``). With ``--threads T`` thread ``t`` puts the indexes
``start + t, start + t + T, …``. It prints ``ready`` once the store has started and then runs until
killed: it never shuts the store down (when done it sleeps).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from reference_broker.common.record import MessageExtBrokerInner
from reference_broker.store.config import FlushDiskType, MessageStoreConfig
from reference_broker.store.message_store import MessageStore
from reference_broker.store.status import PutMessageStatus

TOPIC = "KillTopic"
QUEUES = 4
COMMIT_LOG_FILE = 1024 * 1024
CQ_FILE = 6000
HASH_SLOTS = 1000
INDEX_NUM = 4000


def config(root: Path, flush: FlushDiskType) -> MessageStoreConfig:
    return MessageStoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=COMMIT_LOG_FILE,
        mapped_file_size_consume_queue=CQ_FILE,
        max_hash_slot_num=HASH_SLOTS,
        max_index_num=INDEX_NUM,
        flush_disk_type=flush,
    )


def body_of(i: int) -> bytes:
    """Contains ``i``; the length varies with it (30 to 329 bytes)."""
    head = f"message-{i}|".encode()
    return (head * (1 + (30 + i * 7919 % 300) // len(head)))[: 30 + i * 7919 % 300]


def key_of(i: int) -> str:
    return f"k{i}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("--flush", choices=["sync", "async"], required=True)
    ap.add_argument("--count", type=int, default=0, help="messages to put in all (0: until killed)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--start", type=int, default=0, help="index of the first message")
    args = ap.parse_args()

    flush = FlushDiskType.SYNC_FLUSH if args.flush == "sync" else FlushDiskType.ASYNC_FLUSH
    store = MessageStore(config(args.dir, flush))
    if not store.load():
        sys.stderr.write("store load failed\n")
        sys.exit(2)
    store.start()
    out = sys.stdout
    out_lock = threading.Lock()
    with out_lock:
        out.write("ready\n")
        out.flush()
    end = args.start + args.count if args.count else None

    def writer(first: int) -> None:
        i = first
        while end is None or i < end:
            msg = MessageExtBrokerInner(TOPIC, body_of(i), i % QUEUES, properties={"KEYS": key_of(i)},
                                        born_timestamp=int(time.time() * 1000))
            r = store.put_message(msg)
            if r.status is PutMessageStatus.PUT_OK and r.append is not None:
                line = f"ack {i} {i % QUEUES} {r.append.logics_offset} {r.append.wrote_offset}\n"
            else:
                line = f"nack {i} {r.status.name}\n"
            with out_lock:
                out.write(line)
                out.flush()
            i += args.threads

    threads = [threading.Thread(target=writer, args=(args.start + t,), daemon=True) for t in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    while True:  # done: wait to be killed, never shut down
        time.sleep(3600)


if __name__ == "__main__":
    main()
