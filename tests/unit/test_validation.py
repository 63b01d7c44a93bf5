"""Requests that can never run are rejected with field, value and rule."""

from __future__ import annotations

import pytest

from gpupool.core import ClusterState, GpuRequest, InvalidJobError, Job, JobId, PodSet, Validator
from tests.builders import job, mig, mig_node, node, share, whole


@pytest.fixture
def state() -> ClusterState:
    return ClusterState(
        [
            node("a", gpu=8, model="A100", gpu_mem=40960, cpu=32_000, mem=256_000),
            node("t", gpu=4, model="T4", gpu_mem=16384, labels={"pool": "t4"}),
            mig_node("m"),
        ]
    )


@pytest.mark.parametrize(
    ("j", "field", "rule"),
    [
        (job("x", gpu=share(1200)), "pod_sets[0].gpu.gpu_milli", "a slice is 1..999"),
        (job("x", gpu=GpuRequest(gpu_milli=-5)), "pod_sets[0].gpu.gpu_milli", "zero or more"),
        (
            job("x", gpu=GpuRequest(count=2, gpu_milli=500)),
            "pod_sets[0].gpu.gpu_milli",
            "cannot be combined",
        ),
        (
            job("x", gpu=share(500, 50000)),
            "pod_sets[0].gpu.memory_mib",
            "more than any single GPU has (largest: 40Gi)",
        ),
        (job("x", gpu=whole(9)), "pod_sets[0].gpu.count", "more GPUs than any node has"),
        (job("x", gpu=whole(5, models=["T4"])), "pod_sets[0].gpu.count", "of T4"),
        (
            job("x", gpu=whole(1, models=["H100"])),
            "pod_sets[0].gpu.models",
            "no node has GPU model H100",
        ),
        (
            job("x", gpu=mig("3g.40gb")),
            "pod_sets[0].gpu.mig_profile",
            "no GPU offers this MIG profile",
        ),
        (job("x", cpu=-1), "pod_sets[0].cpu_milli", "must be 0.."),
        (job("x", cpu=100_000), "pod_sets[0].cpu_milli", "larger than any node"),
        (job("x", mem=10**8), "pod_sets[0].memory_mib", "larger than any node"),
        (job("x", tasks=0), "pod_sets[0].count", "1..100000"),
        (job("x", tasks=2, min_member=3), "min_member", "between 1 and the job's 2 tasks"),
        (
            job("x", selector={"pool": "h100"}),
            "pod_sets[0].node_selector",
            "no node has these labels",
        ),
        (
            job("x", gpu=whole(8), selector={"pool": "t4"}),
            "pod_sets[0].gpu",
            "no node offers this GPU request together",
        ),
        (Job(JobId("x"), ()), "pod_sets", "at least one pod set"),
        (Job(JobId("x"), (PodSet("a"), PodSet("a"))), "pod_sets[].name", "unique"),
    ],
)
def test_never_runnable_is_rejected(state: ClusterState, j: Job, field: str, rule: str) -> None:
    with pytest.raises(InvalidJobError) as info:
        Validator().check(j, state.table)
    assert info.value.field == field
    assert rule in info.value.rule
    assert str(info.value).startswith(f"job x: {field}=")


@pytest.mark.parametrize(
    "j",
    [
        job("ok", gpu=whole(8)),
        job("ok", gpu=share(999, 16384, models=["T4"])),
        job("ok", gpu=mig("1g.10gb")),
        job("ok", tasks=100, gpu=whole(4)),
        job("ok", cpu=32_000, mem=256_000, gpu=whole(8, models=["A100"])),
    ],
)
def test_runnable_passes_even_when_the_cluster_is_busy(state: ClusterState, j: Job) -> None:
    Validator().check(j, state.table)
