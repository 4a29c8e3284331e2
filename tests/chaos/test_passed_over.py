"""``Workload.passed_over``: an acknowledged key that only the final drain delivered counts as passed over when
the live group had already received a later offset of its queue (its position was past it), and as merely not
reached when it lies beyond the group's position. The client is built but never started: the deliveries go
through the same recording path the push consumer's listener and the drain use."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from chaos.load import Ack, LoadSpec, Workload
from chaos.payload import make_body
from harness.records import RunRecord
from reference_broker.client import SendStatus


def _msg(key: str, queue_id: int, queue_offset: int) -> SimpleNamespace:
    return SimpleNamespace(keys=key, body=make_body(key, 64), offset_msg_id="", topic="T", queue_id=queue_id,
                           queue_offset=queue_offset, commit_log_offset=1000 + queue_offset,
                           born_timestamp=0, store_timestamp=0)


def test_a_key_behind_the_groups_position_is_passed_over_and_one_beyond_it_is_not(tmp_path: Path) -> None:
    record = RunRecord.create(tmp_path / "runs", "passed", {}, ["pytest"])
    w = Workload("127.0.0.1:1", LoadSpec(topic="T", msg_size=64), record, record.clock)
    try:
        # Queue 0: the group received offsets 10 and 12 before a cut took what it had read at 11; a new
        # send took offset 11 again, and the group, at 13 already, never asked for it.
        for key, qoff in (("a", 10), ("b", 11), ("c", 12), ("d", 13)):
            w.acks[key] = Ack(1000 + qoff, 0, SendStatus.SEND_OK, key, 0, qoff)
        w._record_delivery(w._recv_events, _msg("a", 0, 10), "c0")  # type: ignore[arg-type]
        w._record_delivery(w._recv_events, _msg("c", 0, 12), "c0")  # type: ignore[arg-type]
        drain = record.events_writer("drain")
        for key, qoff in (("a", 10), ("b", 11), ("c", 12), ("d", 13)):
            w._record_delivery(drain, _msg(key, 0, qoff), "drain", drain=True)  # type: ignore[arg-type]
        assert set(w.passed_over()) == {"b"}  # "d" lies beyond the group's position: not reached yet
        assert w.lost() == {}  # the drain found every key: nothing is lost to the store
        assert w.drain_first == {"b", "d"}
    finally:
        w.close()
        record.finish()
