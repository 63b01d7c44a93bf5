"""A large job's turn to borrow is weighed in share-time (``cycle_turn.borrowing_turn``): what
the job would hold its queue above its fair share, against what the queue is owed
(``ShareHistory.credit``); and the room held for a reserved gang is its own even when a job
of its shape is tried before it (``admission.try_admit``'s memo of failures)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from gpupool.core.cycle_turn import over_share_s
from gpupool.core.fairshare import ShareHistory
from gpupool.core.scheduler import Scheduler
from tests.builders import job, node, queue_config, whole

HOUR = 3600.0
RATE = math.log(2.0) / HOUR


def test_credit_starts_at_owed_nothing_and_counts_share_time_below_the_fair_share() -> None:
    """The average starts from 0, so a queue that has held 1.2 of its share since t=0 reads
    0.6 after an hour; its credit reads what it has had over its share: -0.2 for the hour,
    decayed as the average is. Idle (nothing waiting) it is counted at its share at least,
    alone (the others idle) at its share at most."""
    h = ShareHistory(HOUR)
    h.advance("d", 0.0)
    h.hold("d", 1.2, 0.0)
    h.advance("d", HOUR)
    assert h.average("d") == pytest.approx(0.6)
    assert h.credit("d") == pytest.approx(-0.2 * 0.5 / RATE)
    before = h.credit("d")
    h.hold("d", 0.5, HOUR, waiting=False)  # asks for nothing: banks nothing
    h.advance("d", 2 * HOUR)
    assert h.credit("d") == pytest.approx(before * 0.5)
    h.hold("d", 2.0, 2 * HOUR, alone=True)  # takes what nobody asks for: charged nothing
    h.advance("d", 3 * HOUR)
    assert h.credit("d") == pytest.approx(before * 0.25)
    assert h.copy().credit("d") == h.credit("d")


def test_a_queue_waiting_below_its_share_is_owed_every_second_of_it() -> None:
    """While a queue waits below its share, what it is owed is not forgotten: three hours
    at 0.67 (16 of 24 GPUs, its next gang waiting) owe it 1.0 share-hour. Decayed as the
    average is, the credit could never pass (1 - 0.67) / rate = 0.48 share-hours at that
    share, and a gang whose turn needs more (gang-priority seeds 10, 12: a 32-GPU gang
    beside a 16-GPU one) never got it. Held at or above its share, it decays as before."""
    h = ShareHistory(HOUR)
    h.advance("d", 0.0)
    h.hold("d", 16 / 24, 0.0)
    for t in range(1, 4):
        h.advance("d", t * HOUR)
        h.hold("d", 16 / 24, t * HOUR)
    assert h.credit("d") == pytest.approx(3 * HOUR / 3)
    assert h.credit("d") > (1 - 16 / 24) / RATE
    h.hold("d", 1.0, 3 * HOUR)  # at its share: decayed as before, halved an hour later
    h.advance("d", 4 * HOUR)
    assert h.credit("d") == pytest.approx(HOUR * 0.5)


def test_over_share_counts_the_time_until_the_queues_running_jobs_end() -> None:
    """d (nominal 8) runs 6 GPUs; 8 more for an hour hold it at 14/8 until its run ends at
    t=1000, then at 8/8: 0.75 x 1000 share-seconds over its share, whatever comes after."""
    s = Scheduler([node("n0", gpu=8), node("n1", gpu=8)], queue_config({"a": 8, "d": 8}))
    s.submit(job("d-run", gpu=whole(6), queue="d", duration=1000.0), 0.0)
    s.cycle(0.0)
    ctx = s._ctx
    demand = {k: v for k, v in ctx.running["d-run"].demand.items()}
    gang = {k: v * 8 // 6 for k, v in demand.items()}
    assert over_share_s(ctx, "d", gang, (0.0, HOUR), [(1000.0, demand)]) == pytest.approx(750.0)
    # Running on past the gang's end: the whole hour.
    assert over_share_s(ctx, "d", gang, (0.0, HOUR), [(9000.0, demand)]) == pytest.approx(2700.0)
    assert ctx.tree.share("d") == pytest.approx(0.75)  # the books are as they were


def _queue_over_its_share_for_an_hour() -> Scheduler:
    """d (nominal 10) runs a 12-GPU gang from t=0 for an hour (borrowing 2 while a, also
    nominal 10, is idle), then a runs 3 GPUs; d's next gang, 15 GPUs, is waiting from t=3000."""
    s = Scheduler([node(f"n{i}", gpu=8) for i in range(3)], queue_config({"a": 10, "d": 10}))
    s.submit(job("d-gang1", tasks=3, gpu=whole(4), queue="d", duration=HOUR), 0.0)
    assert [b.job for b in s.cycle(0.0).binds] == ["d-gang1"]  # a is idle: it takes nothing
    for i in range(3):
        s.submit(job(f"a{i}", gpu=whole(1), queue="a", submit=1.0, duration=5 * HOUR), 1.0)
    s.cycle(1.0)
    s.submit(job("d-gang2", tasks=3, gpu=whole(5), queue="d", submit=3000.0, duration=HOUR), 3000)
    s.cycle(3000.0)
    s.finished("d-gang1", HOUR)
    return s


