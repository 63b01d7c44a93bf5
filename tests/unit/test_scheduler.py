"""The queue-aware cycle: fairness, priority inside quota, preemption, gangs, backfill."""

from __future__ import annotations

import dataclasses

import pytest

from gpupool.core import ConflictError, JobId, NotFoundError
from gpupool.core.model import Job, Placement
from gpupool.core.quota import Resource
from gpupool.core.scheduler import Scheduler
from tests.builders import job, node, queue_config, share, whole

G = ("gpu", Resource.GPU_MILLI)


def gpus_used(s: Scheduler, q: str) -> float:
    return s.usage(q).get(G, 0) / 1000


def sched(nodes: int = 2, **quotas: int) -> Scheduler:
    return Scheduler([node(f"n{i}", gpu=8) for i in range(nodes)], queue_config(quotas))


def test_many_admissions_per_cycle_in_fair_order() -> None:
    s = sched(a=8, b=8)
    for i in range(20):
        s.submit(job(f"a{i}", gpu=whole(1), queue="a"), 0)
    for i in range(20):
        s.submit(job(f"b{i}", gpu=whole(1), queue="b"), 0)
    r = s.cycle(0)
    assert len(r.binds) == 16
    assert gpus_used(s, "a") == 8 and gpus_used(s, "b") == 8


def test_top_priority_does_not_buy_capacity_beyond_quota() -> None:
    s = sched(a=8, b=8)
    for i in range(20):
        s.submit(job(f"a{i}", gpu=whole(1), queue="a", priority=1000), 0)
    for i in range(8):
        s.submit(job(f"b{i}", gpu=whole(1), queue="b", priority=0), 0)
    s.cycle(0)
    assert gpus_used(s, "a") == 8 and gpus_used(s, "b") == 8


def test_idle_quota_is_lent_then_reclaimed_only_from_borrowers() -> None:
    s = sched(a=8, b=8)
    for i in range(16):
        s.submit(job(f"a{i}", gpu=whole(1), queue="a"), 0)
    s.cycle(0)
    assert gpus_used(s, "a") == 16  # b is idle: a borrows all of it
    for i in range(4):
        s.submit(job(f"b{i}", gpu=whole(1), queue="b"), 10)
    r = s.cycle(10)
    assert len(r.evicts) == 4 and {e.reason for e in r.evicts} == {"reclaim"}
    assert gpus_used(s, "a") == 12
    r = s.cycle(11)
    assert sorted(b.job for b in r.binds) == ["b0", "b1", "b2", "b3"]
    assert gpus_used(s, "b") == 4
    assert len(s.pending()) == 4  # the victims are back in their queue, not lost


def test_within_queue_preemption_by_priority_and_minimal_victims() -> None:
    s = sched(nodes=1, a=8)
    for i in range(8):
        s.submit(job(f"low{i}", gpu=whole(1), queue="a", priority=0, submit=float(i)), 0)
    s.cycle(0)
    s.submit(job("high", gpu=whole(2), queue="a", priority=10), 5)
    r = s.cycle(5)
    assert len(r.evicts) == 2 and {e.reason for e in r.evicts} == {"within-queue"}
    assert all(e.preemptor == "high" for e in r.evicts)
    r = s.cycle(6)
    assert [b.job for b in r.binds] == ["high"]


def test_min_runtime_and_max_preemptions_guard_victims() -> None:
    s = Scheduler([node("n0", gpu=8)], queue_config({"a": 8}, min_runtime_s=100.0))
    for i in range(8):
        s.submit(job(f"low{i}", gpu=whole(1), queue="a"), 0)
    s.cycle(0)
    s.submit(job("high", gpu=whole(1), queue="a", priority=10), 50)
    r = s.cycle(50)
    assert not r.evicts and r.parks[0].job == "high"
    s2 = Scheduler([node("n0", gpu=8)], queue_config({"a": 8}, max_preemptions_per_job=0))
    for i in range(8):
        s2.submit(job(f"low{i}", gpu=whole(1), queue="a"), 0)
    s2.cycle(0)
    s2.submit(job("high", gpu=whole(1), queue="a", priority=10), 50)
    assert not s2.cycle(50).evicts


def test_gangs_start_whole_and_evict_whole() -> None:
    s = sched(nodes=2, a=24)
    s.submit(job("gang", tasks=3, gpu=whole(8), queue="a"), 0)
    r = s.cycle(0)
    assert not r.binds and "gang gang: 2/3 tasks fit" in r.parks[0].status.message
    assert s.totals()["gpu_milli_used"] == 0


def test_per_user_decayed_usage_orders_jobs_inside_a_queue() -> None:
    s = Scheduler([node("n0", gpu=1)], queue_config({"a": 1}, usage_half_life_s=3600.0))
    heavy = job("h0", gpu=whole(1), queue="a")
    s.submit(heavy.__class__(**{**_fields(heavy), "user": "heavy"}), 0)
    s.cycle(0)
    s.finished(JobId("h0"), 7200)
    for name, user, t in (("h1", "heavy", 7200.0), ("f1", "fresh", 7300.0)):
        j = job(name, gpu=whole(1), queue="a", submit=t)
        s.submit(j.__class__(**{**_fields(j), "user": user}), t)
    r = s.cycle(7400)
    assert [b.job for b in r.binds] == ["f1"], "the fresh user goes first despite arriving later"


