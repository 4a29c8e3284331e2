"""Drive Apache RocketMQ's C++ client (PyPI ``rocketmq`` 0.4.x: a ctypes binding over the ``librocketmq.so`` its
wheel ships) in a process of its own: ``python cpp_client.py ACTION JSON``, one JSON object per line on stdout.

The client runs its threads inside the calling process and its shutdown can block, so the tests never load it
into a pytest worker: they start this script with a timeout (tests/interop/conftest.py). It imports nothing of
this project: what talks to the broker here is the C++ client alone.

Actions (the JSON argument's keys):

- ``produce``: ``ns``, ``group``, ``ops``: each op ``{"how": sync|async|oneway|orderly|oneway_orderly|batch,
  "topic", "key", "tags", "body", "props", "delay", "arg", "batch": [op, ...]}``; prints per op ``{"how", "key",
  "status", "msgId", "offset"}`` (oneway: ``{"how", "key", "sent": true}``) or ``{"how", "key", "error"}``.
- ``push``: ``ns``, ``group``, ``topic``, ``expression``, ``orderly``, ``broadcast``, ``expect`` (deliveries to
  wait for), ``timeout``, ``settle`` (seconds to keep consuming after ``expect``, so that extra deliveries show),
  ``fail`` (``"always"``: every delivery answers RECONSUME_LATER); prints ``{"started": true}`` once its consumer
  started, one line per delivery, then ``{"done": true, "received": n}``.
- ``pull``: ``ns``, ``group``, ``topic``, ``expression``, ``max_num``; prints one line per message, then
  ``{"done": true, "offsets": {"TOPIC@QUEUE": nextBeginOffset}}`` (the binding's own offset table).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from rocketmq import client  # type: ignore[import-untyped]
from rocketmq.ffi import MessageModel, _CConsumeStatus, dll  # type: ignore[import-untyped]

# Properties a delivery reports (the C++ client has no call that lists them all).
PROPS = ("RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "UNIQ_KEY", "WAIT", "DELAY", "REAL_TOPIC", "CLUSTER", "user")
_out_lock = threading.Lock()


def emit(obj: dict[str, Any]) -> None:
    with _out_lock:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def _text(raw: bytes | str | None) -> str | None:
    if raw is None:
        return None
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw


def _message(op: dict[str, Any]) -> client.Message:
    msg = client.Message(op["topic"])
    if op.get("key"):
        msg.set_keys(op["key"])
    if op.get("tags"):
        msg.set_tags(op["tags"])
    msg.set_body(op.get("body", f"body-{op.get('key', '')}"))
    for k, v in (op.get("props") or {}).items():
        msg.set_property(k, v)
    if op.get("delay"):
        msg.set_delay_time_level(op["delay"])
    return msg


def _result(op: dict[str, Any], res: client.SendResult) -> dict[str, Any]:
    return {"how": op["how"], "key": op.get("key"), "status": res.status.name, "msgId": res.msg_id,
            "offset": res.offset}


def _send(producer: client.Producer, op: dict[str, Any], timeout: float) -> dict[str, Any]:
    how = op["how"]
    if how == "sync":
        return _result(op, producer.send_sync(_message(op)))
    if how == "orderly":
        return _result(op, producer.send_orderly(_message(op), op["arg"]))
    if how == "batch":
        return _result(op, producer.send_batch([_message(m) for m in op["batch"]]))
    if how == "oneway":
        producer.send_oneway(_message(op))
        return {"how": how, "key": op.get("key"), "sent": True}
    if how == "oneway_orderly":
        producer.send_oneway_orderly(_message(op), op["arg"])
        return {"how": how, "key": op.get("key"), "sent": True}
    if how == "async":
        done = threading.Event()
        answer: dict[str, Any] = {}

        def ok(res: client.SendResult) -> None:
            answer.update(_result(op, res))
            done.set()

        def failed(exc: Exception) -> None:
            answer.update({"how": how, "key": op.get("key"), "error": repr(exc)})
            done.set()

        producer.send_async(_message(op), ok, failed)
        if not done.wait(timeout):
            return {"how": how, "key": op.get("key"), "error": f"no callback within {timeout} s"}
        return answer
    raise ValueError(f"unknown send {how!r}")


def produce(spec: dict[str, Any]) -> None:
    producer = client.Producer(spec["group"], timeout=int(spec.get("send_timeout_ms", 5000)))
    producer.set_namesrv_addr(spec["ns"])
    producer.start()
    try:
        for op in spec["ops"]:
            try:
                emit(_send(producer, op, float(spec.get("timeout", 10))))
            except Exception as exc:  # noqa: BLE001 - reported per op: the test asserts on it
                emit({"how": op["how"], "key": op.get("key"), "error": repr(exc)})
    finally:
        producer.shutdown()


def _delivery(msg: client.RecvMessage) -> dict[str, Any]:
    return {"topic": msg.topic, "key": _text(msg.keys), "tags": _text(msg.tags), "body": _text(msg.body),
            "queueId": msg.queue_id, "queueOffset": msg.queue_offset, "reconsumeTimes": msg.reconsume_times,
            "msgId": msg.id, "commitLogOffset": msg.commit_log_offset, "bornTimestamp": msg.born_timestamp,
            "storeTimestamp": msg.store_timestamp, "thread": threading.get_ident(),
            "props": {p: _text(msg.get_property(p)) for p in PROPS if msg.get_property(p)}}


def push(spec: dict[str, Any]) -> None:
    model = MessageModel.BROADCASTING if spec.get("broadcast") else MessageModel.CLUSTERING
    consumer = client.PushConsumer(spec["group"], orderly=bool(spec.get("orderly")), message_model=model)
    consumer.set_namesrv_addr(spec["ns"])
    consumer.set_thread_count(int(spec.get("threads", 4)))
    fail = spec.get("fail") == "always"
    expect = int(spec["expect"])
    count = 0
    count_lock = threading.Lock()
    enough = threading.Event()

    def on_message(_consumer: Any, raw: Any) -> int:
        nonlocal count
        emit(_delivery(client.RecvMessage(raw)))
        with count_lock:
            count += 1
            if count >= expect:
                enough.set()
        # The binding's own subscribe() signals RECONSUME_LATER by raising from the ctypes callback, whose
        # return value ctypes then leaves undefined; this callback answers the status itself.
        return int(_CConsumeStatus.RECONSUME_LATER if fail else _CConsumeStatus.CONSUME_SUCCESS)

    client.ffi_check(dll.Subscribe(consumer._handle, spec["topic"].encode(), spec.get("expression", "*").encode()))
    consumer._register_callback(on_message)  # wraps it in MSG_CALLBACK_FUNC and keeps the reference
    consumer.start()
    emit({"started": True})
    try:
        enough.wait(float(spec.get("timeout", 60)))
        time.sleep(float(spec.get("settle", 0)))
    finally:
        consumer.shutdown()  # persists the consumed offsets (to the broker; broadcast: to a local file)
    emit({"done": True, "received": count})


def pull(spec: dict[str, Any]) -> None:
    consumer = client.PullConsumer(spec["group"])
    consumer.set_namesrv_addr(spec["ns"])
    consumer.start()
    try:
        for msg in consumer.pull(spec["topic"], spec.get("expression", "*"), int(spec.get("max_num", 32))):
            emit(_delivery(msg))
        # the binding keys its table by f"{mq.topic}@{queueId}", with the topic as bytes: b'T'@0
        emit({"done": True, "offsets": {k.replace("b'", "", 1).replace("'@", "@", 1): v
                                        for k, v in consumer.offset_table.items()}})
    finally:
        consumer.shutdown()


ACTIONS = {"produce": produce, "push": push, "pull": pull}


def main(argv: list[str]) -> int:
    action, spec = argv[1], json.loads(argv[2])
    ACTIONS[action](spec)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
