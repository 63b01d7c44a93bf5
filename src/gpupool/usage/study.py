"""The measured-use study behind ``gpupool bench measured-use``: one workload placed twice, by
requests alone and by measured use, on the same cluster and arrival stream.

The workload (a shared cluster where requests overstate use for part of it):

* notebooks and inference replicas ask for slices and use 10-40 % of the compute they ask
  (and 30-90 % of the memory);
* fine-tuning jobs ask for half a card (a slice without a core limit) and keep the card
  90-100 % busy;
* training jobs ask for 1, 2 or 4 whole cards and keep each 90-100 % busy;
* some cards hold framebuffer that no request accounts for (work placed outside the
  scheduler, leaked CUDA contexts): 20-60 % of their memory.

Time advances in steps of the scrape interval. At each step: jobs that ended leave, arrivals
queue, the measured run's load model takes one sample per card (the cards' actual use, with a
little noise, as DCGM would report it) and one per running pod and card it holds (its part
of the card's busy time and memory, as HAMi's monitor reports it per pod), the queue is
offered to placement in arrival order,
and the step's card time is integrated:

* ``hot_card_gpu_s``: card-seconds with summed actual compute demand above 100 % of a card;
* ``memory_oversubscriptions``: placements after which a card's actual memory (its holders'
  and the outside work's) exceeded its capacity;
* ``allocation``: requested compute over the cluster's, time-averaged, percent;
* ``utilisation``: compute delivered (demand capped at each card) over the cluster's, percent.
"""

from __future__ import annotations

import random
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from gpupool.core import ClusterState, Gpu, GpuRequest, Job, JobId, Node, NodeName, PodSet
from gpupool.core.affinity import PodMeta
from gpupool.core.model import WHOLE_GPU_MILLI, Placement
from gpupool.core.placement.framework import Profile
from gpupool.core.placement.place import place_task
from gpupool.core.placement.registry import default_profile, measured_profile
from gpupool.core.usage import CardSample, LoadModel, LoadSettings
from gpupool.kernel import EventQueue
from gpupool.usage.profile import UseProfile, card_use, task_samples

CARD_MIB = 81920
GPUS_PER_NODE = 8


@dataclass(frozen=True, slots=True)
class StudyJob:
    job: Job
    kind: str
    arrive_s: float
    duration_s: float
    use: UseProfile


def cluster(nodes: int) -> list[Node]:
    return [
        Node(
            NodeName(f"node-{i:03d}"),
            128_000,
            1_048_576,
            tuple(
                Gpu(
                    g,
                    "A100-80GB",
                    CARD_MIB,
                    uuid=f"GPU-{i:03d}-{g}",
                    nvlink_peers=tuple(j for j in range(GPUS_PER_NODE) if j != g),
                )
                for g in range(GPUS_PER_NODE)
            ),
        )
        for i in range(nodes)
    ]


KINDS: tuple[tuple[str, float], ...] = (
    ("notebook", 0.36),
    ("inference", 0.36),
    ("finetune", 0.16),
    ("training", 0.12),
)


