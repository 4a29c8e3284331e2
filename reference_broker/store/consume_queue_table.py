"""The table of consume queues by topic and queue id: making one queue, loading those on disk, walking them
(DefaultMessageStore.loadConsumeQueue / findConsumeQueue, 4.9.8).

Shared by the store (message_store.py) and, with ``dispatchInSeparateProcess``, the dispatch process
(dispatchd.py): each keeps a table over the same files, the process writing them and the store reading.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from reference_broker.store.config import MessageStoreConfig
from reference_broker.store.consume_queue import ConsumeQueue
from reference_broker.store.consume_queue_ext import ConsumeQueueExt

ConsumeQueueTable = dict[str, dict[int, ConsumeQueue]]


def new_consume_queue(config: MessageStoreConfig, topic: str, queue_id: int) -> ConsumeQueue:
    c = config
    ext = ConsumeQueueExt(topic, queue_id, c.store_path_consume_queue_ext, c.mapped_file_size_consume_queue_ext) \
        if c.enable_consume_queue_ext else None
    return ConsumeQueue(topic, queue_id, c.store_path_consume_queue, c.get_mapped_file_size_consume_queue(),
                        c.consume_queue_alloc_chunk_bytes, ext)


def create_consume_queue(config: MessageStoreConfig, table: ConsumeQueueTable, lock: threading.Lock, topic: str,
                         queue_id: int) -> ConsumeQueue:
    """The queue of ``topic`` and ``queue_id``, made under ``lock`` unless another thread made it first (the
    table is read without the lock on the hot path; only creation takes it)."""
    with lock:
        queues = table.setdefault(topic, {})
        cq = queues.get(queue_id)
        if cq is None:
            cq = queues[queue_id] = new_consume_queue(config, topic, queue_id)
        return cq


def load_consume_queues(config: MessageStoreConfig, table: ConsumeQueueTable) -> bool:
    """Map every queue's files into ``table``; False when a queue's files do not load (a length mismatch)."""
    base = config.store_path_consume_queue
    if not base.is_dir():
        return True
    for topic_dir in sorted(base.iterdir()):
        if not topic_dir.is_dir():
            continue
        for qdir in sorted(topic_dir.iterdir()):
            if not (qdir.is_dir() and qdir.name.isdigit()):
                continue
            cq = new_consume_queue(config, topic_dir.name, int(qdir.name))
            if not cq.load():
                return False
            table.setdefault(topic_dir.name, {})[int(qdir.name)] = cq
    return True


def iter_queues(table: ConsumeQueueTable) -> Iterator[ConsumeQueue]:
    """Every queue; safe while another thread adds queues (it walks copies)."""
    for queues in list(table.values()):
        yield from list(queues.values())
