"""``gpupool bench placement``: decisions per second on a large synthetic cluster.

The cluster: ``nodes`` nodes of ``gpus_per_node`` cards (half A100-80GB, half H100-80GB,
128 cores, 1 TiB). The stream: pods arrive one at a time with a mix of shapes like a shared
training-and-inference cluster's (CPU-only 13 %, slices 40 %, one card 34 %, 2/4/8 cards
5/4/4 %), and each leaves after a random number of later arrivals (exponential, with the mean
that keeps the cluster near 85 % of its GPUs allocated). Before the measured pods, an untimed
warm-up of the same mix fills the cluster to that level, so every measured decision is made
in the steady state, where placement is hardest. A pod that does not fit fails (no queue), as
in the openb method.

A decision is one ``place_task`` (filter, score and card choice over every node); its time
excludes the bookkeeping after it (assume, departures), which the throughput includes. Pods
are offered ``cycle_pods`` to a scheduling cycle (one by default); with ``measured``, the time
to bring the cycle's view of measured use up to date is counted in its first decision.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpupool.core import (
    ClusterState,
    Gpu,
    GpuRequest,
    Job,
    JobId,
    Node,
    NodeName,
    PodSet,
    Profile,
    TaskId,
    default_profile,
    place_task,
)
from gpupool.core.usage import CardSample, LoadModel, LoadSettings
from gpupool.kernel import EventQueue

SHAPES: tuple[tuple[float, int, int], ...] = (
    # (probability, whole GPUs, slice milli); slice milli 0 with 0 GPUs is CPU-only
    (0.13, 0, 0),
    (0.40, 0, -1),
    (0.34, 1, 0),
    (0.05, 2, 0),
    (0.04, 4, 0),
    (0.04, 8, 0),
)
TARGET_ALLOCATED = 0.85
SLICE_MILLI = (100, 200, 250, 300, 500, 700)


@dataclass(frozen=True, slots=True)
class BenchResult:
    nodes: int
    gpus_per_node: int
    pods: int
    placed: int
    policy: str
    wall_s: float
    placements_per_s: float
    decisions_per_s: float
    decision_us_p50: float
    decision_us_p99: float
    peak_rss_mib: float
    warmup_pods: int
    gpu_allocated_pct: float
    cycle_pods: int = 1
    view_us_p50: float = 0.0
    """Median time to bring a cycle's view of measured use up to date (0 by requests)."""
    decision_us_p50_by_kind: dict[str, float] | None = None
    """Median decision per request kind (no GPU, a slice, whole GPUs)."""

    def as_json(self) -> dict[str, object]:
        return {
            "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node,
            "pods": self.pods,
            "placed": self.placed,
            "policy": self.policy,
            "wall_s": round(self.wall_s, 3),
            "placements_per_s": round(self.placements_per_s, 1),
            "decisions_per_s": round(self.decisions_per_s, 1),
            "decision_us": {
                "p50": round(self.decision_us_p50, 1),
                "p99": round(self.decision_us_p99, 1),
            },
            "peak_rss_mib": round(self.peak_rss_mib, 1),
            "warmup_pods": self.warmup_pods,
            "gpu_allocated_pct_at_end": round(self.gpu_allocated_pct, 1),
            "cycle_pods": self.cycle_pods,
            "view_us_p50": round(self.view_us_p50, 1),
            "decision_us_p50_by_kind": {
                k: round(v, 1) for k, v in (self.decision_us_p50_by_kind or {}).items()
            },
        }


def cluster(nodes: int, gpus_per_node: int) -> list[Node]:
    out = []
    for i in range(nodes):
        model = "A100-80GB" if i % 2 == 0 else "H100-80GB"
        cards = tuple(
            Gpu(
                g,
                model,
                81920,
                uuid=f"GPU-{i}-{g}",
                nvlink_peers=tuple(j for j in range(gpus_per_node) if j != g),
            )
            for g in range(gpus_per_node)
        )
        out.append(
            Node(
                NodeName(f"node-{i:05d}"),
                128_000,
                1_048_576,
                cards,
                labels={"gpupool.io/model": model},
            )
        )
    return out


def pod_stream(pods: int, gpus_per_node: int, seed: int, prefix: str = "pod") -> list[Job]:
    rng = np.random.default_rng(seed)
    probs = np.array([s[0] for s in SHAPES])
    kinds = rng.choice(len(SHAPES), size=pods, p=probs / probs.sum())
    jobs = []
    for i, k in enumerate(kinds.tolist()):
        _, count, milli = SHAPES[k]
        count = min(count, gpus_per_node)
        if milli < 0:
            gpu = GpuRequest(
                gpu_milli=int(rng.choice(SLICE_MILLI)),
                memory_mib=int(rng.choice((4096, 8192, 16384, 20480))),
            )
            cpu, mem = 2000, 16_384
        elif count:
            gpu = GpuRequest(count=count)
            cpu, mem = 12_000 * count, 98_304 * count
        else:
            gpu = GpuRequest()
            cpu, mem = int(rng.choice((1000, 4000, 8000))), 8192
        jobs.append(Job(JobId(f"{prefix}-{i}"), (PodSet("p", 1, cpu, mem, gpu),)))
    return jobs


