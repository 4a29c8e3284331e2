"""harness/ports.py: ports below the ephemeral range, claimed across processes, never handed out twice."""

from __future__ import annotations

import multiprocessing
import random
import socket
from pathlib import Path

import pytest

from harness import ports


def test_candidate_range_stays_below_the_ephemeral_range(tmp_path: Path) -> None:
    f = tmp_path / "range"
    f.write_text("32768\t60999\n")
    r = ports.candidate_range(f)
    assert r.start == ports.LOWEST and r.stop == 32767 and max(r) + 1 < 32768
    assert len(ports.candidate_range(tmp_path / "missing")) == 0
    f.write_text("1024 65000\n")
    assert len(ports.candidate_range(f)) == 0  # no room below: the caller falls back


def test_claim_is_exclusive_until_it_expires(tmp_path: Path) -> None:
    assert ports.claim(tmp_path, 20001, now=1000.0)
    (tmp_path / "20001").touch()
    mtime = (tmp_path / "20001").stat().st_mtime
    assert not ports.claim(tmp_path, 20001, now=mtime + 1)
    assert ports.claim(tmp_path, 20001, now=mtime + ports.CLAIM_TTL_S + 1)  # a stale claim is taken over
    assert ports.claim(tmp_path, 20002)


def test_free_port_is_claimed_and_bindable_with_its_pair(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(ports, "claim_dir", lambda: tmp_path / "claims")
    got = {ports.free_port(rng=random.Random(7)) for _ in range(20)}
    assert len(got) == 20  # never the same port twice while claimed
    eph_low = int(ports.RANGE_FILE.read_text().split()[0]) if ports.RANGE_FILE.exists() else 65536
    for port in got:
        assert (tmp_path / "claims" / str(port)).exists() or port >= eph_low
        assert ports.port_pair_free("127.0.0.1", port)


def test_a_bound_port_is_skipped(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(ports, "claim_dir", lambda: tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        taken = s.getsockname()[1]
        monkeypatch.setattr(ports, "candidate_range", lambda: range(taken - 1, taken - 1 + 400))
        got = [ports.free_port() for _ in range(30)]
    assert taken not in got and taken - 1 not in got  # the port itself, and the one whose pair it is


def test_falls_back_to_the_kernels_choice_without_a_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "candidate_range", lambda: range(0))
    assert ports.port_pair_free("127.0.0.1", ports.free_port())


def _pick(claims: str, n: int) -> list[int]:
    ports.claim_dir = lambda: Path(claims)  # type: ignore[assignment]  # this child process only
    return [ports.free_port() for _ in range(n)]


def test_parallel_processes_never_share_a_port(tmp_path: Path) -> None:
    # As pytest-xdist workers do: several processes asking at once.
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        results = pool.starmap(_pick, [(str(tmp_path), 25)] * 4)
    every = [p for r in results for p in r]
    assert len(every) == len(set(every)) == 100
