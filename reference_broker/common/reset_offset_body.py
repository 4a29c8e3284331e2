"""ResetOffsetBody and ResetOffsetBodyForC: the queue → offset tables of INVOKE_BROKER_TO_RESET_OFFSET's answer
and of the RESET_CONSUMER_CLIENT_OFFSET request the broker sends to consumers (common/.../protocol/body/
ResetOffsetBody.java, ResetOffsetBodyForC.java, MessageQueueForC.java, 4.9.8). Sans-IO.

| body                | JSON as fastjson writes it                                                           |
|---------------------|--------------------------------------------------------------------------------------|
| ResetOffsetBody     | ``{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:12,...}}``               |
| ResetOffsetBodyForC | ``{"offsetTable":[{"brokerName":"b","offset":12,"queueId":0,"topic":"T"},...]}``      |

The first is not JSON: fastjson writes a map's MessageQueue keys as objects. ``decode`` reads either body
(and a key written as a JSON string, to be lenient); a C++ client (request language CPP) gets the second.
"""

from __future__ import annotations

import json
from typing import Any, Final

QueueKey = tuple[str, str, int]  # topic, brokerName, queueId
_WS: Final = " \t\r\n"


class BodyError(ValueError):
    """The bytes are not a reset-offset body."""


def _mq_json(key: QueueKey) -> str:
    topic, broker, queue_id = key
    return json.dumps({"brokerName": broker, "queueId": queue_id, "topic": topic}, separators=(",", ":"),
                      ensure_ascii=False)


def encode(table: dict[QueueKey, int]) -> bytes:
    """ResetOffsetBody.encode(): fastjson's object-keyed map."""
    items = ",".join(f"{_mq_json(k)}:{v}" for k, v in sorted(table.items()))
    return ("{\"offsetTable\":{" + items + "}}").encode("utf-8")


def encode_for_c(table: dict[QueueKey, int]) -> bytes:
    """ResetOffsetBodyForC.encode(): a list of MessageQueueForC."""
    rows = [{"brokerName": b, "offset": v, "queueId": q, "topic": t} for (t, b, q), v in sorted(table.items())]
    return json.dumps({"offsetTable": rows}, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode(body: bytes) -> dict[QueueKey, int]:
    """Either body's table; BodyError if it is neither."""
    try:
        text = body.decode("utf-8")
        obj, end = _Reader(text).value(0)
    except (UnicodeDecodeError, ValueError, IndexError) as exc:
        raise BodyError(f"not a reset-offset body: {exc}") from None
    if text[end:].strip(_WS) or not isinstance(obj, dict):
        raise BodyError("not a reset-offset body: expected one object")
    table = obj.get("offsetTable")
    out: dict[QueueKey, int] = {}
    try:
        if isinstance(table, list):  # ResetOffsetBodyForC
            for row in table:
                out[(str(row["topic"]), str(row["brokerName"]), int(row["queueId"]))] = int(row["offset"])
        elif isinstance(table, _Pairs):
            for key, value in table.pairs:
                mq = json.loads(key) if isinstance(key, str) else key
                out[(str(mq["topic"]), str(mq["brokerName"]), int(mq["queueId"]))] = int(value)
        elif table is not None:
            raise BodyError("offsetTable is neither a map nor a list")
    except (KeyError, TypeError, ValueError) as exc:
        raise BodyError(f"bad offsetTable entry: {exc}") from None
    return out


class _Pairs(dict[str, Any]):
    """An object whose keys may be objects: the pairs in order (and, for plain keys, a dict too)."""

    def __init__(self, pairs: list[tuple[Any, Any]]) -> None:
        super().__init__((k, v) for k, v in pairs if isinstance(k, str))
        self.pairs = pairs


class _Reader:
    """JSON values, where an object's key may itself be any value (fastjson's non-string map keys)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def _skip(self, i: int) -> int:
        while i < len(self.text) and self.text[i] in _WS:
            i += 1
        return i

    def value(self, i: int) -> tuple[Any, int]:
        i = self._skip(i)
        ch = self.text[i]
        if ch == "{":
            return self._object(i + 1)
        if ch == "[":
            return self._array(i + 1)
        decoder = json.JSONDecoder()
        return decoder.raw_decode(self.text, i)

    def _object(self, i: int) -> tuple[_Pairs, int]:
        pairs: list[tuple[Any, Any]] = []
        i = self._skip(i)
        if self.text[i] == "}":
            return _Pairs(pairs), i + 1
        while True:
            key, i = self.value(i)
            i = self._skip(i)
            if self.text[i] != ":":
                raise ValueError(f"expected ':' at {i}")
            value, i = self.value(i + 1)
            pairs.append((key, value))
            i = self._skip(i)
            if self.text[i] == ",":
                i += 1
                continue
            if self.text[i] == "}":
                return _Pairs(pairs), i + 1
            raise ValueError(f"expected ',' or '}}' at {i}")

    def _array(self, i: int) -> tuple[list[Any], int]:
        items: list[Any] = []
        i = self._skip(i)
        if self.text[i] == "]":
            return items, i + 1
        while True:
            value, i = self.value(i)
            items.append(value)
            i = self._skip(i)
            if self.text[i] == ",":
                i += 1
                continue
            if self.text[i] == "]":
                return items, i + 1
            raise ValueError(f"expected ',' or ']' at {i}")

