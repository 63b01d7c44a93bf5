"""Borrowing that is not reclaimed a minute later: the fair order gives freed capacity to
queues below their nominal quota first, a preemptor's quota is held for it within the cycle,
an idle queue banks no credit, and fair-share preemption judges by the fair order's own key."""

from __future__ import annotations

from gpupool.core.fairshare import ShareHistory
from gpupool.core.scheduler import Scheduler
from tests.builders import job, node, queue_config, whole


def _one_gpu_jobs(s: Scheduler, queue: str, n: int, at: float, tag: str = "") -> None:
    for i in range(n):
        s.submit(job(f"{queue}{tag}{i}", gpu=whole(1), queue=queue, submit=at), at)


def test_freed_capacity_goes_to_a_queue_below_nominal_before_one_that_would_borrow() -> None:
    """Queue a holds its nominal quota and held little lately; b is below its nominal quota
    but borrowed heavily before. A free GPU goes to b: lent to a it would be reclaimed by b."""
    s = Scheduler([node("n0", gpu=4)], queue_config({"a": 2, "b": 2}))
    _one_gpu_jobs(s, "a", 2, 0.0)
    _one_gpu_jobs(s, "b", 1, 0.0)
    s.cycle(0)
    s._ctx.history.hold("b", 3.0, 0.0)  # b held three times its share for hours
    _one_gpu_jobs(s, "a", 1, 36_000.0, "-next")
    _one_gpu_jobs(s, "b", 1, 36_000.0, "-next")
    r = s.cycle(36_000)
    assert [b.job for b in r.binds] == ["b-next0"]
    assert not r.evicts


def test_a_preemptor_holds_its_quota_so_its_queue_reclaims_no_more_than_its_nominal() -> None:
    """c (nominal 2) returns with three jobs while a borrows the whole cluster: two jobs of a
    are reclaimed, not three (the third job of c would borrow, and be reclaimed in turn)."""
    s = Scheduler([node("n0", gpu=4)], queue_config({"a": 1, "b": 1, "c": 2}))
    _one_gpu_jobs(s, "a", 4, 0.0)
    s.cycle(0)
    _one_gpu_jobs(s, "c", 3, 10.0)
    r = s.cycle(10)
    assert [e.reason.split(":")[0] for e in r.evicts] == ["reclaim", "reclaim"]
    r = s.cycle(20)
    assert sorted(b.job for b in r.binds) == ["c0", "c1"]
    assert s._ctx.tree.borrowed("c") == {}


def test_fair_share_preemption_judges_by_the_fair_orders_key() -> None:
    """b would preempt c by the shares they hold now, but c held far less lately: the order
    gave c that capacity, so b may not take it back (it would be a swap every few cycles)."""
    s = Scheduler([node("n0", gpu=7)], queue_config({"a": 3, "b": 2, "c": 2}))
    _one_gpu_jobs(s, "b", 2, 0.0)
    _one_gpu_jobs(s, "c", 5, 0.0)
    s.cycle(0)
    s._ctx.history.hold("b", 3.0, 0.0)
    s._ctx.history.hold("c", 0.0, 0.0)
    _one_gpu_jobs(s, "b", 1, 36_000.0, "-next")
    r = s.cycle(36_000)
    assert not r.evicts
    # By the shares now alone (nothing held lately), the same request preempts one job of c.
    s2 = Scheduler([node("n0", gpu=7)], queue_config({"a": 3, "b": 2, "c": 2}))
    _one_gpu_jobs(s2, "b", 2, 0.0)
    _one_gpu_jobs(s2, "c", 5, 0.0)
    s2.cycle(0)
    s2._ctx.history = ShareHistory(3600.0)
    _one_gpu_jobs(s2, "b", 1, 36_000.0, "-next")
    assert [e.reason.split(":")[0] for e in s2.cycle(36_000).evicts] == ["fair-share"]


def test_an_idle_queue_banks_no_credit_in_the_fair_order() -> None:
    h = ShareHistory(3600.0)
    h.hold("idle", 0.0, 0.0, waiting=False)
    h.hold("starved", 0.0, 0.0, waiting=True)
    for q in ("idle", "starved"):
        h.advance(q, 36_000.0)
    assert h.average("idle") > 0.99  # counted at its fair share: nothing owed
    assert h.average("starved") < 0.01  # held nothing while waiting: owed
