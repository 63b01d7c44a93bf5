"""``gpupool bench admission``: admissions per second with many queues and cohorts.

The shape of Kueue's large-scale test: ``queues`` ClusterQueues in ``cohorts`` cohorts, and
``workloads`` jobs spread over the queues unevenly (a Zipf-like law, so some queues borrow
from their cohort and others lend). Each queue's nominal quota is an equal part of the
cluster; the cluster (8-GPU nodes) is sized so that every workload fits once admitted, with
10 % headroom. Jobs are a mix of 1-GPU pods and slices of one card. All are submitted, then
cycles run until one admits nothing; each admission here is a quota check plus a real
placement on the cluster (Kueue's test checks quota only).
"""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass

import numpy as np

from gpupool.core import GpuRequest, Job, JobId, NodeName, PodSet, QueueName
from gpupool.core.model import Gpu, Node
from gpupool.core.quota import (
    ClusterQueue,
    FlavorQuotas,
    QueueConfig,
    Quota,
    Resource,
    ResourceFlavor,
)
from gpupool.core.scheduler import Scheduler


@dataclass(frozen=True, slots=True)
class AdmissionResult:
    queues: int
    cohorts: int
    workloads: int
    admitted: int
    cycles: int
    nodes: int
    wall_s: float
    peak_rss_mib: float

    def as_json(self) -> dict[str, object]:
        return {
            "queues": self.queues,
            "cohorts": self.cohorts,
            "workloads": self.workloads,
            "admitted": self.admitted,
            "cycles": self.cycles,
            "nodes": self.nodes,
            "admissions_per_s": round(self.admitted / self.wall_s, 1) if self.wall_s else 0.0,
            "wall_s": round(self.wall_s, 3),
            "peak_rss_mib": round(self.peak_rss_mib, 1),
        }


def run(queues: int, cohorts: int, workloads: int, seed: int = 1) -> AdmissionResult:
    rng = np.random.default_rng(seed)
    slice_milli = rng.choice((250, 500), size=workloads)
    whole = rng.random(workloads) < 0.5
    total_milli = int(np.where(whole, 1000, slice_milli).sum())
    nodes = max(1, int(np.ceil(total_milli * 1.1 / 8000)))
    cluster = [
        Node(
            NodeName(f"node-{i:05d}"),
            128_000,
            1_048_576,
            tuple(Gpu(g, "A100-80GB", 81920) for g in range(8)),
        )
        for i in range(nodes)
    ]
    per_queue = nodes * 8000 // queues
    config = QueueConfig(
        flavors=(ResourceFlavor("a100"),),
        cluster_queues=tuple(
            ClusterQueue(
                f"q{i:04d}",
                (FlavorQuotas("a100", {Resource.GPU_MILLI: Quota(per_queue)}),),
                cohort=f"c{i % cohorts:03d}",
            )
            for i in range(queues)
        ),
    )
    sched = Scheduler(cluster, config)
    weights = 1.0 / np.arange(1, queues + 1) ** 0.5
    owner = rng.choice(queues, size=workloads, p=weights / weights.sum())
    for i in range(workloads):
        gpu = GpuRequest(count=1) if whole[i] else GpuRequest(gpu_milli=int(slice_milli[i]))
        sched.submit(
            Job(
                JobId(f"w{i}"),
                (PodSet("p", 1, 1000, 1024, gpu),),
                queue=QueueName(f"q{int(owner[i]):04d}"),
                submit_time_s=0.0,
            ),
            0.0,
        )
    admitted = cycles = 0
    start = time.perf_counter()
    while True:
        result = sched.cycle(float(cycles))
        cycles += 1
        admitted += len(result.binds)
        if not result.binds and not result.evicts:
            break
    wall = time.perf_counter() - start
    return AdmissionResult(
        queues,
        cohorts,
        workloads,
        admitted,
        cycles,
        nodes,
        wall,
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    )
