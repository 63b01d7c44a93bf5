"""The openb experiment of the FGD paper (ATC'23), driven through the gpupool core.

One experiment is one (trace, policy, seed), as the paper's simulator runs it:

1. The target workload M (typical pods) comes from the trace as given, before anything else.
2. Pods are sorted by name and shuffled with the seed.
3. The list is tuned to ``tune`` times the cluster's GPU capacity: below it, copies of pods
   drawn uniformly (with replacement, from the name-sorted trace) are appended until the next
   draw would overshoot, where "overshoot" compares the running total plus the draw's milli
   *per GPU* (the reference's quirk) while the total grows by its full demand; above it,
   random pods are removed until the total is at most the target.
4. Score ties go to a seed-fixed random order of the nodes (the reference prefixes node names
   with a random permutation and breaks ties by the smallest name).
5. Pods arrive one at a time, nothing departs; each is placed through the core
   (``place_task`` on the snapshot, then ``ClusterState.assume``) or fails at once.
6. After every pod: arrived GPU milli (failed pods included), used GPU milli, and the
   cluster's fragment F(M), updated incrementally (only the changed node's term moves).
7. Rows are binned by ``round(arrived / capacity * 100)`` into 0..130; a bin's value is the
   mean over its rows, an empty bin takes the rows within +-1.

One generator, seeded by ``seed``, draws the shuffle, the tuning and the node order, in that
order. It is numpy's, not Go's, so a seed here does not reproduce the same seed of the
reference run; results agree in distribution (means over seeds), not per seed.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from gpupool.core.cluster import ClusterState
from gpupool.core.model import WHOLE_GPU_MILLI, Node, NodeName
from gpupool.core.placement.place import place_task
from gpupool.core.placement.plugins.frag import PodShape, TypicalPods, node_frag, typical_pods
from gpupool.core.placement.registry import openb_profile
from gpupool.sim.traces.openb import TracePod, to_job

BINS = 131
"""Arrived-load bins 0..130 % of the cluster's GPU capacity."""

POLICIES: tuple[str, ...] = (
    "random",
    "dotprod",
    "gpupacking",
    "gpuclustering",
    "bestfit",
    "fgd",
    "gpupool",
)
PUBLISHED_DEFAULT = {
    "fgd": 4.77,
    "bestfit": 7.14,
    "gpupacking": 8.22,
    "gpuclustering": 8.35,
    "dotprod": 9.38,
    "random": 13.70,
}
"""Unallocated GPU % at 100 % arrived load on openb_pod_list_default, mean of seeds 42-51,
as published with the FGD paper."""


@dataclass(frozen=True)
class ExperimentResult:
    trace: str
    policy: str
    seed: int
    nodes: int
    gpus: int
    unallocated_pct: np.ndarray
    frag_pct: np.ndarray
    wall_s: float
    decisions: int
    decision_us: np.ndarray
    placed: int
    failed: int


def pod_shape(pod: TracePod) -> PodShape:
    """The frag measure's view of a trace pod (memory is not part of it)."""
    if pod.num_gpu == 0:
        return PodShape(pod.cpu_milli)
    return PodShape(pod.cpu_milli, pod.gpu_milli, pod.num_gpu, pod.gpu_spec)


def trace_typical_pods(pods: Sequence[TracePod]) -> TypicalPods:
    """The target workload M of a trace: its pods' shapes, top 95 % by popularity, with each
    group's mean memory request (which FGD ignores and gpupool reads)."""
    return typical_pods((pod_shape(p) for p in pods), memory_mib=(p.memory_mib for p in pods))


def arrival_order(
    pods: Sequence[TracePod], rng: np.random.Generator, target_milli: float
) -> list[TracePod]:
    """Pods sorted by name, shuffled, then tuned to ``target_milli`` of GPU demand."""
    by_name = sorted(pods, key=lambda p: p.name)
    order = [by_name[i] for i in rng.permutation(len(by_name))]
    total = sum(p.total_gpu_milli for p in order)
    if total < target_milli and by_name:
        i = 0
        while True:
            src = by_name[int(rng.integers(len(by_name)))]
            if total + src.gpu_milli > target_milli:  # the reference checks milli per GPU
                break
            total += src.total_gpu_milli
            order.append(
                TracePod(
                    name=f"{src.name}-tuned-{i}",
                    cpu_milli=src.cpu_milli,
                    memory_mib=src.memory_mib,
                    num_gpu=src.num_gpu,
                    gpu_milli=src.gpu_milli,
                    gpu_spec=src.gpu_spec,
                    qos=src.qos,
                    pod_phase=src.pod_phase,
                )
            )
            i += 1
    while total > target_milli and order:
        gone = order.pop(int(rng.integers(len(order))))
        total -= gone.total_gpu_milli
    return order


