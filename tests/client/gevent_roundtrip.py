"""Run by test_e2e_gevent in a fresh interpreter: gevent monkey-patches everything first, as locust does,
then a producer and a push consumer (threads become greenlets) do a round trip. Prints "OK <n>" on success."""

from gevent import monkey  # type: ignore[import-untyped]

monkey.patch_all()

import sys  # noqa: E402
import threading  # noqa: E402

import gevent  # noqa: E402

from reference_broker.client.config import ClientConfig  # noqa: E402
from reference_broker.client.message import (  # noqa: E402
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
)
from reference_broker.client.producer import Producer  # noqa: E402
from reference_broker.client.push_consumer import PushConsumer  # noqa: E402


def main(namesrv: str, topic: str, n: int) -> int:
    config = ClientConfig(namesrv, "gevent", poll_name_server_interval_s=1, rebalance_interval_s=1)
    got: set[bytes] = set()
    done = threading.Event()

    def listener(msgs, context):
        got.update(m.body for m in msgs)
        if len(got) >= n:
            done.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    with Producer("PG_gevent", "", client_config=config) as producer:
        producer.send(Message(topic, b"m0"))
        # many greenlets sending at once, sync and async, on one connection
        futures = []

        def sender(start: int) -> None:
            for i in range(start, start + 10):
                if i % 2:
                    futures.append(producer.send_async(Message(topic, f"m{i}".encode())))
                else:
                    producer.send(Message(topic, f"m{i}".encode()))

        gevent.joinall([gevent.spawn(sender, s) for s in range(1, n, 10)], timeout=30, raise_error=True)
        for f in futures:
            assert f is not None
            f.result(30)
        consumer = PushConsumer("CG_gevent", "", client_config=config,
                                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        consumer.subscribe(topic, "*")
        consumer.register_message_listener(listener)
        with consumer:
            if not done.wait(60):
                print(f"only {len(got)} of {n}", flush=True)
                return 1
    print(f"OK {len(got)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
