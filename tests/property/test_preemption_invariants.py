"""Invariants of preemption and queue order, over random quota trees, job streams and a
cluster that mixes whole cards, memory-bound slices and MIG instances."""

from __future__ import annotations

import contextlib
from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupool.core import GpuRequest, InvalidJobError, Job, JobId, Node, PodSet, QueueName
from gpupool.core.admission import request_demand
from gpupool.core.decisions import CycleResult
from gpupool.core.quota import (
    ClusterQueue,
    FlavorQuotas,
    PreemptionPolicy,
    QueueConfig,
    QueueingStrategy,
    QueueSettings,
    Quota,
    Reclaim,
    Resource,
)
from gpupool.core.quota import ResourceFlavor as Flavor
from gpupool.core.scheduler import Scheduler
from tests.builders import mig_node, node

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
G = ("gpu", Resource.GPU_MILLI)

SHAPES = (
    GpuRequest(count=1),
    GpuRequest(count=2),
    GpuRequest(gpu_milli=100, memory_mib=60_000),  # memory-bound: most of a card's memory
    GpuRequest(gpu_milli=300, memory_mib=10_000),
    GpuRequest(mig_profile="1g.10gb"),
)


@st.composite
def configs(draw: st.DrawFn, strict: bool = False) -> QueueConfig:
    n = draw(st.integers(2, 4))
    queues = []
    for i in range(n):
        nominal = draw(st.integers(0, 8)) * 1000
        borrow = draw(st.one_of(st.none(), st.integers(0, 8).map(lambda x: x * 1000)))
        queues.append(
            ClusterQueue(
                f"q{i}",
                (FlavorQuotas("gpu", {Resource.GPU_MILLI: Quota(nominal, borrow)}),),
                cohort="c",
                weight=draw(st.sampled_from((1.0, 2.0))),
                preemption=PreemptionPolicy(
                    reclaim_within_cohort=draw(
                        st.sampled_from((Reclaim.ANY, Reclaim.LOWER_PRIORITY))
                    ),
                    fair_share=draw(st.booleans()),
                ),
                queueing_strategy=QueueingStrategy.STRICT_FIFO
                if strict and i == 0
                else QueueingStrategy.BEST_EFFORT_FIFO,
            )
        )
    return QueueConfig(
        (Flavor("gpu"),),
        tuple(queues),
        settings=QueueSettings(
            min_runtime_s=draw(st.sampled_from((0.0, 2.0))),
            preemption_cooldown_s=10.0,
            max_preemptions_per_job=draw(st.integers(1, 3)),
        ),
    )


@st.composite
def streams(draw: st.DrawFn, queues: int, users: str = "uv") -> list[tuple[float, Job]]:
    out = []
    for i in range(draw(st.integers(1, 30))):
        gpu = draw(st.sampled_from(SHAPES))
        tasks = draw(st.integers(1, 3)) if gpu.count else 1
        t = float(draw(st.integers(0, 15)))
        out.append(
            (
                t,
                Job(
                    JobId(f"j{i}"),
                    (PodSet("w", tasks, 1000, 1024, gpu),),
                    queue=QueueName(f"q{draw(st.integers(0, queues - 1))}"),
                    priority=draw(st.integers(0, 3)),
                    submit_time_s=t,
                    user=draw(st.sampled_from(users)),
                ),
            )
        )
    return sorted(out, key=lambda x: x[0])


def cluster() -> list[Node]:
    return [
        node("n0", gpu=4, model="A100-80GB", gpu_mem=81920),
        node("n1", gpu=4, model="A100-80GB", gpu_mem=81920),
        mig_node("m0", cards=2),
    ]


def drive(
    config: QueueConfig, stream: list[tuple[float, Job]], finish: list[int], check: object
) -> Scheduler:
    """Runs the stream for 25 cycles, ending a running job every third one, and calls
    ``check(scheduler, result, before)`` after each cycle (``before``: the scheduler's
    pending order and quota usage taken just before the cycle)."""
    s = Scheduler(cluster(), config)
    by_time: dict[float, list[Job]] = defaultdict(list)
    for t, j in stream:
        by_time[t].append(j)
    for step in range(25):
        now = float(step)
        for j in by_time.get(now, []):
            with contextlib.suppress(InvalidJobError):  # no flavor could ever admit it
                s.submit(j, now)
        before = {
            "order": {q: [p.job.id for p in s._queues.ordered(q, now)] for q in s._queues.queues()},
            "nominated": set(s.nominated()),
            "priority": {p.job.id: p.job.priority for p in s._queues.all()},
        }
        result = s.cycle(now)
        check(s, result, before)  # type: ignore[operator]
        running = sorted(r.job.id for r in s.running())
        if finish and running and step % 3 == 2:
            s.finished(running[finish[step % len(finish)] % len(running)], now)
    return s


