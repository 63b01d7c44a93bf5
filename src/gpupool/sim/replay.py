"""Time-based replay of an openb pod list: pods arrive, run, leave; jobs wait when full.

Where ``gpupool sim openb`` only lets pods arrive (the paper's method), this replay keeps the
trace's clock: a pod arrives at its ``creation_time`` and, once placed, runs for
``deletion_time - creation_time`` seconds, then leaves. A pod that does not fit waits in FIFO
order until a departure makes room, so its end moves later by its wait. Pods whose
``scheduled_time`` is empty (never scheduled in the real cluster) arrive like the others.

``time_scale`` multiplies the arrival offsets (``creation_time`` minus the first one) and
leaves durations alone: 0.1 brings arrivals ten times closer together, raising the load the
same pods put on the cluster; 1 replays the trace as recorded. Times in the outputs are
seconds from the first arrival.

Outputs (:func:`.replay_report.write_outputs`): ``summary.json``, ``report.md`` and
``utilisation.png`` (GPU allocation and pending jobs over simulated time, :mod:`.replay_plot`);
why jobs waited, in words, is :mod:`.replay_reasons`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from gpupool.core.errors import ConfigError, TraceError
from gpupool.core.model import Job, Node
from gpupool.core.placement.framework import Profile, Registry, ScorePlugin
from gpupool.core.placement.registry import (
    DEFAULT_FILTERS,
    NEEDS_TYPICAL_PODS,
    OPENB_CARDS,
    builtin_registry,
)
from gpupool.sim.engine import Engine, ProgressFn, SimResult, percentiles
from gpupool.sim.openb import trace_typical_pods
from gpupool.sim.traces.openb import POD_COLUMNS, POD_COLUMNS_SHORT, TracePod, to_job

DEFAULT_POLICY = "binpack"

# -- policies ------------------------------------------------------------------------------


def policy_names(registry: Registry | None = None) -> list[str]:
    """Score plugins of the registry: the names ``--policy`` accepts."""
    registry = registry or builtin_registry()
    names = []
    for name in registry.names():
        if name in NEEDS_TYPICAL_PODS:
            names.append(name)
            continue
        try:
            plugin = registry.create(name)
        except ConfigError:  # needs arguments this replay does not know how to give
            continue
        if isinstance(plugin, ScorePlugin):
            names.append(name)
    return names


def replay_profile(
    policy: str, pods: Sequence[TracePod], seed: int = 0, registry: Registry | None = None
) -> Profile:
    """Every default filter, ``policy`` as the only score, and the policy's own card choice
    where it has one (as ``gpupool sim openb`` pairs them). ``fgd`` and ``gpupool`` measure
    fragmentation against the trace's typical pods; ``random`` is seeded with ``seed``."""
    registry = registry or builtin_registry()
    known = policy_names(registry)
    if policy not in known:
        raise ConfigError(f"--policy: unknown policy {policy!r}; known: {', '.join(known)}")
    args: dict[str, dict[str, Any]] = {}
    if policy in NEEDS_TYPICAL_PODS:
        args[policy] = {"typical_pods": trace_typical_pods(pods)}
    elif policy == "random":
        args[policy] = {"seed": seed}
    return Profile.build(
        registry,
        filters=DEFAULT_FILTERS,
        scores={policy: 1.0},
        cards=OPENB_CARDS.get(policy, "best-fit-cards"),
        args=args,
        name=f"replay-{policy}",
    )


# -- the trace as jobs -----------------------------------------------------------------------


def trace_jobs(
    pods: Sequence[TracePod],
    *,
    source: str = "pods",
    limit: int | None = None,
    time_scale: float = 1.0,
) -> list[Job]:
    """One job per pod, arriving at its scaled creation offset, running for its recorded life.

    ``limit`` keeps the ``limit`` earliest arrivals (file order among equal times).
    """
    if not pods:
        raise TraceError(f"{source}: no pods to replay")
    if any(p.creation_time is None or p.deletion_time is None for p in pods):
        raise TraceError(
            f"{source}: the {len(POD_COLUMNS_SHORT)}-column layout "
            f"({','.join(POD_COLUMNS_SHORT)}) has no creation or deletion times; a time-based "
            f"replay needs the {len(POD_COLUMNS)}-column layout with creation_time and "
            "deletion_time ('gpupool sim openb' replays arrival-only experiments)"
        )
    if not (math.isfinite(time_scale) and time_scale > 0):
        raise ConfigError(f"--time-scale {time_scale!r}: must be a number above 0")
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit {limit}: must be at least 1")
    order = sorted(range(len(pods)), key=lambda i: (pods[i].creation_time, i))
    if limit is not None:
        order = order[:limit]
    t0 = pods[order[0]].creation_time or 0
    jobs = []
    for i in order:
        pod = pods[i]
        job = to_job(pod)
        offset = float((pod.creation_time or 0) - t0)
        jobs.append(replace(job, submit_time_s=offset * time_scale))
    return jobs


