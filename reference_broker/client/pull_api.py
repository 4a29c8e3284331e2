"""PullAPIWrapper's choice of broker (client/.../impl/consumer/PullAPIWrapper.java, 4.9.8).

Each pull response carries the broker's suggestWhichBrokerId: the master (0) normally; a master with
slaveReadEnable whose reader is far behind (more than accessMessageInMemoryMaxRatio of RAM) names the group's
whichBrokerWhenConsumeSlowly (1). The next pull of that queue goes there (updatePullFromWhichNode /
recalculatePullFromWhichNode), or to any broker of the name when that one is not in the route — the master,
else a slave, which is how consumers keep reading while a master is down. A pull sent to a slave never carries
the commit-offset flag (a slave does not store offsets from pulls). A class-filter subscription's pulls go to
one of the broker's filter servers instead (4.2.0).
"""

from __future__ import annotations

import threading

from reference_broker.client.errors import ClientErrorCode, MQClientError
from reference_broker.client.instance import FindBrokerResult, MQClientInstance
from reference_broker.client.message import MessageQueue
from reference_broker.common.route_data import MASTER_ID
from reference_broker.remoting.headers import PULL_FLAG_COMMIT_OFFSET


class PullFromWhichNode:
    def __init__(self) -> None:
        self._table: dict[MessageQueue, int] = {}
        self._lock = threading.Lock()

    def update(self, mq: MessageQueue, broker_id: int) -> None:
        """updatePullFromWhichNode: the broker id the last response suggested."""
        with self._lock:
            self._table[mq] = broker_id

    def recalculate(self, mq: MessageQueue) -> int:
        """recalculatePullFromWhichNode (connectBrokerByUser is not supported): the suggestion, else the master."""
        with self._lock:
            return self._table.get(mq, MASTER_ID)

    def find(self, instance: MQClientInstance, mq: MessageQueue) -> FindBrokerResult:
        """pullKernelImpl's lookup: refresh the route once when the broker is unknown."""
        broker_id = self.recalculate(mq)
        found = instance.find_broker_in_subscribe(mq.broker_name, broker_id, False)
        if found is None:
            instance.update_topic_route(mq.topic)
            found = instance.find_broker_in_subscribe(mq.broker_name, broker_id, False)
        if found is None:
            raise MQClientError(ClientErrorCode.BROKER_NOT_EXIST_EXCEPTION, f"The broker[{mq.broker_name}] not exist")
        return found


def sys_flag_for(sys_flag: int, found: FindBrokerResult) -> int:
    """pullKernelImpl: PullSysFlag.clearCommitOffsetFlag when the pull goes to a slave."""
    return sys_flag & ~PULL_FLAG_COMMIT_OFFSET if found.slave else sys_flag


def filter_server_for(instance: MQClientInstance, mq: MessageQueue, broker_addr: str) -> str:
    """pullKernelImpl / computPullFromWhichFilterServer (4.2.0): a class-filter pull goes to one of the broker's
    filter servers; MQClientError when the route lists none."""
    addr = instance.find_filter_server(mq.topic, broker_addr)
    if addr is None:
        raise MQClientError(ClientErrorCode.BROKER_NOT_EXIST_EXCEPTION,
                            f"Find Filter Server Failed, Broker Addr: {broker_addr} topic: {mq.topic}")
    return addr
