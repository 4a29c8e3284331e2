"""The ``cpp`` driver: Apache RocketMQ's C++ client (PyPI ``rocketmq`` 0.4.x, the ``interop`` extra; a ctypes
binding over its wheel's ``librocketmq.so``) as the producer, this project's client for consumption and the admin
protocol (topics, backlog, broker facts). It drives any RocketMQ 4.x broker by name-server address, ours or
Apache's, with a producer no one here wrote and less client CPU per message than the Python client.

Outcomes: a SendResult of any status is "ok" (as ``harness.send_outcome``: the status kept as its response
code). The binding raises one exception class per call kind (``ProducerSendSyncFailed``, ...) with the C++
client's message and no code that tells a timeout from a refusal, so every failed send is "unknown" (maybe
stored) — the cautious reading; the checker never counts an unknown send as lost. The SendResult carries the
queue offset but not the queue: the queue is known only when the send chose it (``queue``: the binding's
``send_orderly`` with the queue number as its selector argument, ``arg % queue count``).
"""

# PyPI rocketmq ships no type information; its names are Any here.
# mypy: disable-error-code="import-untyped,import-not-found,unused-ignore"

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Final

from harness.driver import RocketMQDriver, SendCallback, SendOutcome
from harness.records.schema import Outcome
from reference_broker.remoting.codes import ResponseCode

# rocketmq.client.SendStatus names -> the response code a 4.9.8 broker answered (harness.send_outcome's table).
STATUS_CODES: Final[dict[str, int]] = {
    "OK": ResponseCode.SUCCESS,
    "FLUSH_DISK_TIMEOUT": ResponseCode.FLUSH_DISK_TIMEOUT,
    "FLUSH_SLAVE_TIMEOUT": ResponseCode.FLUSH_SLAVE_TIMEOUT,
    "SLAVE_NOT_AVAILABLE": ResponseCode.SLAVE_NOT_AVAILABLE,
}
SHUTDOWN_WAIT_S: Final = 10.0  # the binding's shutdown can block; it is left to a daemon thread after this


def cpp_unavailable() -> str | None:
    """Why the C++ client cannot load here, or None. Checked in a child process: loading librocketmq.so starts
    nothing, but a caller that never uses the client (a test deciding whether to skip) should not carry it."""
    done = subprocess.run([sys.executable, "-c", "import rocketmq.client"], capture_output=True, text=True,
                          timeout=60, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        return f"RocketMQ's C++ client (PyPI rocketmq 0.4.x, pip install -e '.[interop]') does not load: {last}"
    return None


class CppDriver(RocketMQDriver):
    impl = "cpp"
    rocketmq_client = "cpp"  # the C++ client's sends (the Python client only for routes and admin)

    def __init__(self, namesrv: str, **kw: Any) -> None:
        super().__init__(namesrv, **kw)
        self._cpp: Any = None
        self._cpp_lock = threading.Lock()

    def start(self) -> None:
        super().start()  # the Python producer stays for the route queries the admin side makes
        with self._cpp_lock:
            if self._cpp is None:
                from rocketmq import client

                producer = client.Producer(f"{self.producer_group}_cpp", timeout=int(self.send_timeout_s * 1000))
                producer.set_namesrv_addr(self.namesrv)
                producer.start()
                self._cpp = producer

    def stop(self) -> None:
        with self._cpp_lock:
            producer, self._cpp = self._cpp, None
        if producer is not None:
            t = threading.Thread(target=producer.shutdown, name="cpp-shutdown", daemon=True)
            t.start()
            t.join(SHUTDOWN_WAIT_S)
        super().stop()

    def _message(self, topic: str, key: str, body: bytes) -> Any:
        from rocketmq import client

        msg = client.Message(topic)
        msg.set_keys(key)
        msg.set_body(body)
        return msg

    @staticmethod
    def _outcome(res: Any, queue: int) -> SendOutcome:
        return SendOutcome(Outcome.OK, int(STATUS_CODES.get(res.status.name, ResponseCode.SUCCESS)), queue,
                           int(res.offset))

    def _running_cpp(self) -> Any:
        if self._cpp is None:
            self.start()
        return self._cpp

    def send(self, topic: str, key: str, body: bytes, queue: int | None = None) -> SendOutcome:
        producer = self._running_cpp()
        try:
            msg = self._message(topic, key, body)
            if queue is None:
                return self._outcome(producer.send_sync(msg), -1)
            n = max(1, self.queue_count(topic))
            return self._outcome(producer.send_orderly(msg, queue % n), queue % n)
        except Exception as exc:  # noqa: BLE001 - the binding's exception: timeout or refusal, not told apart
            return SendOutcome(Outcome.UNKNOWN, -1, error=f"{type(exc).__name__}: {exc}"[:200])

    def send_async(self, topic: str, key: str, body: bytes, callback: SendCallback, queue: int | None = None) -> None:
        if queue is not None:  # the binding has no async send to a chosen queue
            callback(self.send(topic, key, body, queue))
            return
        producer = self._running_cpp()
        once = threading.Lock()

        def answer(o: SendOutcome) -> None:
            if once.acquire(blocking=False):
                callback(o)

        try:
            producer.send_async(self._message(topic, key, body), lambda res: answer(self._outcome(res, -1)),
                                lambda exc: answer(SendOutcome(Outcome.UNKNOWN, -1, error=repr(exc)[:200])))
        except Exception as exc:  # noqa: BLE001 - refused before anything was written
            answer(SendOutcome(Outcome.FAIL, -1, error=repr(exc)[:200]))

    def send_batch(self, topic: str, keys: Sequence[str], bodies: Sequence[bytes],
                   queue: int | None = None) -> SendOutcome:
        """The binding's ``send_batch`` (it sets no batch header: 4.9.8 stores it as one message; see
        docs/interop.md), so a batch here is one message per key, sent one after another."""
        t0 = time.monotonic()
        worst: SendOutcome | None = None
        first: SendOutcome | None = None
        for k, b in zip(keys, bodies, strict=True):
            o = self.send(topic, k, b, queue)
            first = first or o
            if o.outcome != Outcome.OK and (worst is None or worst.outcome == Outcome.FAIL):
                worst = o
            if time.monotonic() - t0 > self.send_timeout_s * 4:
                break
        assert first is not None
        return replace(worst or first, queue_offset=-1)  # not consecutive offsets: no position per message

    def broker_facts(self) -> dict[str, Any]:
        facts = super().broker_facts()
        facts["client"] = "rocketmq-client-cpp (PyPI rocketmq 0.4.x)"
        return facts
