"""Systematic biases of the wait estimates' forecast (``core/estimate.py``): where the
forecast's order of ends and starts differs from the cycle's in one direction for a queue."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpupool.core import JobId
from gpupool.core.estimate import spread_ends_by_queue
from gpupool.core.runtimes import MIN_SAMPLES, Runtimes
from gpupool.core.scheduler import Scheduler
from tests.builders import job, node, queue_config, whole


def test_running_jobs_ends_are_spread_queue_by_queue() -> None:
    """Queues a and b each run four one-GPU jobs at their nominal quota of 4 and have three
    more waiting; a's runs were learned to take 9,000-11,000 s, b's 9,500-11,500 s. Each queue
    takes back what ends in it, so b's next job starts at b's first end, expected near 9,500
    s (the first of four runs from b's runtimes). Spread over both queues at once, the four
    earliest ends all went to a's runs (shorter median), and b's first end was forecast at
    10,330 s: every estimate of b late, every one of a early."""
    s = Scheduler([node("n0", gpu=8)], queue_config({"a": 4, "b": 4}))
    learned = {"a": [9000.0, 9670.0, 10330.0, 11000.0], "b": [9500.0, 10170.0, 10830.0, 11500.0]}
    for q, runtimes in learned.items():
        for k, t in enumerate(runtimes):
            s._ctx.runtimes.observe(job(f"{q}-old{k}", queue=q), t)
        for k in range(4):
            s.submit(job(f"{q}-run{k}", gpu=whole(1), queue=q), 0.0)
    assert len(s.cycle(0.0).binds) == 8
    for q in learned:
        for k in range(3):
            s.submit(job(f"{q}-next{k}", gpu=whole(1), queue=q, submit=10.0 + k), 10.0 + k)
    est = s.estimates(20.0)
    assert est[JobId("a-next0")][1] == pytest.approx(9000.0)
    assert est[JobId("b-next0")][1] == pytest.approx(9500.0)


def test_spread_ends_by_queue_spreads_each_queues_runs_over_its_own_distribution() -> None:
    """Two queues with alike runs get alike ends, whatever the order they are given in."""
    uniform = [(float(x), 1 / 11) for x in range(0, 1001, 100)]
    out = spread_ends_by_queue([("a", uniform), ("b", uniform), ("a", uniform), ("b", uniform)])
    assert sorted(out[0::2]) == sorted(out[1::2])


def test_runtimes_are_learned_per_kind_of_job_in_a_queue() -> None:
    """A queue runs 2-GPU training jobs of about 3,000 s and 1-GPU jobs under a 2,700 s run
    limit of about 1,000 s. Each kind's runs are forecast by that kind's runtimes: from the
    queue's mixture, every training run was forecast to end early and every short one late.
    A kind not seen yet falls back on the queue's runtimes."""
    r = Runtimes(3600.0)
    train = job("train", gpu=whole(2), queue="a")
    short = replace(job("short", gpu=whole(1), queue="a"), run_limit_s=2700.0)
    for _ in range(MIN_SAMPLES):
        r.observe(train, 3000.0)
        r.observe(short, 1000.0)
    assert r.distribution(train, 0.0) == [(3000.0, 1.0)]
    assert r.distribution(short, 0.0) == [(1000.0, 1.0)]
    assert r.quantile(short, 0.9, 0.0) == 1000.0
    other = job("other", gpu=whole(4), queue="a")
    assert r.distribution(other, 0.0) == [(1000.0, 0.5), (3000.0, 0.5)]
    # A kind's runs still going count in its own distribution only.
    r.started(replace(train, id=JobId("t2")), 0.0)
    assert r.distribution(short, 5000.0) == [(1000.0, 1.0)]


def test_a_parked_job_is_not_forecast_to_preempt_before_an_event_wakes_it() -> None:
    """Queue b borrows a's two GPUs at t=0; a's job, asked at t=100, could take them back only
    from t=300 (b's runs are younger than the 300 s minimum runtime before), so the cycle
    parks it. A minimum runtime passing wakes no parked job: the cycle at t=400 does not
    offer it, and it waits for the next end (a quota or capacity change), b's first at 5,000
    s. The forecast offered every pending job at once and foresaw the reclaim at t=400:
    onoff-bursts' reclaiming team, estimated "now" while its jobs waited 10-30 minutes."""
    s = Scheduler([node("n0", gpu=4)], queue_config({"a": 2, "b": 2}, min_runtime_s=300.0))
    for k in range(4):
        s.submit(job(f"b{k}", gpu=whole(1), queue="b", duration=5000.0 + 100 * k), 0.0)
    assert len(s.cycle(0.0).binds) == 4
    s.submit(job("a0", gpu=whole(1), queue="a", submit=100.0), 100.0)
    first = s.cycle(100.0)
    assert not first.binds and not first.evicts  # no victim old enough: parked
    later = s.cycle(400.0)
    assert not later.binds and not later.evicts  # parked: not offered again
    assert s.estimates(400.0)[JobId("a0")][1] == pytest.approx(5000.0)


def test_a_parked_job_is_forecast_to_preempt_at_the_end_that_wakes_it() -> None:
    """As above, with a's job asking for two GPUs: b's first run ends at t=1,000 s and frees
    one; the cycle then wakes a's job, which takes back the other by preempting one of b's
    runs, and starts. Offered for preemption only at the estimate's own time, the forecast
    waited for b's second end (5,100 s)."""
    s = Scheduler([node("n0", gpu=4)], queue_config({"a": 2, "b": 2}, min_runtime_s=300.0))
    for k in range(4):
        s.submit(job(f"b{k}", gpu=whole(1), queue="b", duration=1000.0 + 4100 * min(k, 1)), 0.0)
    assert len(s.cycle(0.0).binds) == 4
    s.submit(job("a0", gpu=whole(2), queue="a", submit=100.0), 100.0)
    assert not s.cycle(100.0).evicts and not s.cycle(400.0).evicts  # parked
    assert s.estimates(400.0)[JobId("a0")][1] == pytest.approx(1000.0)
    s.finished(JobId("b0"), 1000.0)
    assert len(s.cycle(1000.0).evicts) == 1  # the cycle does preempt when the end wakes it
