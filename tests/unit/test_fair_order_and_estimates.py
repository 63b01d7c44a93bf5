"""Expected runtimes, wait estimates, slice charges and the fair order of the core."""

from __future__ import annotations

import dataclasses

import pytest

from gpupool.core import JobId
from gpupool.core.admission import slice_charge_milli
from gpupool.core.model import Job
from gpupool.core.runtimes import Runtimes
from gpupool.core.scheduler import Scheduler
from tests.builders import job, node, queue_config, share, whole


def limited(j: Job, limit: float | None = None, user: str = "") -> Job:
    return dataclasses.replace(j, run_limit_s=limit, user=user)


# -- expected runtimes --------------------------------------------------------------------


def test_declared_duration_beats_learned_and_default() -> None:
    rt = Runtimes(3600.0)
    assert rt.expected(job("a", queue="q")).basis == "default runtime"
    assert rt.expected(job("a", queue="q", duration=900.0)).runtime_s == 900.0
    assert rt.expected(limited(job("a", queue="q", duration=900.0), 600.0)).runtime_s == 600.0
    assert rt.expected(limited(job("a", queue="q"), 1800.0)).basis == "run limit"


def test_learned_runtime_per_queue_and_user_then_per_queue() -> None:
    rt = Runtimes(3600.0, weight=0.5, prior_jobs=0)
    rt.observe(limited(job("a", queue="q"), user="ann"), 600.0)
    rt.observe(limited(job("b", queue="q"), user="ann"), 1000.0)
    ann = rt.expected(limited(job("c", queue="q"), user="ann"))
    assert ann.runtime_s == pytest.approx(800.0)
    assert ann.basis == "learned runtime of q/ann (2 jobs)"
    bob = rt.expected(limited(job("d", queue="q"), user="bob"))
    assert bob.runtime_s == pytest.approx(800.0) and "learned runtime of q (2 jobs)" in bob.basis
    # A run limit caps what was learned; a declared job teaches nothing.
    assert rt.expected(limited(job("e", queue="q"), 500.0, "ann")).runtime_s == 500.0
    rt.observe(limited(job("f", queue="q", duration=9000.0), user="ann"), 9000.0)
    assert rt.expected(limited(job("g", queue="q"), user="ann")).runtime_s == pytest.approx(800)


def test_the_first_ends_lean_on_the_runtime_assumed_before() -> None:
    rt = Runtimes(3600.0, prior_jobs=3)
    rt.observe(limited(job("a", queue="q"), user="u"), 600.0)
    assert rt.expected(limited(job("b", queue="q"), user="u")).runtime_s == pytest.approx(
        (600.0 + 3 * 3600.0) / 4
    )
    assert rt.expected(limited(job("c", queue="q"), 1200.0, "u")).runtime_s == pytest.approx(
        (600.0 + 3 * 1200.0) / 4
    )  # the run limit is what was assumed


def test_runs_still_going_keep_the_learned_runtime_from_running_short() -> None:
    rt = Runtimes(3600.0, prior_jobs=0)
    long_one = limited(job("long", queue="q"), user="u")
    rt.started(long_one, 0.0)
    rt.observe(limited(job("short", queue="q"), user="u"), 60.0)
    assert rt.expected(long_one, now_s=3000.0).runtime_s == pytest.approx(3000.0)
    assert rt.expected(long_one).runtime_s == pytest.approx(60.0)  # no clock: the average
    rt.stopped(long_one, 0.0)
    assert rt.expected(long_one, now_s=3000.0).runtime_s == pytest.approx(60.0)


def test_remaining_runtime_follows_the_spread_of_learned_runtimes() -> None:
    alike, spread = Runtimes(3600.0, prior_jobs=0), Runtimes(3600.0, prior_jobs=0)
    for i in range(20):
        alike.observe(limited(job(f"a{i}", queue="q"), user="u"), 1000.0)
        spread.observe(limited(job(f"s{i}", queue="q"), user="u"), 100.0 if i % 2 else 3000.0)
    j = limited(job("x", queue="q"), user="u")
    assert alike.remaining(j, 400.0).runtime_s == pytest.approx(600.0)
    mean = spread.expected(j).runtime_s
    # Widely spread runtimes: a job that has run a while is not nearly done.
    assert spread.remaining(j, 0.9 * mean).runtime_s > 0.5 * mean
    assert "past its" in alike.remaining(j, 5000.0).basis


# -- wait estimates -------------------------------------------------------------------------


def test_estimate_uses_the_running_jobs_declared_end_not_the_default_runtime() -> None:
    """A job estimated at the default runtime said "next cycle" for hours while the running
    job's declared end was known."""
    s = Scheduler([node("n0", gpu=1)], queue_config({"a": 1}, default_runtime_s=3600.0))
    s.submit(job("long", gpu=whole(1), queue="a", duration=11_000.0), 0)
    s.cycle(0)
    s.submit(job("next", gpu=whole(1), queue="a", submit=10.0), 10)
    got = s.estimate_details(3700.0)[JobId("next")]
    assert got.start_s == pytest.approx(11_000.0)
    assert "long" in got.basis and "declared duration" in got.basis
    assert s.expected_end_s(JobId("long")) == pytest.approx(11_000.0)


