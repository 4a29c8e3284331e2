"""The matrix's faults as it makes them (pure)."""

from __future__ import annotations

from chaos.experiment import FaultName
from chaos.matrix import POWER_LOSS_BYTES_PER_CYCLE, POWER_LOSS_MIN_IMAGE_BYTES, make_fault
from chaos.power_loss import PowerLoss


def test_a_power_loss_image_is_sized_for_its_cycles() -> None:
    """A broker restarted every few seconds never runs its clean service, so the image must hold every cycle's
    writes: the soak's 334-cycle cell filled the old fixed 768 MiB image at crash 244."""
    short = make_fault(FaultName.POWER_LOSS, cycles=20)
    soak = make_fault(FaultName.POWER_LOSS_TORN, cycles=334)
    assert isinstance(short, PowerLoss) and isinstance(soak, PowerLoss)
    assert short.image_bytes == POWER_LOSS_MIN_IMAGE_BYTES and not short.torn
    assert soak.image_bytes == 334 * POWER_LOSS_BYTES_PER_CYCLE and soak.torn
