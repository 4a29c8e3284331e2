"""The power-loss fault reads the crash image's checkpoint with the store's own layout and names itself."""

from __future__ import annotations

from pathlib import Path

from chaos.experiment import FaultName
from chaos.power_loss import PowerLoss, read_checkpoint
from reference_broker.store.checkpoint import StoreCheckpoint


def test_reads_what_the_store_wrote(tmp_path: Path) -> None:
    cp = StoreCheckpoint(tmp_path / "checkpoint")
    cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp = 11, 12, 13
    cp.note_physic_offset(4096)
    cp.note_logics_offset(2048)
    cp.shutdown()
    assert read_checkpoint(tmp_path / "checkpoint") == {
        "physicMsgTimestamp": 11, "logicsMsgTimestamp": 12, "indexMsgTimestamp": 13,
        "physicMsgOffset": 4096, "logicsMsgOffset": 2048}


def test_missing_or_short_checkpoint_is_none(tmp_path: Path) -> None:
    assert read_checkpoint(tmp_path / "none") is None
    (tmp_path / "short").write_bytes(bytes(64))
    assert read_checkpoint(tmp_path / "short") is None


def test_each_variant_is_named_by_its_own_fault_name() -> None:
    assert PowerLoss().name is FaultName.POWER_LOSS
    assert PowerLoss(torn=True).name is FaultName.POWER_LOSS_TORN
