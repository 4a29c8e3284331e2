"""harness.page_out: /proc/<pid>/maps parsing, the loop over process_madvise's partial returns, and a real
page-out of another process's file mappings (one larger than a single call covers)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from harness.metrics_sampler import fincore_bytes
from harness.page_out import IOV_MAX, MAX_RW_COUNT, Mapping, advise_all, page_out, parse_maps, unsupported_reason

MAPS = """\
55d0c0a00000-55d0c0a21000 r--p 00000000 fd:01 1311  /usr/bin/python3.11
7f0000000000-7f0004000000 rw-s 00000000 07:00 12    /store/commitlog/00000000000000000000
7f0004000000-7f0004100000 rw-s 00000000 07:00 13    /store/consumequeue/T/0/00000000000000000000
7f0004100000-7f0004200000 rw-s 00000000 07:00 14    /store/commitlogx/00000000000000000000
7f0004200000-7f0004300000 rw-p 00000000 00:00 0
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0     [stack]
"""


def test_parse_maps_keeps_only_files_under_the_roots() -> None:
    got = parse_maps(MAPS, ["/store/commitlog", "/store/consumequeue/"])
    assert got == [
        Mapping(0x7F0000000000, 0x7F0004000000, "/store/commitlog/00000000000000000000"),
        Mapping(0x7F0004000000, 0x7F0004100000, "/store/consumequeue/T/0/00000000000000000000"),
    ]
    assert got[0].length == 64 << 20
    assert parse_maps(MAPS, ["/elsewhere"]) == []


class CappedKernel:
    """process_madvise as Linux answers it: at most IOV_MAX ranges, and bytes up to MAX_RW_COUNT from the front."""

    def __init__(self) -> None:
        self.advised: list[tuple[int, int]] = []

    def __call__(self, batch: Sequence[tuple[int, int]]) -> int:
        assert 0 < len(batch) <= IOV_MAX
        left = MAX_RW_COUNT
        for start, length in batch:
            take = min(length, left)
            if take:
                self.advised.append((start, take))
            left -= take
        return MAX_RW_COUNT - left


def covered(pieces: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, length in sorted(pieces):
        if out and out[-1][0] + out[-1][1] == start:
            out[-1] = (out[-1][0], out[-1][1] + length)
        else:
            out.append((start, length))
    return out


def test_advise_all_asks_again_for_what_one_call_left():
    # A RocketMQ store's mappings in address order: eight 6 MB consume queues, then two 1 GiB commit-log
    # files (the oldest, holding the data, last): 2.09 GiB, more than one call's MAX_RW_COUNT.
    cq = [(0x7000_0000_0000 + i * (8 << 20), 0x5B9000) for i in range(8)]
    cl = [(0x7100_0000_0000, 1 << 30), (0x7100_0000_0000 + (1 << 30), 1 << 30)]
    kernel = CappedKernel()
    assert advise_all(cq + cl, kernel) == sum(n for _, n in cq + cl)
    assert covered(kernel.advised) == covered(cq + cl)


def test_advise_all_over_iov_max_ranges_and_a_stop_inside_one():
    ranges = [(i * 8192, 4096) for i in range(2 * IOV_MAX + 5)]
    calls = []

    def kernel(batch: Sequence[tuple[int, int]]) -> int:
        calls.append(len(batch))
        return min(sum(n for _, n in batch), 10 * 4096 + 100)  # stops 100 bytes into the 11th range

    assert advise_all(ranges, kernel) == len(ranges) * 4096
    assert max(calls) == IOV_MAX


def test_advise_all_raises_when_a_call_advises_nothing():
    with pytest.raises(OSError):
        advise_all([(0, 4096)], lambda batch: 0)


@pytest.mark.skipif(unsupported_reason() is not None, reason=str(unsupported_reason()))
@pytest.mark.skipif(shutil.which("fincore") is None, reason="fincore (util-linux) is not installed")
def test_page_out_evicts_another_processes_mapped_file(tmp_path: Path) -> None:
    data = tmp_path / "store" / "commitlog" / "00000000000000000000"
    data.parent.mkdir(parents=True)
    data.write_bytes(os.urandom(8 << 20))
    os.sync()  # clean pages: MADV_PAGEOUT reclaims them without a write-back
    code = ("import mmap, sys\n"
            f"f = open({str(data)!r}, 'rb'); m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)\n"
            "s = sum(m[i] for i in range(0, len(m), 4096))\n"
            "print('ready', flush=True); sys.stdin.read()\n")
    with subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True) as child:
        _check_page_out(child, data, tmp_path)


@pytest.mark.skipif(unsupported_reason() is not None, reason=str(unsupported_reason()))
@pytest.mark.skipif(shutil.which("fincore") is None, reason="fincore (util-linux) is not installed")
def test_page_out_covers_mappings_past_one_calls_limit(tmp_path: Path) -> None:
    # One 3 GiB sparse file mapped whole, a page touched at each end: the kernel takes MAX_RW_COUNT bytes of
    # the range in one call, so the end's page is paged out only when the rest is asked again.
    data = tmp_path / "store" / "commitlog" / "00000000000000000000"
    data.parent.mkdir(parents=True)
    size = 3 << 30
    with open(data, "wb") as f:
        f.truncate(size)  # sparse: no blocks on disk
    code = ("import mmap, sys\n"
            f"f = open({str(data)!r}, 'rb'); m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)\n"
            "m.madvise(mmap.MADV_RANDOM)  # no read-around: only the touched pages enter the cache\n"
            f"s = m[0] + m[{size - 4096}]\n"
            "print('ready', flush=True); sys.stdin.read()\n")
    with subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True) as child:
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
            assert fincore_bytes([data])[str(data)] == 2 * 4096
            res = page_out(child.pid, [tmp_path / "store" / "commitlog"])
            assert res.done, res.reason
            assert res.bytes_advised == size
            # A page the kernel could not take off an LRU list at that moment stays resident (a busy machine,
            # once); asking again takes it. A page-out that never reached the end page fails every pass.
            for _ in range(3):
                if fincore_bytes([data])[str(data)] == 0:
                    break
                page_out(child.pid, [tmp_path / "store" / "commitlog"])
            assert fincore_bytes([data])[str(data)] == 0
        finally:
            child.kill()
            child.wait()


def _check_page_out(child: subprocess.Popen[str], data: Path, tmp_path: Path) -> None:
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        assert fincore_bytes([data])[str(data)] == 8 << 20  # mapped and touched: resident
        res = page_out(child.pid, [tmp_path / "store" / "commitlog"])
        assert res.done, res.reason
        assert res.mappings == 1 and res.bytes_advised == 8 << 20
        assert fincore_bytes([data])[str(data)] < 1 << 20  # reclaimed while still mapped
    finally:
        child.kill()
        child.wait()


def test_page_out_of_a_missing_process_says_why() -> None:
    res = page_out(2**22 + 12345, [Path("/nonexistent")])
    assert not res.done and res.reason