def no_victim_outranks_and_guaranteed_quota_stays(
    s: Scheduler, result: CycleResult, before: dict
) -> None:  # type: ignore[type-arg]
    for e in result.evicts:
        preemptor = s.pending_job(e.preemptor)
        assert preemptor is not None, "the preemptor waits for its room"
        victim = s.pending_job(e.job)
        assert victim is not None
        victim_priority = victim.job.priority
        if e.queue == preemptor.queue:
            # Within a queue, priority orders: never a victim of equal or higher priority.
            assert victim_priority < preemptor.job.priority, (e, victim_priority)
            continue
        policy = s.tree.queues[preemptor.queue].preemption
        if e.reason == "reclaim" and policy.reclaim_within_cohort is Reclaim.LOWER_PRIORITY:
            assert victim_priority < preemptor.job.priority, (e, victim_priority)
        # Across queues only borrowed capacity is taken: after the cycle (its admissions
        # and all its evictions counted) the victim's queue is still at or above nominal,
        # once what the queue gave up to its own preemptors in the same cycle is counted
        # back (a within-queue preemption is the owner's own choice, not quota taken).
        nominal = s.nominal(e.queue).get(G, 0)
        own = sum(
            request_demand(v.job, "gpu").get(G, 0)
            for x in result.evicts
            if x.queue == e.queue
            and x.reason == "within-queue"
            and (v := s.pending_job(x.job)) is not None
        )
        used = s.usage(e.queue).get(G, 0) + own
        assert used >= nominal, (
            f"{e.job} of {e.queue} evicted ({e.reason}) by {e.preemptor} of {preemptor.queue}: "
            f"{e.queue} now uses {used} (with {own} given to its own preemptors) < nominal "
            f"{nominal}"
        )


def no_card_overcommitted(s: Scheduler, result: CycleResult, before: dict) -> None:  # type: ignore[type-arg]
    milli: dict[tuple[str, int], int] = defaultdict(int)
    mib: dict[tuple[str, int], int] = defaultdict(int)
    migs: dict[tuple[str, int, str], int] = defaultdict(int)
    for p in s._state.placements():
        for sh in p.shares:
            if sh.mig_profile is not None:
                migs[(str(p.node), sh.index, sh.mig_profile)] += 1
            else:
                milli[(str(p.node), sh.index)] += sh.gpu_milli
                mib[(str(p.node), sh.index)] += sh.memory_mib
    cards = {(str(n.name), g.index): g for n in s.node_table().nodes for g in n.gpus}
    for key, used in milli.items():
        gpu = cards[key]
        assert not gpu.mig, f"{key}: a MIG card also holds a whole card or a slice"
        assert used <= 1000, f"{key}: {used} milli-GPU placed"
        assert mib[key] <= gpu.memory_mib, f"{key}: {mib[key]} MiB of {gpu.memory_mib} placed"
    for (n, i, prof), used in migs.items():
        have = sum(inst.count for inst in cards[(n, i)].mig if inst.profile == prof)
        assert used <= have, f"{n}/{i}: {used} {prof} instances placed, {have} exist"
    # Quota books follow what is placed, preemption or not.
    charged = sum(sum(v for k, v in r.demand.items() if k == G) for r in s.running())
    assert charged == sum(s.usage(q).get(G, 0) for q in s.tree.queues)


def strict_head_blocks(s: Scheduler, result: CycleResult, before: dict) -> None:  # type: ignore[type-arg]
    q = "q0"
    nominated = before["nominated"]
    order = [j for j in before["order"][q] if j not in nominated]
    bound = {b.job for b in result.binds if b.queue == q and b.job not in nominated}
    assert bound == set(order[: len(bound)]), (
        f"StrictFIFO queue {q} bound {sorted(bound)} out of order {order}"
    )


@given(data=st.data())
@SETTINGS
def test_no_victim_outranks_its_preemptor_nor_loses_guaranteed_quota(data: st.DataObject) -> None:
    config = data.draw(configs())
    stream = data.draw(streams(len(config.cluster_queues)))
    finish = data.draw(st.lists(st.integers(0, 100), max_size=5))
    drive(config, stream, finish, no_victim_outranks_and_guaranteed_quota_stays)


@given(data=st.data())
@SETTINGS
def test_no_overcommit_under_preemption_with_memory_bound_slices_and_mig(
    data: st.DataObject,
) -> None:
    config = data.draw(configs())
    stream = data.draw(streams(len(config.cluster_queues)))
    finish = data.draw(st.lists(st.integers(0, 100), max_size=5))
    drive(config, stream, finish, no_card_overcommitted)


@given(data=st.data())
@SETTINGS
def test_a_strict_fifo_head_blocks_its_queue(data: st.DataObject) -> None:
    config = data.draw(configs(strict=True))
    stream = data.draw(streams(len(config.cluster_queues), users="u"))
    finish = data.draw(st.lists(st.integers(0, 100), max_size=5))
    drive(config, stream, finish, strict_head_blocks)
