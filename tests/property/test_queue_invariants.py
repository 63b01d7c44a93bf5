"""Invariants of the queue-aware scheduler over random quota trees and job streams."""

from __future__ import annotations

import contextlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupool.core import GpuRequest, InvalidJobError, Job, JobId, PodSet, QueueName
from gpupool.core.quota import (
    ClusterQueue,
    FlavorQuotas,
    QueueConfig,
    QueueSettings,
    Quota,
    Resource,
)
from gpupool.core.quota import ResourceFlavor as Flavor
from gpupool.core.scheduler import Scheduler
from tests.builders import node

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
G = ("gpu", Resource.GPU_MILLI)


@st.composite
def configs(draw: st.DrawFn) -> QueueConfig:
    n = draw(st.integers(2, 4))
    queues = []
    for i in range(n):
        nominal = draw(st.integers(0, 12)) * 1000
        borrow = draw(st.one_of(st.none(), st.integers(0, 8).map(lambda x: x * 1000)))
        lend = draw(st.one_of(st.none(), st.integers(0, nominal // 1000).map(lambda x: x * 1000)))
        queues.append(
            ClusterQueue(
                f"q{i}",
                (FlavorQuotas("gpu", {Resource.GPU_MILLI: Quota(nominal, borrow, lend)}),),
                cohort=draw(st.sampled_from(("c1", "c1", "c2"))),
                weight=draw(st.sampled_from((1.0, 2.0))),
            )
        )
    return QueueConfig(
        (Flavor("gpu"),),
        tuple(queues),
        settings=QueueSettings(
            min_runtime_s=draw(st.sampled_from((0.0, 5.0))),
            preemption_cooldown_s=10.0,
            max_preemptions_per_job=draw(st.integers(0, 2)),
        ),
    )


@st.composite
def streams(draw: st.DrawFn, queues: int) -> list[tuple[float, Job]]:
    out = []
    for i in range(draw(st.integers(1, 30))):
        tasks = draw(st.integers(1, 3))
        gpu = draw(
            st.sampled_from(
                (
                    GpuRequest(count=1),
                    GpuRequest(count=2),
                    GpuRequest(count=4),
                    GpuRequest(gpu_milli=500),
                )
            )
        )
        t = float(draw(st.integers(0, 20)))
        out.append(
            (
                t,
                Job(
                    JobId(f"j{i}"),
                    (PodSet("w", tasks, 1000, 1024, gpu),),
                    queue=QueueName(f"q{draw(st.integers(0, queues - 1))}"),
                    priority=draw(st.integers(0, 3)),
                    submit_time_s=t,
                    user=draw(st.sampled_from("uv")),
                ),
            )
        )
    return sorted(out, key=lambda x: x[0])


def run(config: QueueConfig, stream: list[tuple[float, Job]], finish: list[int]) -> Scheduler:
    s = Scheduler([node(f"n{i}", gpu=8) for i in range(3)], config)
    by_time: dict[float, list[Job]] = {}
    for t, j in stream:
        by_time.setdefault(t, []).append(j)
    pairs: set[tuple[str, str]] = set()
    for step in range(30):
        now = float(step)
        for j in by_time.get(now, []):
            with contextlib.suppress(InvalidJobError):  # no flavor could ever admit it
                s.submit(j, now)
        result = s.cycle(now)
        for b in result.binds:
            r = s.running_job(b.job)
            assert r is not None
            job = r.job
            assert len(b.placements) >= job.gang_size, "a gang was placed in part"
        for e in result.evicts:
            assert (e.preemptor, e.job) not in pairs, "two jobs preempted each other"
            pairs.add((e.job, e.preemptor))
            assert s.pending_job(e.job) is not None, "a victim was lost instead of requeued"
            assert s.pending_job(e.job).preemptions <= config.settings.max_preemptions_per_job
        check_quota(s)
        running = sorted(r.job.id for r in s.running())
        if finish and running and step % 3 == 2:
            s.finished(running[finish[step % len(finish)] % len(running)], now)
    return s


def check_quota(s: Scheduler) -> None:
    for q in s.tree.queues.values():
        quota = q.flavors[0].resources[Resource.GPU_MILLI]
        used = s.usage(q.name).get(G, 0)
        if quota.borrowing_limit is not None:
            assert used <= quota.nominal + quota.borrowing_limit, f"{q.name} over its limit"
    # Cohort-wide: no tree uses more than its queues' nominal quotas together.
    for root in {s.tree.cohort_root(q) for q in s.tree.queues}:
        members = [q for q in s.tree.queues if s.tree.cohort_root(q) == root]
        used = sum(s.usage(q).get(G, 0) for q in members)
        nominal = sum(
            s.tree.queues[q].flavors[0].resources[Resource.GPU_MILLI].nominal for q in members
        )
        assert used <= nominal
    # And the accounting matches what is placed.
    placed = sum(p.gpu_milli for p in s._state.placements())
    assert placed == sum(s.usage(q).get(G, 0) for q in s.tree.queues)


@given(data=st.data())
@SETTINGS
def test_quota_gang_and_preemption_invariants(data: st.DataObject) -> None:
    config = data.draw(configs())
    stream = data.draw(streams(len(config.cluster_queues)))
    finish = data.draw(st.lists(st.integers(0, 100), max_size=5))
    run(config, stream, finish)


@given(data=st.data())
@SETTINGS
def test_same_inputs_same_decisions(data: st.DataObject) -> None:
    config = data.draw(configs())
    stream = data.draw(streams(len(config.cluster_queues)))
    a, b = run(config, stream, [1, 2]), run(config, stream, [1, 2])
    assert {r.job.id: r.placements for r in a.running()} == {
        r.job.id: r.placements for r in b.running()
    }
