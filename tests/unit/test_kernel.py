"""The simulation kernel's event queue: order, cancellation, batches, restore."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupool.kernel import EventQueue


def test_events_come_out_by_time_then_scheduling_order() -> None:
    q: EventQueue[str] = EventQueue()
    for at, item in [(5.0, "e"), (1.0, "a"), (3.0, "c1"), (3.0, "c2"), (1.0, "b"), (3.0, "c3")]:
        q.schedule(at, item)
    assert q.peek() == 1.0 and len(q) == 6
    out = [q.pop() for _ in range(6)]
    assert out == [(1.0, "a"), (1.0, "b"), (3.0, "c1"), (3.0, "c2"), (3.0, "c3"), (5.0, "e")]
    assert not q and q.peek() == math.inf and q.now == 5.0
    with pytest.raises(IndexError):
        q.pop()


def test_items_are_never_compared() -> None:
    """Two events at one time with items that cannot be ordered still come out in order."""
    q: EventQueue[dict[str, int]] = EventQueue()
    q.schedule(1.0, {"x": 1})
    q.schedule(1.0, {"x": 2})
    assert [q.pop()[1]["x"], q.pop()[1]["x"]] == [1, 2]


def test_cancelled_events_never_come_out_and_do_not_count() -> None:
    q: EventQueue[str] = EventQueue()
    a = q.schedule(1.0, "a")
    b = q.schedule(2.0, "b")
    q.schedule(3.0, "c")
    q.cancel(a)
    assert a not in q and b in q
    assert q.peek() == 2.0 and len(q) == 2
    q.cancel(a)  # twice: nothing
    assert len(q) == 2
    assert q.pop() == (2.0, "b")
    q.cancel(b)  # already handed out: nothing
    assert len(q) == 1 and q.pop() == (3.0, "c")
    assert not q


def test_cancelling_the_last_live_event_empties_the_queue() -> None:
    q: EventQueue[str] = EventQueue()
    q.cancel(q.schedule(4.0, "x"))
    assert not q and q.peek() == math.inf and list(q.pop_until(10.0)) == []


def test_pop_until_takes_events_scheduled_meanwhile_and_stops_at_the_bound() -> None:
    q: EventQueue[str] = EventQueue()
    q.schedule(1.0, "a")
    q.schedule(5.0, "late")
    seen = []
    for at, item in q.pop_until(2.0):
        seen.append(item)
        if item == "a":
            q.schedule(at, "same time")
            q.schedule(2.0, "at the bound")
            q.schedule(2.5, "after")
    assert seen == ["a", "same time", "at the bound"]
    assert q.peek() == 2.5 and len(q) == 2


def test_run_hands_every_due_event_over_and_moves_now_to_the_bound() -> None:
    q: EventQueue[int] = EventQueue()
    for t in (3.0, 1.0, 2.0, 9.0):
        q.schedule(t, int(t))
    got: list[tuple[float, int]] = []
    assert q.run(5.0, lambda at, item: got.append((at, item))) == 3
    assert got == [(1.0, 1), (2.0, 2), (3.0, 3)] and q.now == 5.0 and q.peek() == 9.0


def test_a_time_that_is_not_a_number_is_refused() -> None:
    q: EventQueue[str] = EventQueue()
    with pytest.raises(ValueError, match="at_s=nan"):
        q.schedule(math.nan, "x")


def test_restored_queue_goes_on_in_the_same_order() -> None:
    q: EventQueue[str] = EventQueue()
    for i, t in enumerate((4.0, 1.0, 4.0, 2.0)):
        q.schedule(t, f"e{i}")
    q.cancel(q.schedule(3.0, "gone"))
    again = EventQueue.restored(q.entries(), q.last_id)
    q.schedule(4.0, "new")
    again.schedule(4.0, "new")
    assert [again.pop() for _ in range(len(again))] == [q.pop() for _ in range(len(q))]
    with pytest.raises(ValueError, match="last_id=1"):
        EventQueue.restored([(1.0, 2, "x")], 1)
    with pytest.raises(ValueError, match="share an id"):
        EventQueue.restored([(1.0, 2, "x"), (2.0, 2, "y")], 2)


@given(st.lists(st.tuples(st.integers(0, 20), st.booleans()), max_size=60))
def test_order_is_sorted_by_time_then_schedule_order(events: list[tuple[int, bool]]) -> None:
    q: EventQueue[int] = EventQueue()
    ids = [q.schedule(float(t), i) for i, (t, _) in enumerate(events)]
    for i, (_, cancel) in enumerate(events):
        if cancel:
            q.cancel(ids[i])
    want = sorted(((float(t), i) for i, (t, c) in enumerate(events) if not c))
    assert len(q) == len(want)
    assert [q.pop() for _ in range(len(q))] == want
