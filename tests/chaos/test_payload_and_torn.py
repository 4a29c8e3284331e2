"""Message bodies that check themselves, and the choice and application of torn pages (pure parts)."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from chaos.payload import CORRUPT_PREFIX, UNKEYED_PREFIX, BodyVerdict, classify, make_body, make_key
from chaos.torn import PAGE, TornMode, apply_torn_pages, candidate_range, choose_torn_pages, commit_log_file_for


@given(st.text(alphabet="abc-0123456789", min_size=1, max_size=20), st.integers(1, 5000))
def test_body_has_the_size_and_rebuilds_from_its_key(key, size):
    body = make_body(key, size)
    assert len(body) == size
    assert classify(key, body, "x") == classify(key, make_body(key, size), "x")
    assert classify(key, body, "x").verdict is BodyVerdict.INTACT


def test_a_changed_byte_a_cut_body_or_a_wrong_key_is_corrupted():
    key = make_key("p0", 7)
    body = make_body(key, 1024)
    flipped = body[:500] + bytes([body[500] ^ 1]) + body[501:]
    for bad_key, bad_body in ((key, flipped), (key, body[:1000]), (key, bytes(1024)), (make_key("p0", 8), body)):
        d = classify(bad_key, bad_body, "id")
        assert d.verdict is BodyVerdict.CORRUPTED
        assert d.key == CORRUPT_PREFIX + bad_key  # never the key itself: the checker must not count it delivered


def test_a_message_without_keys_is_unkeyed():
    d = classify("", b"whatever", "0A0B")
    assert d.verdict is BodyVerdict.UNKEYED and d.key == UNKEYED_PREFIX + "0A0B"


@given(st.integers(0, 10 * PAGE), st.integers(0, 20 * PAGE), st.integers(0, 2**32))
def test_torn_pages_lie_past_the_flushed_offset_and_within_the_written_data(flushed, written, seed):
    pages = choose_torn_pages(flushed, written, random.Random(seed), max_pages=5)
    first, end = candidate_range(flushed, written)
    assert first % PAGE == 0 and first >= flushed
    assert len({p.offset for p in pages}) == len(pages) <= 5
    for p in pages:
        assert p.offset % PAGE == 0
        assert first <= p.offset < end
        assert p.offset + PAGE > flushed  # never a page wholly before the flushed offset
    if end > first:
        assert pages  # at least one page when there is room


def test_nothing_is_torn_when_everything_written_was_flushed():
    assert choose_torn_pages(8192, 8192, random.Random(1)) == []
    assert choose_torn_pages(8000, 8100, random.Random(1)) == []  # the only partial page holds flushed bytes


def test_apply_writes_the_pages_into_the_right_file(tmp_path):
    size = 8 * PAGE
    for start in (0, size):
        (tmp_path / f"{start:020d}").write_bytes(b"\xab" * size)
    pages = choose_torn_pages(size + PAGE, size + 4 * PAGE, random.Random(3), max_pages=3)
    done = apply_torn_pages(tmp_path, size, pages, random.Random(4))
    assert all(d["applied"] for d in done)
    second = (tmp_path / f"{size:020d}").read_bytes()
    assert (tmp_path / f"{0:020d}").read_bytes() == b"\xab" * size  # the first file is untouched
    for p in pages:
        name, pos = commit_log_file_for(p.offset, size)
        assert name == f"{size:020d}"
        page = second[pos:pos + PAGE]
        if p.mode is TornMode.ZERO:
            assert page == bytes(PAGE)
        else:
            assert page != b"\xab" * PAGE
    untouched = set(range(0, size, PAGE)) - {commit_log_file_for(p.offset, size)[1] for p in pages}
    assert all(second[o:o + PAGE] == b"\xab" * PAGE for o in untouched)


def test_pages_of_a_file_missing_from_the_image_are_skipped(tmp_path):
    pages = choose_torn_pages(0, 2 * PAGE, random.Random(5))
    done = apply_torn_pages(tmp_path, 1 << 20, pages, random.Random(6))
    assert done and not any(d["applied"] for d in done)