def tie_order(nodes: Sequence[Node], rng: np.random.Generator) -> list[NodeName]:
    """Nodes sorted by name, then ranked by a random permutation: the first wins ties."""
    names = sorted(n.name for n in nodes)
    prefix = rng.permutation(len(names))
    return [names[i] for i in np.argsort(prefix, kind="stable").tolist()]


def bin_by_arrival(
    arrived_milli: npt.NDArray[np.int64],
    values: npt.NDArray[np.float64],
    gpus: int,
    decimals: int | None = None,
) -> npt.NDArray[np.float64]:
    """Mean of ``values`` per arrived-load bin 0..130 (% of ``gpus`` whole GPUs).

    A row's bin is ``round(arrived / gpus / 10)`` (half to even); an empty bin takes the
    rows within +-1; a bin with neither is NaN. ``decimals`` rounds the bin means.
    """
    ratio = np.round(arrived_milli / gpus / 10)
    out = np.full(BINS, np.nan)
    if not ratio.size:
        return out
    idx = ratio.astype(np.int64)
    inside = (idx >= 0) & (idx < BINS)
    sums = np.bincount(idx[inside], weights=values[inside], minlength=BINS)[:BINS]
    counts = np.bincount(idx[inside], minlength=BINS)[:BINS]
    for b in range(BINS):
        if counts[b]:
            out[b] = sums[b] / counts[b]
            continue
        near = (ratio >= b - 1) & (ratio <= b + 1)
        if near.any():
            out[b] = float(values[near].mean())
    return np.round(out, decimals) if decimals is not None else out


def run_experiment(
    nodes: Sequence[Node],
    pods: Sequence[TracePod],
    policy: str,
    seed: int,
    tune: float = 1.3,
    trace: str = "",
) -> ExperimentResult:
    """Run one (trace, policy, seed) experiment; see the module docstring for the steps."""
    started = time.perf_counter()
    tp = trace_typical_pods(pods)
    rng = np.random.default_rng(seed)
    gpus = sum(n.gpu_count for n in nodes)
    capacity = gpus * WHOLE_GPU_MILLI
    order = arrival_order(pods, rng, tune * capacity)
    state = ClusterState(nodes)
    state.set_tie_order(tie_order(nodes, rng))
    profile = openb_profile(policy, typical_pods=tp, seed=seed)
    table = state.table

    rows = table.live()
    node_f = np.zeros(table.cap_rows, np.int64)
    frag_cache: dict[Hashable, Any] = {}
    node_f[rows] = node_frag(tp, table, rows, frag_cache)
    frag_total = int(node_f.sum())

    n = len(order)
    arrived = np.zeros(n, np.int64)
    used = np.zeros(n, np.int64)
    frag = np.zeros(n, np.int64)
    decision_us = np.zeros(n, np.float64)
    arrived_milli = used_milli = placed = 0
    clock = time.perf_counter
    for i, pod in enumerate(order):
        task = next(to_job(pod).tasks())
        arrived_milli += pod.total_gpu_milli
        t0 = clock()
        snap = state.snapshot()
        p, _status = place_task(task, snap, profile)
        decision_us[i] = (clock() - t0) * 1e6
        if p is not None:
            state.assume(p)
            placed += 1
            used_milli += p.gpu_milli
            r = table.row(p.node)
            one = np.asarray([r], np.int64)
            f = int(node_frag(tp, table, one, frag_cache)[0])
            frag_total += f - int(node_f[r])
            node_f[r] = f
        arrived[i] = arrived_milli
        used[i] = used_milli
        frag[i] = frag_total

    alloc = np.round(used / gpus / 10, 2)
    unallocated = 100.0 - bin_by_arrival(arrived, alloc, gpus, decimals=2)
    frag_pct = bin_by_arrival(arrived, 100.0 * tp.frag_milli(frag) / capacity, gpus)
    return ExperimentResult(
        trace=trace,
        policy=policy,
        seed=seed,
        nodes=len(nodes),
        gpus=gpus,
        unallocated_pct=unallocated,
        frag_pct=frag_pct,
        wall_s=time.perf_counter() - started,
        decisions=n,
        decision_us=decision_us,
        placed=placed,
        failed=n - placed,
    )


def trace_name(path: str | Path) -> str:
    """The trace's name as results carry it: the pods file's stem."""
    return Path(path).stem
