"""Classic master/slave replication over TCP (RocketMQ 4.9.8 store/ha: HAService, HAConnection, HAClient).

The store owns the formats and the SYNC_MASTER condition (reference_broker/store/ha); this package owns the
sockets and their threads, so that the store stays free of networking. ``attach_ha`` gives a store the part its
role needs: a master listens for slaves (HAService, on haListenPort), a slave replicates from its master (HAClient).
"""

from __future__ import annotations

import asyncio

from reference_broker.ha.client import HAClient
from reference_broker.ha.service import HAService
from reference_broker.store.config import BrokerRole
from reference_broker.store.message_store import MessageStore

__all__ = ["HAClient", "HAService", "attach_ha"]


def attach_ha(store: MessageStore, loop: asyncio.AbstractEventLoop | None = None) -> HAService | HAClient:
    """The store's replication threads by role, attached so that ``store.start``/``shutdown`` run them; a
    master reads its slaves' reports on ``loop`` when given (the broker's event loop)."""
    ha: HAService | HAClient = (HAClient(store) if store.config.broker_role is BrokerRole.SLAVE
                                else HAService(store, loop=loop))
    store.attach_ha(ha)
    return ha