def _fields(j: object) -> dict[str, object]:
    from dataclasses import fields

    return {f.name: getattr(j, f.name) for f in fields(j)}  # type: ignore[arg-type]


def test_backfill_uses_held_room_only_when_it_ends_in_time() -> None:
    s = Scheduler([node("n0", gpu=8)], queue_config({"a": 8}, default_runtime_s=1000.0))
    for i in range(4):
        s.submit(job(f"run{i}", gpu=whole(1), queue="a"), 0)
    s.cycle(0)  # 4 of 8 cards busy until t=1000 (declared default runtime)
    s.submit(job("big", gpu=whole(8), queue="a", submit=1.0), 1)
    r = s.cycle(1)
    assert r.holds and r.holds[0].start_s == pytest.approx(1000.0)
    short = job("short", gpu=whole(1), queue="a", submit=2.0)
    long = job("long", gpu=whole(1), queue="a", submit=2.0)
    s.submit(short.__class__(**{**_fields(short), "run_limit_s": 500.0}), 2)
    s.submit(long, 2)
    r = s.cycle(2)
    assert [b.job for b in r.binds] == ["short"]
    assert "waiting behind gang big" in next(p.status.message for p in r.parks if p.job == "long")


def test_other_queues_may_not_take_the_nodes_held_for_a_gang() -> None:
    # big stays within a's nominal quota (a large job that would borrow waits for its
    # queue's turn to borrow: tests/unit/test_borrowing_turns.py)
    s = Scheduler(
        [node("n0", gpu=8), node("n1", gpu=8)],
        queue_config({"a": 12, "b": 8}, default_runtime_s=1000.0),
    )
    s.submit(job("a-run", gpu=whole(4), queue="a"), 0)
    s.submit(job("b-run", gpu=whole(4), queue="b"), 0)
    s.cycle(0)  # binpack: both on n0
    s.submit(job("b-fill", gpu=whole(4), queue="b"), 0.5)
    s.cycle(0.5)  # n1 half used by b-fill
    s.submit(job("big", gpu=whole(8), queue="a"), 1)
    r = s.cycle(1)
    assert r.holds, "the gang waits for n0 or n1 and holds it"
    s.submit(job("b-more", gpu=whole(1), queue="b"), 2)
    r = s.cycle(2)
    res = s.reservation()
    assert res is not None and res.job == "big"
    held = {s.node_table().nodes[int(i)].name for i in res.rows}
    for b in r.binds:
        assert not {p.node for p in b.placements} & held


def test_wait_estimates_give_positions_and_times() -> None:
    s = Scheduler([node("n0", gpu=2)], queue_config({"a": 2}, default_runtime_s=100.0))
    for i in range(4):
        s.submit(job(f"j{i}", gpu=whole(1), queue="a", submit=float(i)), 0)
    s.cycle(0)
    est = s.estimates(10)
    assert est == {"j2": (0, 100.0), "j3": (1, 100.0)}


def test_unknown_queue_and_slices_count_compute() -> None:
    s = sched(nodes=1, a=1)
    with pytest.raises(NotFoundError, match="queue 'zz' does not exist"):
        s.submit(job("x", queue="zz"), 0)
    for i in range(4):
        s.submit(job(f"s{i}", gpu=share(250), queue="a"), 0)
    s.submit(job("s4", gpu=share(250), queue="a"), 0)
    r = s.cycle(0)
    assert len(r.binds) == 4 and gpus_used(s, "a") == 1.0
    assert "queue a at quota" in r.parks[0].status.message


def test_restore_takes_the_same_cards_and_quota_back() -> None:
    s = sched(a=8, b=8)
    for i in range(3):
        s.submit(job(f"a{i}", gpu=whole(2), queue="a"), 0)
    binds = s.cycle(0).binds
    fresh = sched(a=8, b=8)
    for b in binds:
        r = s.running_job(b.job)
        assert r is not None
        fresh.restore(r.job, b.placements, start_s=0.0, flavor=b.flavor)
    assert gpus_used(fresh, "a") == 6
    assert fresh.totals() == s.totals()
    # a card held twice is refused and nothing changes
    r0 = s.running_job(binds[0].job)
    assert r0 is not None
    clash = job("clash", gpu=whole(2), queue="b")
    moved = tuple(replace_job(p, clash) for p in r0.placements)
    before = fresh.totals()
    with pytest.raises(ConflictError):
        fresh.restore(clash, moved, start_s=0.0, flavor=binds[0].flavor)
    assert fresh.totals() == before and gpus_used(fresh, "b") == 0


def replace_job(p: Placement, j: Job) -> Placement:
    task = next(j.tasks()).id
    return dataclasses.replace(p, task=task, job=j.id)
