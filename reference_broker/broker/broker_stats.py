"""BrokerStats (store/.../stats/BrokerStats.java, 4.9.8): messages put and got, today and yesterday.

GET_BROKER_RUNTIME_INFO reports msgPutTotalTodayNow (messages stored since boot), msgPutTotalTodayMorning and
msgPutTotalYesterdayMorning (that total at the last two local midnights; 0 until the broker has seen one), and
the same three for messages handed out by pulls (msgGet*). The broker calls ``record`` at each local midnight
(BrokerController.initialize: first at UtilAll.computeNextMorningTimeMillis, then every day).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable

DAY_S = 86_400.0


def seconds_until_next_morning(now: datetime.datetime) -> float:
    """UtilAll.computeNextMorningTimeMillis: the next local midnight, from ``now`` (local, naive or aware)."""
    midnight = (now + datetime.timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    return (midnight - now).total_seconds()


class BrokerStats:
    def __init__(self, put_total: Callable[[], int], get_total: Callable[[], int]) -> None:
        self._put_total = put_total
        self._get_total = get_total
        self.msg_put_total_yesterday_morning = 0
        self.msg_put_total_today_morning = 0
        self.msg_get_total_yesterday_morning = 0
        self.msg_get_total_today_morning = 0

    def record(self) -> None:
        """BrokerStats.record: today's morning becomes yesterday's, and now becomes today's morning."""
        self.msg_put_total_yesterday_morning = self.msg_put_total_today_morning
        self.msg_get_total_yesterday_morning = self.msg_get_total_today_morning
        self.msg_put_total_today_morning = self._put_total()
        self.msg_get_total_today_morning = self._get_total()

    def runtime_info(self) -> dict[str, str]:
        """AdminBrokerProcessor.prepareRuntimeInfo's six msgPut*/msgGet* keys."""
        return {
            "msgPutTotalYesterdayMorning": str(self.msg_put_total_yesterday_morning),
            "msgPutTotalTodayMorning": str(self.msg_put_total_today_morning),
            "msgPutTotalTodayNow": str(self._put_total()),
            "msgGetTotalYesterdayMorning": str(self.msg_get_total_yesterday_morning),
            "msgGetTotalTodayMorning": str(self.msg_get_total_today_morning),
            "msgGetTotalTodayNow": str(self._get_total()),
        }