def workload(nodes: int, hours: float, seed: int, load: float = 0.9) -> list[StudyJob]:
    """Poisson arrivals of the four kinds, sized so requests offer ``load`` of the cluster."""
    rng = random.Random(seed)
    mean_milli_s = {
        "notebook": 330 * 2400,
        "inference": 375 * 3600,
        "finetune": 500 * 3600,
        "training": 2.33 * WHOLE_GPU_MILLI * 5400,
    }
    per_job = sum(p * mean_milli_s[k] for k, p in KINDS)
    rate = load * nodes * GPUS_PER_NODE * WHOLE_GPU_MILLI / per_job
    out: list[StudyJob] = []
    t = 0.0
    horizon = hours * 3600.0
    i = 0
    while True:
        t += rng.expovariate(rate)
        if t >= horizon:
            return out
        kind = rng.choices([k for k, _ in KINDS], [p for _, p in KINDS])[0]
        if kind == "notebook":
            gpu = GpuRequest(
                gpu_milli=rng.choice((200, 300, 500)), memory_mib=rng.choice((8192, 12288, 16384))
            )
            use = UseProfile(rng.uniform(10, 40), rng.uniform(30, 90))
            dur = rng.uniform(0.5, 1.0) * 4800
        elif kind == "inference":
            gpu = GpuRequest(
                gpu_milli=rng.choice((250, 500)), memory_mib=rng.choice((10240, 20480))
            )
            use = UseProfile(rng.uniform(10, 40), rng.uniform(30, 90))
            dur = rng.uniform(0.5, 1.5) * 3600
        elif kind == "finetune":
            gpu = GpuRequest(gpu_milli=500, memory_mib=rng.choice((20480, 30720)))
            use = UseProfile(rng.uniform(180, 200), rng.uniform(80, 100))
            dur = rng.uniform(0.5, 1.5) * 3600
        else:
            gpu = GpuRequest(count=rng.choice((1, 1, 2, 4)))
            use = UseProfile(rng.uniform(90, 100), rng.uniform(60, 90))
            dur = rng.uniform(0.5, 1.5) * 5400
        cpu = 4000 * max(1, gpu.count)
        job = Job(
            JobId(f"{kind}-{i}"),
            (PodSet("main", 1, cpu, 16_384, gpu, pod=PodMeta("study", {"app": kind})),),
        )
        out.append(StudyJob(job, kind, t, dur, use))
        i += 1


def outside_memory(
    nodes: int, seed: int, share: float = 0.1
) -> dict[tuple[NodeName, int], tuple[float, float]]:
    """(demand, MiB) held outside the requests on ``share`` of the cards."""
    rng = random.Random(seed + 7)
    out = {}
    for i in range(nodes):
        for g in range(GPUS_PER_NODE):
            if rng.random() < share:
                out[(NodeName(f"node-{i:03d}"), g)] = (
                    rng.uniform(0, 100),
                    rng.uniform(0.2, 0.6) * CARD_MIB,
                )
    return out


@dataclass(slots=True)
class Outcome:
    hot_card_gpu_s: float = 0.0
    memory_oversubscriptions: int = 0
    allocation_sum: float = 0.0
    utilisation_sum: float = 0.0
    steps: int = 0
    placed: int = 0
    waited_s: float = 0.0
    wall_s: float = 0.0
    by_kind_hot_s: dict[str, float] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "hot_card_gpu_s": round(self.hot_card_gpu_s, 1),
            "memory_oversubscriptions": self.memory_oversubscriptions,
            "allocation": round(self.allocation_sum / max(self.steps, 1), 2),
            "utilisation": round(self.utilisation_sum / max(self.steps, 1), 2),
            "placed": self.placed,
            "mean_wait_s": round(self.waited_s / max(self.placed, 1), 1),
            "wall_s": round(self.wall_s, 2),
        }


