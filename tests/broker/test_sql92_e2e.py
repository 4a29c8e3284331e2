"""SQL92 filtering on a real name server and two real reference brokers (one with enablePropertyFilter, one
without): CHECK_CLIENT_CONFIG, HEART_BEAT and PULL_MESSAGE with and without the subscription flag answer good
and malformed selectors with the codes and remarks Apache RocketMQ 4.9.8 gave for the same script
(tests/broker/sql92_answers_498.json, recorded by test_sql92_vs_rocketmq.py's run), each selector delivers
the messages 4.9.8 delivered, and the brokers keep serving throughout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.broker.sql92_script import answers

pytestmark = pytest.mark.e2e

RECORDED = Path(__file__).with_name("sql92_answers_498.json")


def test_sql92_requests_are_answered_as_rocketmq_498_answered_them(tmp_path: Path) -> None:
    expected = {k: tuple(v) for k, v in json.loads(RECORDED.read_text(encoding="utf-8")).items()}
    ours = {k: (code, remark, keys) for k, (code, remark, keys) in answers("reference", tmp_path).items()}
    assert set(ours) == set(expected)
    differ = {k: (ours[k], expected[k]) for k in expected if ours[k] != expected[k]}
    assert not differ, differ
    assert expected["A delivers 'a > 4'"][2] == ["m1", "m2", "m7"]  # the recording is a delivery, not a blank
