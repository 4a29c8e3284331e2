"""The open-loop schedule: slots at fixed times whatever the sender does, rate changes, closed loop."""

import pytest

from scenarios.pacing import Pacer

T0 = 1_700_000_000_000_000_000


def test_slots_are_evenly_spaced_from_the_anchor():
    p = Pacer(1000.0, T0)
    assert [p.take() for _ in range(4)] == [T0, T0 + 1_000_000, T0 + 2_000_000, T0 + 3_000_000]


def test_a_late_sender_does_not_move_the_schedule():
    p = Pacer(100.0, T0)
    p.take()
    # The sender comes back a whole second late: the next slots are still the planned ones, in the past.
    late = T0 + 1_000_000_000
    assert p.take() == T0 + 10_000_000
    assert p.behind_ns(late) == late - (T0 + 20_000_000)


def test_batches_keep_the_message_rate():
    p = Pacer(1000.0, T0, per_slot=10)  # 1000 msg/s in batches of 10 = one slot every 10 ms
    p.take()
    assert p.take() == T0 + 10_000_000


def test_rate_change_reanchors_at_now():
    p = Pacer(10.0, T0)
    p.take()
    p.take()
    p.set_rate(1000.0, T0 + 5)
    assert p.take() == T0 + 5
    assert p.take() == T0 + 5 + 1_000_000


def test_closed_loop_has_no_intended_times():
    p = Pacer(0.0, T0)
    assert not p.open_loop
    assert p.take() is None
    assert p.behind_ns(T0 + 10**9) == 0


def test_negative_rate_is_refused():
    with pytest.raises(ValueError):
        Pacer(-1.0, T0)
