"""remoting/command.quote_bare_keys and fastjson_loads: RocketMQ 4.9.8's name server writes ``brokerAddrs``
(a HashMap<Long, String>) with bare numeric keys, ``{0:"host:port"}``; the client and admin tools read it."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reference_broker.client.route import TopicRouteData
from reference_broker.remoting.command import fastjson_loads, quote_bare_keys

# Bytes as RocketMQ 4.9.8's name server answered GET_ROUTEINFO_BY_TOPIC (seen through the launcher).
ROCKETMQ_ROUTE = (b'{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:16476"},"brokerName":"broker-a",'
                  b'"cluster":"DefaultCluster"}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a",'
                  b'"perm":7,"readQueueNums":8,"topicSysFlag":0,"writeQueueNums":8}]}')


def test_rocketmqs_route_parses() -> None:
    route = TopicRouteData.from_json(ROCKETMQ_ROUTE)
    (bd,) = route.broker_datas
    assert bd.broker_addrs == {0: "127.0.0.1:16476"} and route.queue_datas[0].write_queue_nums == 8


def test_only_bare_object_keys_are_quoted() -> None:
    raw = b'{0:"a", -1 : "b", "s":"{2:3, 4:5}", "arr":[1, 2, {7:[8,9]}], "n": 10}'
    assert fastjson_loads(raw) == {"0": "a", "-1": "b", "s": "{2:3, 4:5}", "arr": [1, 2, {"7": [8, 9]}], "n": 10}


def test_escaped_quotes_in_strings_do_not_end_them() -> None:
    raw = b'{"k\\"{1:2":{3:"x\\\\"}}'
    assert fastjson_loads(raw) == {'k"{1:2': {"3": "x\\"}}


def test_what_is_not_json_even_so_is_still_an_error() -> None:
    with pytest.raises(ValueError):
        fastjson_loads(b'{0:"a",')
    with pytest.raises(ValueError):
        fastjson_loads(b"not json")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20)


@given(json_values)
def test_standard_json_is_left_as_it_is(value: object) -> None:
    data = json.dumps(value).encode()
    assert quote_bare_keys(data) == data


@given(st.dictionaries(st.integers(-(2**63), 2**63 - 1), st.text(max_size=8), max_size=5))
def test_a_map_with_bare_long_keys_reads_as_its_quoted_form(table: dict[int, str]) -> None:
    bare = ("{" + ",".join(f"{k}:{json.dumps(v)}" for k, v in table.items()) + "}").encode()
    assert fastjson_loads(bare) == {str(k): v for k, v in table.items()}
