"""Invariants of the flavor walk with preemption (``core/fungibility.py``) over random
fungibility settings, quotas and streams of jobs with alternatives on H100 and Ascend cards:
no card over its compute or memory, no queue over its nominal quota plus borrowing limit, the
quota books equal to what runs, each job bound in one of its own forms on cards of that form,
and no within-queue victim of equal or higher priority."""

from __future__ import annotations

import contextlib
import dataclasses
from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupool.core import InvalidJobError, Job
from gpupool.core.alternatives import chosen
from gpupool.core.decisions import CycleResult
from gpupool.core.model import Alternative
from gpupool.core.quota import (
    ClusterQueue,
    FlavorFungibility,
    FlavorQuotas,
    Fungibility,
    Preference,
    QueueConfig,
    QueueSettings,
    Quota,
    Resource,
    ResourceFlavor,
)
from gpupool.core.scheduler import Scheduler
from tests.builders import job, whole
from tests.unit.test_hetero_quota import gpu_node, npu_node

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FLAVORS = ("h100", "ascend")


@st.composite
def configs(draw: st.DrawFn) -> QueueConfig:
    f = FlavorFungibility(
        draw(st.sampled_from(Fungibility)),
        draw(st.sampled_from(Fungibility)),
        draw(st.sampled_from(Preference)),
    )
    order = draw(st.permutations(FLAVORS))
    queues = tuple(
        ClusterQueue(
            f"q{i}",
            tuple(
                FlavorQuotas(
                    fl,
                    {
                        Resource.GPU: Quota(
                            draw(st.integers(0, 8)), draw(st.one_of(st.none(), st.integers(0, 8)))
                        )
                    },
                )
                for fl in order
            ),
            cohort="c",
            fungibility=f,
        )
        for i in range(draw(st.integers(2, 3)))
    )
    return QueueConfig(
        (
            ResourceFlavor("h100", {"flavor": "h100"}),
            ResourceFlavor("ascend", {"flavor": "ascend"}),
        ),
        queues,
        settings=QueueSettings(
            min_runtime_s=0.0, preemption_cooldown_s=5.0, max_preemptions_per_job=3
        ),
    )


@st.composite
def streams(draw: st.DrawFn, queues: int) -> list[tuple[float, Job]]:
    out = []
    for i in range(draw(st.integers(1, 25))):
        own = draw(st.integers(1, 4))
        j = job(
            f"j{i}",
            gpu=whole(own, models=["H100"]),
            queue=f"q{draw(st.integers(0, queues - 1))}",
            priority=draw(st.integers(0, 3)),
        )
        if draw(st.booleans()):
            j = dataclasses.replace(
                j,
                alternatives=(
                    Alternative("ascend", whole(draw(st.integers(1, 8)), models=["910B"])),
                ),
            )
        out.append((float(draw(st.integers(0, 12))), j))
    return sorted(out, key=lambda x: x[0])


def check(s: Scheduler, result: CycleResult, jobs: dict[str, Job]) -> None:
    milli: dict[tuple[str, int], int] = defaultdict(int)
    for p in s._state.placements():
        for sh in p.shares:
            milli[(str(p.node), sh.index)] += sh.gpu_milli
    assert all(v <= 1000 for v in milli.values()), milli
    for q, cq in s.tree.queues.items():
        usage = s.tree.usage(q)
        for fq in cq.flavors:
            quota = fq.resources[Resource.GPU]
            if quota.borrowing_limit is not None:
                used = usage.get((fq.flavor, Resource.GPU), 0)
                assert used <= quota.nominal + quota.borrowing_limit, (q, fq.flavor, used)
    books: dict[tuple[str, Resource], int] = defaultdict(int)
    for r in s.running():
        for k, v in r.demand.items():
            books[k] += v
    for key, v in books.items():
        assert v == sum(s.tree.usage(q).get(key, 0) for q in s.tree.queues), key
    for b in result.binds:
        form = chosen(jobs[b.job], b.alternative)  # KeyError: not one of its forms
        cards = sum(len(p.shares) for p in b.placements)
        assert cards == form.pod_sets[0].gpu.count, (b.job, b.alternative, cards)
        models = {
            s._state.table.nodes[s._state.table.row(p.node)].gpus[sh.index].model
            for p in b.placements
            for sh in p.shares
        }
        assert models <= form.pod_sets[0].gpu.models, (b.job, models)
    for e in result.evicts:
        if e.reason == "within-queue":
            victim, preemptor = jobs[e.job], jobs[e.preemptor]
            assert victim.priority < preemptor.priority, e


@given(data=st.data())
@SETTINGS
def test_the_flavor_walk_keeps_cards_quota_and_forms_whole(data: st.DataObject) -> None:
    config = data.draw(configs())
    stream = data.draw(streams(len(config.cluster_queues)))
    finish = data.draw(st.lists(st.integers(0, 100), max_size=5))
    s = Scheduler([gpu_node("g", count=4), npu_node("n", count=8)], config)
    jobs = {str(j.id): j for _, j in stream}
    by_time: dict[float, list[Job]] = defaultdict(list)
    for t, j in stream:
        by_time[t].append(j)
    for step in range(20):
        now = float(step)
        for j in by_time.get(now, []):
            with contextlib.suppress(InvalidJobError):
                s.submit(j, now)
        check(s, s.cycle(now), jobs)
        running = sorted(r.job.id for r in s.running())
        if finish and running and step % 3 == 2:
            s.finished(running[finish[step % len(finish)] % len(running)], now)
