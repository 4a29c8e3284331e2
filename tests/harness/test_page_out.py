"""harness.page_out: /proc/<pid>/maps parsing, and a real page-out of another process's file mapping."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.metrics_sampler import fincore_bytes
from harness.page_out import Mapping, page_out, parse_maps, unsupported_reason

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
