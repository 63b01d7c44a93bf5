"""When borrowing is worth a later reclaim (``core.lending``), whose turn it is to borrow
with a large job (``cycle.borrowing_turn``), and forecast ends spread by the learned runtime
distribution (``estimate.spread_ends``, ``Runtimes.residuals``), learned per queue until a
user has runtimes enough of their own, with users charged in the forecast as the cycle charges
them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpupool.core import JobId
from gpupool.core.estimate import spread_ends
from gpupool.core.runtimes import MIN_SAMPLES, OWN_SAMPLES, Runtimes, survival
from gpupool.core.scheduler import Scheduler
from tests.builders import job, node, queue_config, whole


def _stream(s: Scheduler, queue: str, times: list[float]) -> None:
    """One-GPU jobs of ``queue`` submitted at ``times``, each admitted in a cycle at its
    arrival, the one before ending then."""
    for i, t in enumerate(times):
        if i:
            s.finished(f"{queue}-s{i - 1}", t)
        s.submit(job(f"{queue}-s{i}", gpu=whole(1), queue=queue, submit=t, duration=290.0), t)
        s.cycle(t)


def test_no_borrowing_of_quota_a_steady_owner_will_claim_back_before_the_job_ends() -> None:
    """a submits a job every 5 minutes and holds 1 of its 2 GPUs, with nothing pending for
    the moment; b (at its nominal quota) would borrow a's free GPU for an hour. a's next job,
    due within minutes, would reclaim it: b waits, and says why."""
    s = Scheduler([node("n0", gpu=4)], queue_config({"a": 2, "b": 2}))
    _stream(s, "a", [i * 300.0 for i in range(8)])
    for i in range(2):
        s.submit(job(f"b{i}", gpu=whole(1), queue="b", submit=2100.0, duration=3600.0), 2100.0)
    s.cycle(2100.0)
    s.submit(job("b-more", gpu=whole(1), queue="b", submit=2110.0, duration=3600.0), 2110.0)
    r = s.cycle(2110.0)
    assert not r.binds
    assert [p.job for p in r.parks] == ["b-more"]
    assert "a submit for steadily and would reclaim" in r.parks[0].status.message


def test_quota_of_an_owner_that_stopped_or_comes_in_bursts_is_lent() -> None:
    """The same borrower, when the owner submitted one burst (nothing says more is coming):
    it borrows."""
    s = Scheduler([node("n0", gpu=4)], queue_config({"a": 2, "b": 2}))
    for i in range(8):  # a burst at one instant: nothing says more is coming
        s.submit(job(f"a{i}", gpu=whole(1), queue="a", submit=0.0, duration=10.0), 0.0)
    for t in (0.0, 60.0, 120.0, 180.0):
        for jid in list(s._ctx.running):
            s.finished(jid, t)
        s.cycle(t)
    assert not s._queues.has_pending("a")
    for i in range(3):
        s.submit(job(f"b{i}", gpu=whole(1), queue="b", submit=200.0, duration=3600.0), 200.0)
    r = s.cycle(200.0)
    assert sorted(b.job for b in r.binds) == ["b0", "b1", "b2"]


def test_the_forecast_lends_as_the_cycle_will_once_a_young_stream_is_recognised() -> None:
    """a began submitting a job a minute 4 minutes ago: too young for the cycle to take it
    for a stream (its arrivals span less than a third of the window), but it will in 6
    minutes, and from then on the cycle does not lend a's free GPU to b's hour-long job.
    The forecast must not lend it either: b-more starts when b's own jobs end, as the
    cycle then does (it was forecast to borrow a's GPU when a's running job ends)."""
    s = Scheduler([node("n0", gpu=4)], queue_config({"a": 2, "b": 2}))
    for i in range(2):
        s.submit(job(f"b{i}", gpu=whole(1), queue="b", submit=0.0, duration=5000.0), 0.0)
    s.submit(job("a-long", gpu=whole(1), queue="a", submit=0.0, duration=700.0), 0.0)
    s.cycle(0.0)
    s.submit(job("b-more", gpu=whole(1), queue="b", submit=30.0, duration=3600.0), 30.0)
    times = [i * 60.0 for i in range(84)]  # a's arrivals, up to 4,980 s
    _stream(s, "a", times[:5])
    est = s.estimates(240.0)[JobId("b-more")][1]
    started = None
    for i, t in enumerate(times[5:], start=5):
        if t >= 700.0 and "a-long" in s._ctx.running:
            s.finished(JobId("a-long"), 700.0)
        s.finished(JobId(f"a-s{i - 1}"), t)
        s.submit(job(f"a-s{i}", gpu=whole(1), queue="a", submit=t, duration=290.0), t)
        if any(b.job == "b-more" for b in s.cycle(t).binds):
            started = t
    for i in range(2):
        s.finished(JobId(f"b{i}"), 5000.0)
    if started is None and any(b.job == "b-more" for b in s.cycle(5000.0).binds):
        started = 5000.0
    assert started == 5000.0  # the cycle lent a's GPU to no one: a streams
    assert est == pytest.approx(5000.0)  # and so the forecast


def test_a_gang_that_would_borrow_waits_until_its_queue_has_made_up_for_the_last() -> None:
    """d's 8-GPU gang (nominal 4) ran for 90 minutes at twice d's share and just ended, so d
    holds nothing now: by its share now d would go first and take 8 again, while a and b
    (below their nominal quota) wait. d held more than its share lately: a and b go first,
    and d's next gang, which would hold d at twice its share for an hour (one share-hour
    above it), borrows once d is owed half of that (``ShareHistory.credit``)."""
    s = Scheduler([node("n0", gpu=8), node("n1", gpu=8)], queue_config({"a": 6, "b": 6, "d": 4}))
    s.submit(job("d-gang", tasks=2, gpu=whole(4), queue="d", duration=5400.0), 0.0)
    r = s.cycle(0.0)
    assert [b.job for b in r.binds] == ["d-gang"]
    for q in ("a", "b"):
        for i in range(4):
            s.submit(job(f"{q}{i}", gpu=whole(1), queue=q, submit=1.0, duration=9000.0), 1.0)
    s.cycle(1.0)
    s.submit(
        job("d-gang2", tasks=2, gpu=whole(4), queue="d", submit=3000.0, duration=3600.0), 3000.0
    )
    for q in ("a", "b"):
        for i in range(4, 6):
            s.submit(job(f"{q}{i}", gpu=whole(1), queue=q, submit=3000.0, duration=9000.0), 3000.0)
    s.finished("d-gang", 5400.0)
    r = s.cycle(5400.0)
    bound = {b.job for b in r.binds}
    assert "d-gang2" not in bound
    assert {"a4", "a5", "b4", "b5"} <= bound
    parked = {p.job: p.status.message for p in r.parks}
    assert (
        "waiting for queue d's turn to borrow: it is owed -0.93 share-hours (its share held "
        "lately less its fair share), and this job would hold it 1.00 share-hours above"
    ) in parked["d-gang2"]
    for i in range(4):
        s.finished(f"a{i}", 9000.0)
        s.finished(f"b{i}", 9000.0)
    r = s.cycle(9000.0)  # owed 0.07 share-hours (-0.93 + an hour at 0): not half of 1.00
    assert not r.binds
    assert "it is owed 0.07 share-hours" in r.parks[0].status.message
    r = s.cycle(10_800.0)  # owed 0.57: the gang goes
    assert [b.job for b in r.binds] == ["d-gang2"]


def test_spread_ends_ends_a_crowd_one_after_another_not_all_at_the_mean() -> None:
    """Ten runs whose remaining time is uniform on 0..1000 s: ended at their mean they would
    all end at 500 s; spread, the first ends near the start and the last near the end."""
    uniform = [(float(x), 1 / 21) for x in range(0, 1001, 50)]
    ends = sorted(spread_ends([uniform] * 10))
    assert ends[0] <= 100 and ends[-1] >= 900
    # The run with the shortest remaining times ends first.
    out = spread_ends([[(float(x), 1 / 11) for x in range(0, 101, 10)], *[uniform] * 3])
    assert out[0] == min(out)


def test_learned_runtimes_count_the_runs_still_going_as_at_least_their_age() -> None:
    """Four short runs ended (10 min) while four others have run 50 minutes and go on: the
    runtime is not "10 minutes" but half 10 minutes, half at least 50 (put at the prior, the
    1 h default runtime); a run of age 30 minutes has 30 minutes left."""
    r = Runtimes(3600.0)
    j = job("x", queue="a")
    for k in range(MIN_SAMPLES):
        r.started(job(f"long{k}", queue="a"), 0.0)
        r.observe(j, 600.0)
    assert r.distribution(j, 3000.0) == [(600.0, 0.5), (3600.0, 0.5)]
    assert r.residuals(j, 1800.0, 3000.0) == [(1800.0, 1.0)]
    assert r.residuals(j, 3600.0, 3000.0) is None  # past all of it: the mean's rule says
    assert r.residuals(job("d", queue="a", duration=100.0), 0.0, 3000.0) is None  # declared
    assert r.quantile(j, 0.2, 3000.0) == 600.0 and r.quantile(j, 0.7, 3000.0) == 3600.0
    assert survival([1.0, 2.0], [], 9.0) == [(1.0, 0.5), (2.0, 0.5)]


def test_a_user_with_few_runtimes_of_their_own_is_forecast_by_their_queues() -> None:
    """u1's four runs ended after 100 s while their queue's 40 runs (u2's) took 1,000 s: four
    runtimes are too few to be a distribution of their own, so u1's runtime is the queue's;
    once ``OWN_SAMPLES`` of u1's ended, u1's own."""
    r = Runtimes(3600.0)
    u1, u2 = replace(job("x", queue="a"), user="u1"), replace(job("y", queue="a"), user="u2")
    for _ in range(MIN_SAMPLES):
        r.observe(u1, 100.0)
    for _ in range(40):
        r.observe(u2, 1000.0)
    got = r.distribution(u1, 0.0)
    assert got is not None and r.quantile(u1, 0.5, 0.0) == 1000.0
    for _ in range(OWN_SAMPLES - MIN_SAMPLES):
        r.observe(u1, 100.0)
    assert r.distribution(u1, 0.0) == [(100.0, 1.0)]


def test_the_forecast_charges_a_run_that_ends_for_what_it_used_as_the_cycle_does() -> None:
    """u1's run A began charged for the 1 h default runtime; the queue has since learned that
    runs take 300 s, so A is forecast to end at t=1,300 s, having used 300 s. The cycle then
    charges u1 what A used (300 s, less than u2's 1,000 s), and u1's B goes before u2's C,
    which came first. The forecast must charge the same, or it starts C in B's place."""
    s = Scheduler([node("n0", gpu=1)], queue_config({"a": 1}))

    def submit(name: str, user: str, t: float, duration: float | None = None) -> None:
        j = job(name, gpu=whole(1), queue="a", submit=t, duration=duration)
        s.submit(replace(j, user=user), t)

    submit("D", "u2", 0.0, duration=1000.0)
    s.cycle(0.0)
    s.finished(JobId("D"), 1000.0)  # u2 used 1,000 s
    submit("A", "u1", 1000.0)
    s.cycle(1000.0)  # A runs, u1 charged 3,600 s
    u3 = replace(job("z", queue="a"), user="u3")
    for _ in range(MIN_SAMPLES):
        s._ctx.runtimes.observe(u3, 300.0)
    submit("C", "u2", 1040.0)
    submit("B", "u1", 1050.0)
    est = s.estimates(1100.0)
    assert est[JobId("B")][1] == pytest.approx(1300.0)
    assert est[JobId("C")][1] is not None and est[JobId("C")][1] > 1300.0
    # And the cycle agrees once A ends there.
    s.finished(JobId("A"), 1300.0)
    assert [b.job for b in s.cycle(1300.0).binds] == ["B"]