def samples(state: ClusterState, rng: np.random.Generator, t: float) -> list[CardSample]:
    """One scrape of every card: busy at 10-100 % of what is requested of it, memory used at
    30-100 % of what is requested (the ``--measured`` run's synthetic DCGM readings)."""
    tb = state.table
    live = tb.live()
    milli = tb.used_milli[live]
    mib = tb.used_mib[live]
    util = np.minimum(100.0, milli / 10.0 * rng.uniform(0.1, 1.0, milli.shape))
    used = (mib * rng.uniform(0.3, 1.0, mib.shape)).astype(np.int64)
    out = []
    for k, i in enumerate(live.tolist()):
        name = tb.nodes[i].name
        for g in range(int(tb.gpu_count[i])):
            out.append(
                CardSample(
                    name,
                    g,
                    t,
                    float(util[k, g]),
                    int(used[k, g]),
                    int(tb.gpu_mem_cap[i, g] - used[k, g]),
                )
            )
    return out


def run(
    nodes: int,
    gpus_per_node: int,
    pods: int,
    policy: str = "binpack",
    seed: int = 1,
    profile: Profile | None = None,
    progress: Callable[[int], None] | None = None,
    measured: bool = False,
    scrape_every: int = 500,
    cycle_pods: int = 1,
) -> BenchResult:
    """``measured``: a load model takes a scrape of every card each ``scrape_every`` pods (a
    pod arrives every 30 ms of model time, so 500 is a 15 s scrape interval at 33 pods/s), and
    each cycle first brings its view of it up to date; the view's time is counted in the
    cycle's first decision.

    ``cycle_pods``: pods offered per scheduling cycle (one snapshot and one view, each pod
    assumed in the snapshot so the next sees it, departures and the load model's estimates at
    the cycle's edges, as ``core/cycle.py`` runs them). 1, the default, is one pod per cycle:
    the most views a stream of pods can cost."""
    prof = profile or default_profile(scores={policy: 1.0})
    state = ClusterState(cluster(nodes, gpus_per_node))
    rng = np.random.default_rng(seed + 1)
    mean_milli = sum(
        p * (c * 1000 if c else (np.mean(SLICE_MILLI) if m < 0 else 0)) for p, c, m in SHAPES
    )
    lifetime = TARGET_ALLOCATED * nodes * gpus_per_node * 1000 / mean_milli
    leaving: EventQueue[TaskId] = EventQueue()  # tasks by the step they leave at
    target = TARGET_ALLOCATED * nodes * gpus_per_node * 1000
    warm = 0
    for job in pod_stream(4 * int(lifetime) + 1000, gpus_per_node, seed + 2, "warm"):
        if state.table.milli_total.sum() - state.table.milli_free.sum() >= target:
            break
        p, _ = place_task(next(job.tasks()), state.snapshot(), prof)
        if p is not None:
            state.assume(p)
            leaving.schedule(int(rng.exponential(lifetime)), p.task)
        warm += 1
    jobs = pod_stream(pods, gpus_per_node, seed)
    decision_ns = np.zeros(pods, np.int64)
    view_ns: list[int] = []
    kinds = np.array([_kind(next(job.tasks()).request) for job in jobs])
    placed = 0
    perf = time.perf_counter_ns
    model = LoadModel(LoadSettings(stale_after_s=60.0)) if measured else None
    scrape_rng = np.random.default_rng(seed + 3)
    start = perf()
    for first in range(0, pods, cycle_pods):
        # one cycle: departures, a scrape when due, one snapshot and one view, then its pods
        now_s = first * 0.03
        for _, task_id in leaving.pop_until(first):
            gone = state.forget(task_id)
            if model is not None:
                model.released(gone, now_s)
        if model is not None and any(i % scrape_every == 0 for i in _span(first, cycle_pods, pods)):
            model.add(samples(state, scrape_rng, now_s), now_s=now_s)
        snap = state.snapshot()
        t0 = perf()
        if model is not None:
            snap.load = model.view(snap.table, now_s)
            view_ns.append(perf() - t0)
        bound = []
        for i in _span(first, cycle_pods, pods):
            task = next(jobs[i].tasks())
            if i > first:
                t0 = perf()
            p, _ = place_task(task, snap, prof)
            decision_ns[i] = perf() - t0
            if p is not None:
                snap.assume(p)  # the rest of the cycle sees it
                state.assume(p)
                bound.append(p)
                placed += 1
                leaving.schedule(i + 1 + int(rng.exponential(lifetime)), p.task)
            if progress is not None and i % 1000 == 999:
                progress(1000)
        if model is not None:  # what the cycle placed counts by its request until it shows
            for p in bound:
                model.placed(p, now_s)
    totals = state.totals()
    wall = (perf() - start) / 1e9
    us = decision_ns / 1000.0
    return BenchResult(
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        pods=pods,
        placed=placed,
        policy=prof.name if profile else policy,
        wall_s=wall,
        placements_per_s=placed / wall,
        decisions_per_s=pods / wall,
        decision_us_p50=float(np.percentile(us, 50)),
        decision_us_p99=float(np.percentile(us, 99)),
        peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        warmup_pods=warm,
        gpu_allocated_pct=100.0 * totals["gpu_milli_used"] / max(totals["gpu_milli_total"], 1),
        cycle_pods=cycle_pods,
        view_us_p50=float(np.percentile(view_ns, 50)) / 1000.0 if view_ns else 0.0,
        decision_us_p50_by_kind={
            k: float(np.percentile(us[kinds == k], 50))
            for k in ("none", "slice", "whole")
            if np.any(kinds == k)
        },
    )


def _span(first: int, count: int, end: int) -> range:
    return range(first, min(first + count, end))


def _kind(req: GpuRequest) -> str:
    return "whole" if req.count else "slice" if req.gpu_milli or req.memory_mib else "none"