# -- running -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Replay:
    result: SimResult
    summary: dict[str, Any]


def replay(
    nodes: Sequence[Node],
    jobs: Sequence[Job],
    profile: Profile,
    *,
    progress: ProgressFn | None = None,
    keep_log: bool = False,
) -> SimResult:
    """Runs the jobs through the engine until every one has finished or can never start."""
    engine = Engine(nodes, profile, keep_log=keep_log, progress=progress)
    engine.submit_all(jobs)
    return engine.run()


def expected_end_s(jobs: Sequence[Job]) -> float:
    """When the last job would end if none waited: the scale of a progress bar."""
    return max((j.submit_time_s + (j.duration_s or 0.0) for j in jobs), default=0.0)


# -- figures -------------------------------------------------------------------------------


def summarise(
    result: SimResult,
    *,
    nodes: Sequence[Node],
    trace: str,
    policy: str,
    time_scale: float,
    limit: int | None,
    wall_s: float,
) -> dict[str, Any]:
    records = list(result.records.values())
    waits = result.waits_s()
    series = result.series
    gpu = series.gpu_fraction() * 100.0
    cpu_used = np.asarray(series.cpu_used_milli, np.float64)
    cpu_total = np.asarray(series.cpu_total_milli, np.float64)
    cpu = np.divide(cpu_used, cpu_total, out=np.zeros_like(cpu_used), where=cpu_total > 0) * 100
    span = result.end_s - result.start_s
    return {
        "trace": trace,
        "policy": policy,
        "time_scale": time_scale,
        "limit": limit,
        "nodes": len(nodes),
        "gpus": sum(n.gpu_count for n in nodes),
        "jobs": len(records),
        "completed": sum(1 for r in records if r.completed),
        "rejected": sum(1 for r in records if r.rejected),
        "never_started": sum(1 for r in records if r.start_s is None and not r.rejected),
        "waited": int(np.count_nonzero(waits > 0)),
        "wait_s": {
            **{k: round(v, 3) for k, v in percentiles(waits).items()},
            "mean": round(float(waits.mean()), 3) if waits.size else 0.0,
            "max": round(float(waits.max()), 3) if waits.size else 0.0,
        },
        "utilisation_pct": {
            "mean": round(series.time_weighted_mean(gpu), 3) if len(series) else 0.0,
            "peak": round(float(gpu.max()), 3) if len(series) else 0.0,
        },
        "cpu_pct": {
            "mean": round(series.time_weighted_mean(cpu), 3) if len(series) else 0.0,
            "peak": round(float(cpu.max()), 3) if len(series) else 0.0,
        },
        "pending_peak": max(series.pending, default=0),
        "gpu_hours": round(result.gpu_hours(), 3),
        "span_s": round(span, 3),
        "cycles": result.cycles,
        "offers": result.offers,
        "wall_s": round(wall_s, 3),
    }


# -- one call for the CLI ------------------------------------------------------------------


def run_replay(
    nodes_path: str | Path,
    pods_path: str | Path,
    *,
    policy: str = DEFAULT_POLICY,
    limit: int | None = None,
    time_scale: float = 1.0,
    seed: int = 0,
    progress: Callable[[float, float], None] | None = None,
    clock: Callable[[], float] | None = None,
) -> Replay:
    """Load, replay and summarise. ``progress(now_s, expected_end_s)`` is called as the
    simulated clock moves; ``clock`` measures wall time for the summary (none: 0)."""
    from gpupool.sim.traces.openb import load_nodes, load_pods

    started = clock() if clock else 0.0
    pods_path = Path(pods_path)
    nodes = load_nodes(nodes_path)
    pods = load_pods(pods_path)
    jobs = trace_jobs(pods, source=pods_path.name, limit=limit, time_scale=time_scale)
    profile = replay_profile(policy, pods, seed)
    end = expected_end_s(jobs)
    tick: ProgressFn | None = None
    if progress is not None:
        report = progress

        def tick(now: float) -> None:
            report(now, end)

    result = replay(nodes, jobs, profile, progress=tick)
    wall = (clock() - started) if clock else 0.0
    summary = summarise(
        result,
        nodes=nodes,
        trace=pods_path.name,
        policy=policy,
        time_scale=time_scale,
        limit=limit,
        wall_s=wall,
    )
    return Replay(result, summary)
