"""BrokerStats: msgPut*/msgGet* as 4.9.8's GET_BROKER_RUNTIME_INFO reports them; the midnight schedule."""

from __future__ import annotations

import datetime

from reference_broker.broker.broker_stats import BrokerStats, seconds_until_next_morning


def test_record_shifts_today_to_yesterday_and_now_to_today():
    totals = {"put": 5, "get": 2}
    stats = BrokerStats(lambda: totals["put"], lambda: totals["get"])
    assert stats.runtime_info() == {
        "msgPutTotalYesterdayMorning": "0", "msgPutTotalTodayMorning": "0", "msgPutTotalTodayNow": "5",
        "msgGetTotalYesterdayMorning": "0", "msgGetTotalTodayMorning": "0", "msgGetTotalTodayNow": "2"}
    stats.record()
    totals.update(put=9, get=7)
    stats.record()
    totals.update(put=12)
    info = stats.runtime_info()
    assert (info["msgPutTotalYesterdayMorning"], info["msgPutTotalTodayMorning"], info["msgPutTotalTodayNow"]) == (
        "5", "9", "12")
    assert (info["msgGetTotalYesterdayMorning"], info["msgGetTotalTodayMorning"], info["msgGetTotalTodayNow"]) == (
        "2", "7", "7")


def test_next_morning_is_the_next_local_midnight():
    assert seconds_until_next_morning(datetime.datetime(2026, 3, 1, 23, 59, 30)) == 30
    assert seconds_until_next_morning(datetime.datetime(2026, 3, 1, 0, 0, 0)) == 86_400