def run_one(
    jobs: list[StudyJob],
    nodes: int,
    seed: int,
    profile: Profile,
    model: LoadModel | None,
    step_s: float,
    hours: float,
    outside: dict[tuple[NodeName, int], tuple[float, float]],
) -> Outcome:
    started = time.perf_counter()
    state = ClusterState(cluster(nodes))
    total_milli = nodes * GPUS_PER_NODE * WHOLE_GPU_MILLI
    rng = random.Random(seed + 11)
    arrivals = deque(sorted(jobs, key=lambda j: j.arrive_s))
    queue: list[StudyJob] = []
    running: dict[JobId, tuple[Placement, StudyJob]] = {}
    ends: EventQueue[JobId] = EventQueue()
    out = Outcome()
    card_sizes = {(node.name, g): CARD_MIB for node in state.nodes() for g in range(GPUS_PER_NODE)}
    t = 0.0
    horizon = hours * 3600.0
    while t < horizon:
        for _, jid in ends.pop_until(t):
            p, _ = running.pop(jid)
            state.forget(p.task)
            if model is not None:
                model.released(p, t)
        while arrivals and arrivals[0].arrive_s <= t:
            queue.append(arrivals.popleft())
        profiles = {str(j): sj.use for j, (_, sj) in running.items()}
        use = card_use((p for p, _ in running.values()), profiles, outside)
        snap = state.snapshot()
        snap.now_s = t
        if model is not None:
            # each running pod's own use of its cards, as HAMi's monitor reports it per pod
            model.add_tasks(task_samples((p for p, _ in running.values()), profiles, card_sizes, t))
            model.add(
                [
                    CardSample(
                        n,
                        g,
                        t,
                        min(100.0, max(0.0, u.util_pct + rng.uniform(-3, 3))),
                        int(u.memory_mib),
                        int(CARD_MIB - u.memory_mib),
                    )
                    for (n, g), u in use.items()
                ]
                + [
                    CardSample(node.name, g, t, 0.0, 0, CARD_MIB)
                    for node in state.nodes()
                    for g in range(GPUS_PER_NODE)
                    if (node.name, g) not in use
                ],
                now_s=t,
            )
            snap.load = model.view(snap.table, t)
        else:
            snap.load = None
        waiting: list[StudyJob] = []
        for sj in queue:
            if len(waiting) >= 64:  # the rest of a long queue waits for the next step
                waiting.append(sj)
                continue
            placed, _ = place_task(next(sj.job.tasks()), snap, profile)
            if placed is None:
                waiting.append(sj)
                continue
            p = placed
            snap.assume(p)
            state.assume(p)
            if model is not None:
                model.placed(p, t)
            running[sj.job.id] = (p, sj)
            ends.schedule(t + sj.duration_s, sj.job.id)
            out.placed += 1
            out.waited_s += t - sj.arrive_s
            after = card_use((p,), {str(sj.job.id): sj.use})
            for key in after:
                now = use.get(key)
                held = (now.memory_mib if now else 0.0) + after[key].memory_mib
                if held > CARD_MIB:
                    out.memory_oversubscriptions += 1
        queue = waiting
        use = card_use(
            (p for p, _ in running.values()),
            {str(j): sj.use for j, (_, sj) in running.items()},
            outside,
        )
        hot = sum(1 for u in use.values() if u.demand_milli > WHOLE_GPU_MILLI)
        out.hot_card_gpu_s += hot * step_s
        delivered = sum(min(u.demand_milli, WHOLE_GPU_MILLI) for u in use.values())
        totals = state.totals()
        out.allocation_sum += 100.0 * totals["gpu_milli_used"] / total_milli
        out.utilisation_sum += 100.0 * delivered / total_milli
        out.steps += 1
        t += step_s
    out.wall_s = time.perf_counter() - started
    return out


def run(
    nodes: int = 16,
    hours: float = 6.0,
    seed: int = 1,
    step_s: float = 15.0,
    load: float = 0.9,
    hot_pct: float = 80.0,
) -> dict[str, Any]:
    """Both runs on one workload; the JSON ``gpupool bench measured-use`` prints."""
    jobs = workload(nodes, hours, seed, load)
    outside = outside_memory(nodes, seed)
    req = run_one(jobs, nodes, seed, default_profile(), None, step_s, hours, outside)
    meas = run_one(
        jobs,
        nodes,
        seed,
        measured_profile(hot_pct=hot_pct),
        LoadModel(LoadSettings(stale_after_s=4 * step_s, settle_s=step_s)),
        step_s,
        hours,
        outside,
    )
    r, m = req.as_json(), meas.as_json()
    return {
        "scenario": {
            "nodes": nodes,
            "gpus": nodes * GPUS_PER_NODE,
            "hours": hours,
            "seed": seed,
            "step_s": step_s,
            "offered_load": load,
            "jobs": len(jobs),
            "outside_memory_cards": len(outside),
        },
        "request_only": r,
        "measured": m,
        "targets": {
            "hot_card_time_halved": m["hot_card_gpu_s"] * 2 <= r["hot_card_gpu_s"],
            "no_memory_oversubscription": m["memory_oversubscriptions"] == 0,
            "allocation_no_lower": m["allocation"] >= r["allocation"],
        },
    }