def test_an_overdue_job_is_not_expected_to_end_now() -> None:
    s = Scheduler([node("n0", gpu=1)], queue_config({"a": 1}, default_runtime_s=1000.0))
    s.submit(job("run", gpu=whole(1), queue="a"), 0)
    s.cycle(0)
    s.submit(job("next", gpu=whole(1), queue="a", submit=1.0), 1)
    first = s.estimates(5000.0)[JobId("next")][1]
    later = s.estimates(6000.0)[JobId("next")][1]
    assert first is not None and first > 5000.0
    assert later is not None and later > 6000.0


def test_estimate_walks_the_cycles_order_and_counts_backfill() -> None:
    s = Scheduler([node("n0", gpu=2)], queue_config({"a": 2}, default_runtime_s=100.0))
    s.submit(job("run", gpu=whole(1), queue="a", duration=500.0), 0)
    s.cycle(0)
    s.submit(job("big", gpu=whole(2), queue="a", submit=1.0, duration=100.0), 1)
    s.submit(job("small", gpu=whole(1), queue="a", submit=2.0, duration=50.0), 2)
    est = s.estimate_details(3.0)
    assert est[JobId("big")].position == 0 and est[JobId("small")].position == 1
    assert est[JobId("small")].start_s == pytest.approx(3.0)  # fits beside "run" now
    assert est[JobId("big")].start_s == pytest.approx(500.0)


# -- charges and the fair order --------------------------------------------------------------


def test_a_slice_is_charged_its_compute_or_its_memory_share_whichever_is_larger() -> None:
    assert slice_charge_milli(100, 60_000, 81_920) == 733
    assert slice_charge_milli(500, 10_000, 81_920) == 500
    assert slice_charge_milli(100, 90_000, 81_920) == 1000


def test_memory_bound_slices_count_against_gpu_quota() -> None:
    """Two slices with a tenth of the compute and three quarters of a card's memory each
    block one and a half cards: a queue with one GPU of quota holds one of them."""
    s = Scheduler([node("n0", gpu=2, gpu_mem=81_920)], queue_config({"a": 1}, cohort=None))
    for i in range(2):
        s.submit(job(f"s{i}", gpu=share(100, 60_000), queue="a"), 0)
    r = s.cycle(0)
    assert [b.job for b in r.binds] == ["s0"]
    assert "queue a at quota" in r.parks[0].status.message


def test_a_gang_reserves_only_when_its_queue_is_first_in_the_fair_order() -> None:
    s = Scheduler(
        [node(f"n{i}", gpu=8) for i in range(2)],
        queue_config({"a": 8, "b": 8}, default_runtime_s=1000.0),
    )
    for i in range(12):
        s.submit(job(f"a{i}", gpu=whole(1), queue="a"), 0)
    for i in range(4):
        s.submit(job(f"b{i}", gpu=whole(1), queue="b"), 0)
    s.cycle(0)  # a borrows: 12 of 16 GPUs, b holds 4
    s.submit(job("a-gang", gpu=whole(8), queue="a", submit=1.0), 1)
    s.submit(job("b-more", gpu=whole(1), queue="b", submit=1.0), 1)
    r = s.cycle(1)
    assert not r.holds, "a is above its share: its gang may not hold nodes"
    assert s.reservation() is None


def test_expected_arrivals_come_in_time_order_across_queues() -> None:
    """The forecast takes expected arrivals in as its clock passes them: a queue's next jobs
    must not wait until every arrival of the queues named before it has come."""
    from gpupool.core.arrivals import Arrivals

    arr = Arrivals(window_s=1800.0)
    for i in range(10):
        for q, offset in (("a", 0.0), ("b", 30.0)):
            arr.record(q, job(f"{q}{i}", queue=q, submit=offset + 180.0 * i), offset + 180.0 * i)
    got = arr.expected(1800.0, 5400.0)
    times = [j.submit_time_s for j in got]
    assert times == sorted(times)
    assert {str(j.queue) for j in got[:2]} == {"a", "b"}


def test_jobs_that_do_not_fit_in_one_queue_do_not_hide_the_others_from_the_forecast() -> None:
    """a is first in the fair order with 30 jobs of 4 GPUs, none of which fits beside b's
    running job; b's next job fits now, and the cycle starts it now. The forecast stopped
    its step after 24 misses in a row, all a's, and put b's job after a's first gang."""
    s = Scheduler([node("n0", gpu=4)], queue_config({"a": 2, "b": 2}))
    s.submit(job("b-run", gpu=whole(1), queue="b", duration=1000.0), 0.0)
    s.cycle(0.0)
    for i in range(30):
        s.submit(job(f"a{i}", gpu=whole(4), queue="a", submit=1.0, duration=500.0), 1.0)
    s.submit(job("b-next", gpu=whole(1), queue="b", submit=2.0, duration=500.0), 2.0)
    est = s.estimates(3.0)
    assert est[JobId("a0")][0] < est[JobId("b-next")][0]  # a's jobs come first in the order
    assert est[JobId("b-next")][1] == pytest.approx(3.0)
    assert [b.job for b in s.cycle(3.0).binds] == ["b-next"]  # as the cycle does
