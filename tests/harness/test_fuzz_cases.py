"""The fuzzer's sans-IO parts: cases are reproducible from (seed, index), the answer due for a frame is what
the project's codec makes of it, every code the broker serves is fuzzed, the store check skips cleanly."""

from __future__ import annotations

import asyncio
import struct

from harness.fuzz_cases import SERVED_CODES, CaseGenerator, CaseKind, Expect, expectation
from harness.fuzz_report import StoreCheck, check_store, looks_raised
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import create_request, encode
from tests.broker.broker_helpers import make_controller


def test_a_case_is_reproducible_from_seed_and_index():
    a, b = CaseGenerator(7), CaseGenerator(7)
    for index in (0, 1, 50, 333):
        assert a.case(index) == b.case(index)
    assert CaseGenerator(8).case(1) != a.case(1)


def test_the_generator_draws_every_kind_and_served_code():
    gen = CaseGenerator(1)
    kinds, codes = set(), set()
    for index in range(1500):
        case = gen.case(index)
        kinds.add(case.kind)
        codes.update(f.code for f in case.frames)
    assert kinds == set(CaseKind)
    assert set(SERVED_CODES) <= codes


def test_expectation_follows_the_codec():
    good = encode(create_request(RequestCode.GET_MAX_OFFSET, {"topic": "t", "queueId": "0"}))
    assert expectation(good)[0] is Expect.RESPONSE
    oneway = encode(create_request(RequestCode.GET_MAX_OFFSET, {}, oneway=True))
    assert expectation(oneway)[0] is Expect.NOTHING
    assert expectation(struct.pack(">i", -1))[0] is Expect.CLOSE
    assert expectation(good[:-1])[0] is Expect.NOTHING  # incomplete: nothing due yet


def test_served_codes_are_the_codes_the_broker_registers(tmp_path):
    async def registered():
        controller = make_controller(tmp_path)
        await controller.start(listen=False)
        try:
            return set(controller._codes)
        finally:
            await controller.shutdown()

    assert set(SERVED_CODES) == asyncio.run(registered())


def test_looks_raised_tells_the_safety_net_from_a_refusal():
    assert looks_raised(ResponseCode.SYSTEM_ERROR, "error: argument out of range")
    assert looks_raised(ResponseCode.SYSTEM_ERROR, "TypeError: Integer exceeds 64-bit range")
    assert not looks_raised(ResponseCode.SYSTEM_ERROR, "bad request: the custom field <topic> is null")
    assert not looks_raised(ResponseCode.SUCCESS, "ValueError: x")


def test_check_store_fails_on_a_directory_that_is_not_a_store(tmp_path):
    (tmp_path / "commitlog").write_text("not a directory")
    result, detail = check_store(tmp_path)
    assert result is StoreCheck.FAILED and detail.startswith("exit 2"), detail
