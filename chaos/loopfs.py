"""This module owns loop-mounted ext4 images: the "disk" of the power-loss and disk-fill experiments.

``LoopFs.create`` makes a sparse image, puts ext4 on it, attaches it to a loop device and mounts it. The
power-loss step is ``crash_swap``: with the broker already SIGKILLed, copy the image file (``cp
--sparse=always``) *before* anything syncs or unmounts the original. The loop device has received only what
the kernel wrote back from the mounted filesystem's page cache (and what the broker flushed), so the copy
is exactly what a machine that lost power would find on its disk, mmap writes included. Then the original
is unmounted and detached (its dirty pages land in the original image, which is deleted), and the copy is
attached and mounted at the same mount point; mount replays the ext4 journal, as boot would.

Every mount, loop device and image is entered in the ledger (chaos.leftovers) before it exists and taken
off when it is gone, so ``python -m chaos cleanup`` can undo an interrupted run.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from chaos.leftovers import (
    PENDING_LOOP,
    Ledger,
    ResourceKind,
    detach_loop,
    find_loop_for,
    is_mounted,
    run_cmd,
    unmount,
)

REQUIRED_TOOLS = ("mkfs.ext4", "losetup", "mount", "umount", "cp")


def unsupported_reason() -> str | None:
    """Why loop-mounted images cannot be used here (None when they can): root, loop devices, tools."""
    if os.geteuid() != 0:
        return f"needs root for loop devices and mount (running as euid {os.geteuid()})"
    if not Path("/dev/loop-control").exists():
        return "no loop device support (/dev/loop-control is missing; modprobe loop?)"
    missing = [t for t in REQUIRED_TOOLS if shutil.which(t) is None]
    if missing:
        return f"missing tools: {', '.join(missing)}"
    try:
        run_cmd(["losetup", "-f"], timeout_s=10)
    except RuntimeError as e:
        return f"no free loop device: {e}"
    return None


@dataclass
class SwapTiming:
    copy_s: float
    unmount_s: float
    mount_s: float
    image_bytes_allocated: int  # blocks the copy holds (a sparse copy holds only what reached the "disk")


class LoopFs:
    """One ext4 image mounted through a loop device. Not thread-safe; one owner."""

    def __init__(self, image: Path, mountpoint: Path, ledger: Ledger) -> None:
        self.image = image.absolute()
        self.mountpoint = mountpoint.absolute()
        self.ledger = ledger
        self.device: str | None = None
        self.generation = 0  # how many crash copies replaced the image
        # Each crash copy is named from the original image (disk.crash7.img), not from the previous copy: the
        # name once grew by ".crashN" per crash until cp failed with "File name too long" at crash 33.
        self._base = self.image

    @classmethod
    def create(cls, image: Path, size_bytes: int, mountpoint: Path, ledger: Ledger,
               mkfs_args: tuple[str, ...] = ("-m", "0")) -> LoopFs:
        """Make, format, attach and mount a new image. ``-m 0``: no blocks reserved for root, so the broker
        (running as root) and the disk-use ratio see the same free space."""
        fs = cls(image, mountpoint, ledger)
        image = fs.image
        ledger.add(ResourceKind.PATH, image, what="loop image")
        try:
            image.parent.mkdir(parents=True, exist_ok=True)
            with open(image, "wb") as f:
                f.truncate(size_bytes)
            # Eager inode-table and journal init: no background ext4lazyinit writes racing the crash copy.
            run_cmd(["mkfs.ext4", "-q", "-F", *mkfs_args, "-E", "lazy_itable_init=0,lazy_journal_init=0",
                     str(image)])
            fs._attach_and_mount(image)
        except BaseException:
            fs.close()
            raise
        return fs

    def _attach_and_mount(self, image: Path) -> None:
        # The ledger line goes in first; the device name is only known after attaching, so a crash between
        # the two leaves a loop entry keyed by the image (cleanup finds the device from it).
        self.image = image
        pending = PENDING_LOOP + str(image)
        self.ledger.add(ResourceKind.LOOP, pending, backing=str(image))
        device = run_cmd(["losetup", "-f", "--show", str(image)]).stdout.strip()
        self.ledger.add(ResourceKind.LOOP, device, backing=str(image))
        self.ledger.remove(ResourceKind.LOOP, pending)
        self.device = device
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        self.ledger.add(ResourceKind.MOUNT, self.mountpoint, device=device)
        run_cmd(["mount", device, str(self.mountpoint)])

    def _unmount_and_detach(self) -> None:
        unmount(self.mountpoint)
        self.ledger.remove(ResourceKind.MOUNT, self.mountpoint)
        if self.device is not None:
            detach_loop(self.device, str(self.image))
            self.ledger.remove(ResourceKind.LOOP, self.device)
            self.device = None

    def crash_swap(self) -> SwapTiming:
        """The power loss, once the broker is dead: copy the image as the device holds it, then mount the
        copy in place of the original. Call immediately after SIGKILL."""
        t0 = time.monotonic()
        copy = self.crash_image_path(self.generation + 1)
        self.ledger.add(ResourceKind.PATH, copy, what="crash image")
        run_cmd(["cp", "--sparse=always", str(self.image), str(copy)], timeout_s=300)
        t1 = time.monotonic()
        old = self.image
        self._unmount_and_detach()
        old.unlink(missing_ok=True)
        self.ledger.remove(ResourceKind.PATH, old)
        t2 = time.monotonic()
        self._attach_and_mount(copy)
        self.generation += 1
        t3 = time.monotonic()
        return SwapTiming(copy_s=t1 - t0, unmount_s=t2 - t1, mount_s=t3 - t2,
                          image_bytes_allocated=os.stat(copy).st_blocks * 512)

    def crash_image_path(self, generation: int) -> Path:
        """The image after crash ``generation``: beside the original, its name fixed in length."""
        return self._base.with_name(f"{self._base.stem}.crash{generation}{self._base.suffix}")

    def close(self) -> None:
        """Unmount, detach, delete the image. Safe to call at any point of create and more than once."""
        try:
            self._unmount_and_detach()
        finally:
            pending = PENDING_LOOP + str(self.image)
            if any(e.ident == pending for e in self.ledger.entries()):  # losetup failed or was interrupted
                device = find_loop_for(str(self.image))
                if device is not None:
                    detach_loop(device, str(self.image))
                self.ledger.remove(ResourceKind.LOOP, pending)
            if not is_mounted(self.mountpoint):
                self.image.unlink(missing_ok=True)
                self.ledger.remove(ResourceKind.PATH, self.image)

    @property
    def mounted(self) -> bool:
        return is_mounted(self.mountpoint)

    def __enter__(self) -> LoopFs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