def test_a_queue_over_its_share_since_the_start_is_not_let_borrow_by_the_young_average() -> None:
    """After an hour at 1.2 of its share since t=0, d's share held lately reads 0.6 (the
    average starts at 0), and the gang, at 1.5 for an hour, would have borrowed at once
    (halfway through it the average reads 0.86). d has had 0.14 share-hours over its share:
    the gang, 0.5 share-hours over it, waits until d is owed 0.25, half an hour below its
    share later."""
    s = _queue_over_its_share_for_an_hour()
    r = s.cycle(HOUR)
    assert not r.binds
    assert "it is owed -0.14 share-hours" in r.parks[0].status.message
    assert "would hold it 0.50 share-hours above its fair share" in r.parks[0].status.message
    assert not s.cycle(HOUR + 1200.0).binds
    assert [b.job for b in s.cycle(HOUR + 1800.0).binds] == ["d-gang2"]


@pytest.mark.parametrize(("own_end", "goes"), [(2000.0, True), (9000.0, False)])
def test_a_borrowing_gang_is_weighed_by_the_time_it_holds_its_queue_above_its_share(
    own_end: float, goes: bool
) -> None:
    """d (nominal 8) runs 6 GPUs and waits with an 8-GPU gang for an hour since t=0; at
    t=1500 it is owed 0.09 share-hours. With its run ending at t=2000 the gang holds d
    above its share for 500 s only (0.10 share-hours): it goes. With its run going on past
    the gang, the gang holds d at 14/8 for the whole hour (0.75 share-hours): it waits."""
    s = Scheduler([node(f"n{i}", gpu=8) for i in range(3)], queue_config({"a": 8, "b": 8, "d": 8}))
    for i in range(2):
        s.submit(job(f"a{i}", gpu=whole(1), queue="a", duration=5 * HOUR), 0.0)
    s.submit(job("d-run", gpu=whole(6), queue="d", duration=own_end), 0.0)
    s.submit(job("d-gang", gpu=whole(8), queue="d", duration=HOUR), 0.0)
    r = s.cycle(0.0)
    assert "d-gang" not in {b.job for b in r.binds}  # owed nothing yet
    r = s.cycle(1500.0)
    assert ("d-gang" in {b.job for b in r.binds}) is goes


def test_the_reserved_gang_takes_its_room_though_a_job_of_its_shape_is_tried_first() -> None:
    """Room is held on n0 for x (4 GPUs, reserved when it came); y, of x's shape and queue
    but of a user who has used nothing, comes first in the queue's order from then on and
    finds n0 held. When n0 frees, y's failure must not stand for x (placement failures are
    remembered by shape within a cycle): x starts there. (It was told its own room was "held
    for gang x", every cycle, until another node freed.) d has quota for both: x holds no
    quota, so y is tried."""
    s = Scheduler([node("n0", gpu=4), node("n1", gpu=4)], queue_config({"d": 16}), None, 4)
    for name, end in (("f0", 1000.0), ("f1", 9000.0)):
        s.submit(replace(job(name, gpu=whole(4), queue="d", duration=end), user="u1"), 0.0)
    s.cycle(0.0)
    s.submit(replace(job("x", gpu=whole(4), queue="d", submit=10.0), user="u1"), 10.0)
    r = s.cycle(10.0)
    assert r.holds and r.holds[0].job == "x"
    s.submit(replace(job("y", gpu=whole(4), queue="d", submit=20.0), user="u2"), 20.0)
    assert not s.cycle(20.0).binds
    s.finished("f0", 1000.0)
    r = s.cycle(1000.0)
    assert [b.job for b in r.binds] == ["x"]
