"""The SQL92 script (tests/broker/sql92_script.py) against the reference broker and Apache RocketMQ 4.9.8
side by side: every step's code, remark and delivered messages agree, and 4.9.8 still answers as recorded in
sql92_answers_498.json (which the default-suite test holds the reference broker to). Skipped, with the
reason, without the distribution or java."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.broker.sql92_script import answers

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

RECORDED = Path(__file__).with_name("sql92_answers_498.json")


def test_reference_and_rocketmq_498_answer_the_sql92_script_alike(tmp_path: Path, rocketmq_home: Path) -> None:
    theirs = answers("rocketmq", tmp_path / "rocketmq", rocketmq_home)
    ours = answers("reference", tmp_path / "reference")
    differ = {k: (ours.get(k), theirs[k]) for k in theirs if ours.get(k) != theirs[k]}
    assert not differ, differ
    recorded = {k: tuple(v) for k, v in json.loads(RECORDED.read_text(encoding="utf-8")).items()}
    assert {k: (c, r, keys) for k, (c, r, keys) in theirs.items()} == recorded
