"""core/usage_workload: a workload's measured memory per slice, and the load model counting a
slice placed since the last sample at it (not at its request) until the slice shows, only
where the estimate exceeds what the pod's own series already measured of it."""

from __future__ import annotations

import pytest

from gpupool.core import ClusterState, NodeName, place_task
from gpupool.core.model import GpuShare, Placement, Task
from gpupool.core.placement.registry import measured_profile
from gpupool.core.usage import CardSample, LoadModel, LoadSettings, TaskSample
from gpupool.core.usage_workload import MIN_READINGS, WorkloadUse, workload_of
from tests.builders import job, node, share

N1 = NodeName("n1")
CARD_MIB = 40960


def task_of(name: str, milli: int = 300, mib: int = 16_000) -> Task:
    return next(job(name, gpu=share(milli, mib)).tasks())


def on(task: Task, gpu: int = 0) -> Placement:
    req = task.request
    return Placement(
        task.id, task.job, N1, 1000, 1024, (GpuShare(gpu, req.gpu_milli, req.memory_mib),)
    )


def test_a_pods_own_memory_series_teaches_its_workload() -> None:
    w = WorkloadUse(quantile=0.9, settle_s=30.0)
    nb, other = task_of("nb-1"), task_of("ft-1", 500, 8000)
    for t in (nb, other):
        w.expected_of(t)
        w.placed(on(t), 0.0)
    for i in range(MIN_READINGS - 1):
        w.read_task(TaskSample(N1, 0, nb.id, 30.0 + 15 * i, 10.0, 4000.0))
    assert w.expected_mib(workload_of(nb), 16_000) == 16_000.0  # too few readings
    w.read_task(TaskSample(N1, 0, nb.id, 30.0 + 15 * MIN_READINGS, 10.0, 4000.0))
    # 4000 of 16000 MiB asked: a new slice of the workload asking 16000 is counted at 4000
    w.expected_of(task_of("nb-2"))
    [(_, mib)] = w.placed(on(task_of("nb-2"), 1), 100.0)
    assert mib == pytest.approx(4000.0)
    # the other workload, with no memory reading of its own, is counted at its request
    assert w.expected_mib(workload_of(other), 8000) == 8000.0


def test_memory_learned_from_a_card_held_alone_is_never_above_the_request() -> None:
    w = WorkloadUse(quantile=0.9, settle_s=30.0)
    nb = task_of("nb-1")
    w.expected_of(nb)
    w.placed(on(nb), 0.0)
    for i in range(MIN_READINGS):
        # the card also holds memory no request accounts for: more than the slice asks
        w.read(N1, 0, 30.0 + 15 * i, 10.0, 30_000.0)
    assert w.expected_mib(workload_of(nb), 16_000) == 16_000.0
    assert w.expected_mib(workload_of(nb), 0) == 0.0
    # below the request the learned memory is taken: 40 readings of 12000 held alone, so
    # the p90 of the 43 is 0.75 of the request
    for i in range(40):
        w.read(N1, 0, 100.0 + 15 * i, 10.0, 12_000.0)
    assert w.expected_mib(workload_of(nb), 16_000) == pytest.approx(12_000.0)


def learned_model() -> tuple[ClusterState, LoadModel]:
    """Card 0 holds 20000 MiB no request accounts for; a notebook slice of workload ``nb``
    asking 16000 MiB was measured holding 4000 (its own series, on card 1, where work
    outside the requests holds 31000 more)."""
    s = ClusterState([node("n1", gpu=2)])
    m = LoadModel(LoadSettings(settle_s=30.0, stale_after_s=600))
    first = task_of("nb-1")
    m.workloads.expected_of(first)
    p = on(first, 1)
    s.assume(p)
    m.placed(p, 0.0)
    times = [30.0 + 15 * i for i in range(MIN_READINGS)]
    m.add_tasks([TaskSample(N1, 1, first.id, t, 10.0, 4000.0) for t in times])
    m.add(
        [CardSample(N1, 0, t, 5.0, 20_000, CARD_MIB - 20_000) for t in times]
        + [CardSample(N1, 1, t, 3.0, 35_000, CARD_MIB - 35_000) for t in times],
        now_s=times[-1],
    )
    return s, m


def test_a_slice_placed_since_the_last_sample_counts_at_its_workloads_memory() -> None:
    s, m = learned_model()
    row = s.table.row(N1)
    second = task_of("nb-2")
    m.workloads.expected_of(second)
    p = on(second, 0)
    s.assume(p)
    m.placed(p, 61.0)
    # measured 20960 MiB free, less the new slice's 4000 learned (by its request: 4960)
    assert m.view(s.table, 62.0).free_mib[row, 0] == CARD_MIB - 20_000 - 4000
    # a 10000 MiB slice fits card 0 as measured: by the first slice's request it would not
    snap = s.snapshot()
    snap.load = m.view(snap.table, 62.0)
    placed, _ = place_task(task_of("big-1", 300, 10_000), snap, measured_profile(hot_pct=95))
    assert placed is not None and placed.shares[0].index == 0


def test_the_estimate_counts_only_what_exceeds_the_pods_own_reading() -> None:
    s, m = learned_model()
    row = s.table.row(N1)
    second = task_of("nb-2")
    m.workloads.expected_of(second)
    p = on(second, 0)
    s.assume(p)
    m.placed(p, 61.0)
    # 10 s later (before it settled) its own series reads 2500 MiB, and so does the card
    m.add_tasks([TaskSample(N1, 0, second.id, 71.0, 1.0, 2500.0)])
    m.add([CardSample(N1, 0, 71.0, 5.0, 22_500, CARD_MIB - 22_500)], now_s=71.0)
    # 2500 of its 4000 are in the sample: 1500 more counted, not 4000 on top of the 2500
    assert m.view(s.table, 72.0).free_mib[row, 0] == CARD_MIB - 22_500 - 1500
    # a reading newer than the card's sample is not in it: the whole estimate counts
    m.add_tasks([TaskSample(N1, 0, second.id, 80.0, 1.0, 3900.0)])
    assert m.view(s.table, 81.0).free_mib[row, 0] == CARD_MIB - 22_500 - 4000
    # once settled, the sample alone says what the card holds
    m.add([CardSample(N1, 0, 95.0, 5.0, 23_900, CARD_MIB - 23_900)], now_s=95.0)
    assert m.view(s.table, 96.0).free_mib[row, 0] == CARD_MIB - 23_900
