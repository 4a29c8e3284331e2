"""suggestWhichBrokerId as PullMessageProcessor (4.9.8) sets it, and a slave serving pulls either way."""

from __future__ import annotations

import asyncio
import inspect

from reference_broker.broker.pull_processor import suggest_which_broker_id
from reference_broker.remoting.codec import FrameDecoder
from reference_broker.remoting.codes import ResponseCode
from reference_broker.store.config import BrokerRole
from tests.broker.broker_helpers import FakeConn, make_controller, pull_request, send_request, wait_dispatched


async def send(controller, topic: str, body: bytes) -> int:
    """The send's response code (the processor may answer with an encoded frame)."""
    result = controller.send_processor.handle(FakeConn(), send_request(topic, body))
    result = await result if inspect.isawaitable(result) else result
    if isinstance(result, bytes):
        decoder = FrameDecoder()
        decoder.feed(result)
        result = decoder.next_frame()
    return result.code


def test_suggestion_table():
    assert suggest_which_broker_id(False, True, 1, 0) == 0  # slaveReadEnable off: the master, always
    assert suggest_which_broker_id(False, False, 1, 3) == 0
    assert suggest_which_broker_id(True, True, 1, 0) == 1  # far behind: whichBrokerWhenConsumeSlowly
    assert suggest_which_broker_id(True, False, 1, 2) == 2  # else the group's brokerId


def test_a_master_with_slave_read_enable_suggests_the_slave_to_a_reader_far_behind(tmp_path):
    async def run():
        c = make_controller(tmp_path, access_message_in_memory_max_ratio=0)
        c.broker_config.slave_read_enable = True
        await c.start(listen=False)
        try:
            for i in range(3):
                assert await send(c, "SugT", b"x%d" % i) == ResponseCode.SUCCESS
            await wait_dispatched(c)
            far = c.pull_processor.process(pull_request("SugT", 0, 0, sys_flag=4), "p", allow_suspend=False)
            assert far.code == ResponseCode.SUCCESS and far.ext_fields["suggestWhichBrokerId"] == "1"
            c.broker_config.slave_read_enable = False
            off = c.pull_processor.process(pull_request("SugT", 0, 0, sys_flag=4), "p", allow_suspend=False)
            assert off.code == ResponseCode.SUCCESS and off.ext_fields["suggestWhichBrokerId"] == "0"
        finally:
            await c.shutdown()

    asyncio.run(run())


def test_a_slave_without_slave_read_enable_still_serves_pulls(tmp_path):
    """4.9.8 sets PULL_RETRY_IMMEDIATELY and then overwrites it with the status's code (observed SUCCESS)."""
    async def run():
        c = make_controller(tmp_path / "m")
        await c.start(listen=False)
        try:
            assert await send(c, "SugT", b"x") == ResponseCode.SUCCESS
            await wait_dispatched(c)
        finally:
            await c.shutdown()
        s = make_controller(tmp_path / "m", broker_role=BrokerRole.SLAVE)  # the same store, now a slave's
        s.broker_config.broker_id = 1
        await s.start(listen=False)
        try:
            r = s.pull_processor.process(pull_request("SugT", 0, 0, sys_flag=4), "p", allow_suspend=False)
            assert r.code == ResponseCode.SUCCESS and r.ext_fields["suggestWhichBrokerId"] == "0"
        finally:
            await s.shutdown()

    asyncio.run(run())
