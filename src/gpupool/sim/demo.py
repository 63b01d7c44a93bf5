"""``gpupool demo``: a small cluster and a seeded stream of jobs, replayed in a few seconds.

The cluster is built here, in code: NVLink-connected A100 nodes for training, T4 nodes for
inference, one node whose two A100 cards are MIG-partitioned, and two CPU-only nodes. GPU
nodes carry the usual ``nvidia.com/gpu`` taint, so only jobs that ask for GPUs (and tolerate
it) land there. The jobs are the everyday mix of a shared cluster: notebooks taking a slice
of one card, inference pods on T4 slices, MIG dev pods, training gangs of 1 to 32 GPUs that
start whole or not at all, and CPU-only jobs. Everything runs through the same engine and
core as ``gpupool sim replay``; the clock is simulated, so a day of cluster time takes a
moment and one seed always gives the same story.
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gpupool.core.mig import share_milli
from gpupool.core.model import (
    WHOLE_GPU_MILLI,
    Gpu,
    GpuRequest,
    Job,
    JobId,
    MigInstance,
    Node,
    NodeName,
    PodSet,
    QueueName,
    Taint,
    Toleration,
)
from gpupool.core.placement.registry import default_profile
from gpupool.sim.engine import Engine, SimResult, percentiles
from gpupool.sim.replay_reasons import wait_reasons

GPU_TAINT = Taint("nvidia.com/gpu", "present")
GPU_TOLERATION = Toleration("nvidia.com/gpu", "Exists")
A100 = "A100-80GB"
T4 = "T4"
MIG_PROFILE = "1g.10gb"
GIB = 1024

KINDS = ("training", "notebook", "inference", "mig", "cpu")
KIND_LABEL = {
    "training": "training",
    "notebook": "notebook",
    "inference": "inference",
    "mig": "MIG pod",
    "cpu": "CPU-only",
}
KIND_COLOR = {
    "training": "dodger_blue1",
    "notebook": "green3",
    "inference": "magenta",
    "mig": "cyan",
    "cpu": "yellow",
}
PREFIX = {"training": "train", "notebook": "nb", "inference": "inf", "mig": "mig", "cpu": "cpu"}
DEFAULT_JOBS = 150
DEFAULT_SEED = 7


# -- the cluster -------------------------------------------------------------------------


def demo_cluster() -> list[Node]:
    """4 x 8 A100-80GB (NVLink mesh), 4 x 4 T4, 1 node with 2 MIG A100s, 2 CPU-only nodes."""
    nodes: list[Node] = []
    for i in range(4):
        cards = tuple(
            Gpu(
                g,
                A100,
                80 * GIB,
                uuid=f"GPU-a100-{i}-{g}",
                nvlink_peers=tuple(p for p in range(8) if p != g),
            )
            for g in range(8)
        )
        nodes.append(
            Node(
                NodeName(f"a100-{i}"),
                128_000,
                1024 * GIB,
                cards,
                labels={"gpupool.io/flavor": "a100"},
                taints=(GPU_TAINT,),
            )
        )
    for i in range(4):
        cards = tuple(Gpu(g, T4, 16 * GIB, uuid=f"GPU-t4-{i}-{g}") for g in range(4))
        nodes.append(
            Node(
                NodeName(f"t4-{i}"),
                48_000,
                192 * GIB,
                cards,
                labels={"gpupool.io/flavor": "t4"},
                taints=(GPU_TAINT,),
            )
        )
    mig = (MigInstance(MIG_PROFILE, 7, WHOLE_GPU_MILLI // 7, 10 * GIB),)
    nodes.append(
        Node(
            NodeName("mig-0"),
            64_000,
            512 * GIB,
            tuple(Gpu(g, A100, 80 * GIB, uuid=f"GPU-mig-{g}", mig=mig) for g in range(2)),
            labels={"gpupool.io/flavor": "a100-mig"},
            taints=(GPU_TAINT,),
        )
    )
    for i in range(2):
        nodes.append(
            Node(NodeName(f"cpu-{i}"), 64_000, 256 * GIB, labels={"gpupool.io/flavor": "cpu"})
        )
    return nodes


# -- the jobs ----------------------------------------------------------------------------


def demo_jobs(
    seed: int = DEFAULT_SEED, count: int = DEFAULT_JOBS, mean_gap_s: float = 150.0
) -> list[Job]:
    """A seeded stream: Poisson arrivals every ``mean_gap_s`` on average, a mix of kinds."""
    rng = random.Random(seed)
    jobs: list[Job] = []
    t = 0.0
    numbers: Counter[str] = Counter()
    weights = {"notebook": 30, "inference": 24, "training": 22, "cpu": 16, "mig": 8}
    for _ in range(count):
        t += rng.expovariate(1.0 / mean_gap_s)
        kind = rng.choices(list(weights), weights=list(weights.values()))[0]
        numbers[kind] += 1
        job_id = JobId(f"{PREFIX[kind]}-{numbers[kind]:03d}")
        jobs.append(_make(kind, job_id, round(t), rng))
    return jobs


def _minutes(rng: random.Random, lo: int, hi: int) -> float:
    return float(rng.randint(lo, hi) * 60)


def _make(kind: str, job_id: JobId, at: float, rng: random.Random) -> Job:
    gpu_tol = (GPU_TOLERATION,)
    if kind == "training":
        tasks, per_task = rng.choices(
            [(1, 1), (1, 2), (1, 4), (1, 8), (2, 4), (2, 8)], weights=[18, 22, 26, 18, 8, 8]
        )[0]
        pod = PodSet(
            "worker",
            count=tasks,
            cpu_milli=per_task * 10_000,
            memory_mib=per_task * 64 * GIB,
            gpu=GpuRequest(count=per_task, models=frozenset({A100})),
            tolerations=gpu_tol,
        )
        return Job(
            job_id,
            (pod,),
            QueueName("research"),
            submit_time_s=at,
            duration_s=_minutes(rng, 45, 240),
            user=rng.choice(["ana", "bo", "chen"]),
        )
    if kind == "notebook":
        milli, mem = rng.choice([(250, 10 * GIB), (250, 8 * GIB), (500, 20 * GIB), (330, 12 * GIB)])
        pod = PodSet(
            "notebook",
            cpu_milli=rng.choice([2000, 4000, 8000]),
            memory_mib=rng.choice([16, 32]) * GIB,
            gpu=GpuRequest(gpu_milli=milli, memory_mib=mem),
            tolerations=gpu_tol,
        )
        return Job(
            job_id,
            (pod,),
            QueueName("notebooks"),
            submit_time_s=at,
            duration_s=_minutes(rng, 20, 120),
            user=rng.choice(["dee", "eli", "fay"]),
        )
    if kind == "inference":
        milli, mem = rng.choice([(300, 6 * GIB), (500, 8 * GIB), (250, 4 * GIB)])
        pod = PodSet(
            "server",
            cpu_milli=4000,
            memory_mib=16 * GIB,
            gpu=GpuRequest(gpu_milli=milli, memory_mib=mem, models=frozenset({T4})),
            tolerations=gpu_tol,
        )
        return Job(
            job_id,
            (pod,),
            QueueName("serving"),
            submit_time_s=at,
            duration_s=_minutes(rng, 30, 180),
            user="svc",
        )
    if kind == "mig":
        pod = PodSet(
            "dev",
            cpu_milli=4000,
            memory_mib=32 * GIB,
            gpu=GpuRequest(mig_profile=MIG_PROFILE),
            tolerations=gpu_tol,
        )
        return Job(
            job_id,
            (pod,),
            QueueName("notebooks"),
            submit_time_s=at,
            duration_s=_minutes(rng, 15, 90),
            user=rng.choice(["dee", "eli"]),
        )
    pod = PodSet(
        "etl",
        cpu_milli=rng.choice([4000, 8000, 16000, 24000]),
        memory_mib=rng.choice([16, 32, 64]) * GIB,
    )
    return Job(
        job_id,
        (pod,),
        QueueName("data"),
        submit_time_s=at,
        duration_s=_minutes(rng, 10, 90),
        user="etl",
    )


def kind_of(job_id: str) -> str:
    prefix = job_id.split("-", 1)[0]
    return next((k for k, p in PREFIX.items() if p == prefix), "cpu")


def describe_request(job: Job) -> str:
    ps = job.pod_sets[0]
    g = ps.gpu
    if g.mig_profile:
        gpu = f"MIG {g.mig_profile}"
    elif g.count:
        gpu = f"{g.count}×{next(iter(g.models), 'GPU')}"
    elif g.gpu_milli or g.memory_mib:
        gpu = (
            f"{g.gpu_milli / 10:.0f}% of a {'|'.join(sorted(g.models)) or 'GPU'}, "
            f"{g.memory_mib // GIB} GiB"
        )
    else:
        gpu = "no GPU"
    tasks = f"{ps.count} × " if ps.count > 1 else ""
    return f"{tasks}{gpu}, {ps.cpu_milli // 1000} CPU"


# -- running -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CardHold:
    """One job's hold on a card at one of the demo's moments."""

    job: str
    milli: int
    mib: int
    mig_profile: str | None = None


@dataclass(frozen=True, slots=True)
class CardView:
    index: int
    model: str
    memory_mib: int
    mig_slots: int  # instances a MIG card offers (0: not partitioned)
    holders: tuple[CardHold, ...]

    @property
    def used_milli(self) -> int:
        """Held compute; a MIG instance counts for its declared share (``core.mig``)."""
        return sum(h.milli for h in self.holders)


@dataclass(frozen=True, slots=True)
class NodeMoment:
    """One node at one of the demo's moments: its cards, CPU and jobs."""

    name: str
    cards: tuple[CardView, ...]
    cpu_used_milli: int
    cpu_milli: int
    jobs: tuple[tuple[str, int], ...]  # (job, its milli-CPU here), by task id


@dataclass(frozen=True, slots=True)
class Moment:
    time_s: float
    gpu_used_milli: int
    gpu_total_milli: int
    running: int
    pending: tuple[tuple[str, str], ...]  # (job, its latest reason)
    nodes: tuple[NodeMoment, ...]
    label: str = ""


@dataclass(slots=True)
class DemoRun:
    seed: int
    nodes: list[Node]
    jobs: list[Job]
    result: SimResult
    moments: list[Moment] = field(default_factory=list)


def run_demo(seed: int = DEFAULT_SEED, count: int = DEFAULT_JOBS) -> DemoRun:
    """Replays the stream and keeps three views of the cards: a quarter into the arrivals,
    the moment the most jobs waited, and three quarters in."""
    nodes = demo_cluster()
    jobs = demo_jobs(seed, count)
    profile = default_profile()
    first = Engine(nodes, profile, keep_log=False)
    first.submit_all(jobs)
    series = first.run().series
    last = max((j.submit_time_s for j in jobs), default=0.0)
    times = [round(last / 4 / 60) * 60.0, round(3 * last / 4 / 60) * 60.0]
    busiest = -1.0
    if series.pending and max(series.pending) > 0:
        busiest = series.time_s[int(np.argmax(series.pending))]
        times = [t for t in times if abs(t - busiest) >= 1800] + [busiest]
    engine = Engine(nodes, profile)
    engine.submit_all(jobs)
    run = DemoRun(seed, nodes, jobs, engine.result())
    for at in sorted(set(times)):
        engine.run(until=at)
        label = "most jobs waiting" if at == busiest else ""
        run.moments.append(replace(_moment(engine), label=label))
    run.result = engine.run()
    return run


def _moment(engine: Engine) -> Moment:
    state = engine.state
    used, total = engine.gpu_allocated()
    views = []
    for node in state.nodes():
        placements = state.placements_on(node.name)
        by_card: dict[int, list[CardHold]] = {g.index: [] for g in node.gpus}
        cpu = 0
        jobs: dict[str, int] = {}
        for p in sorted(placements, key=lambda p: p.task):
            cpu += p.cpu_milli
            jobs[p.job] = jobs.get(p.job, 0) + p.cpu_milli
            for s in p.shares:
                by_card[s.index].append(
                    CardHold(p.job, share_milli(s, node.gpus[s.index]), s.memory_mib, s.mig_profile)
                )
        cards = tuple(
            CardView(
                g.index, g.model, g.memory_mib, sum(i.count for i in g.mig), tuple(by_card[g.index])
            )
            for g in node.gpus
        )
        views.append(NodeMoment(node.name, cards, cpu, node.cpu_milli, tuple(jobs.items())))
    pending = tuple((j.id, engine.records[j.id].last_reason) for j in engine.pending_jobs())
    return Moment(engine.now, used, total, engine.running, pending, tuple(views))


# -- figures -------------------------------------------------------------------------------


def summary(run: DemoRun) -> dict[str, Any]:
    r = run.result
    records = list(r.records.values())
    waits = r.waits_s()
    gpu = r.series.gpu_fraction() * 100.0
    by_kind: dict[str, Any] = {}
    for kind in KINDS:
        recs = [x for x in records if kind_of(x.id) == kind]
        w = np.asarray([x.wait_s for x in recs if x.wait_s is not None], np.float64)
        by_kind[kind] = {
            "jobs": len(recs),
            "completed": sum(1 for x in recs if x.completed),
            "waited": int(np.count_nonzero(w > 0)),
            "wait_s": {
                "mean": round(float(w.mean()), 1) if w.size else 0.0,
                **{k: round(v, 1) for k, v in percentiles(w, (90,)).items()},
                "max": round(float(w.max()), 1) if w.size else 0.0,
            },
        }
    return {
        "seed": run.seed,
        "nodes": len(run.nodes),
        "gpus": sum(n.gpu_count for n in run.nodes),
        "jobs": len(records),
        "completed": sum(1 for x in records if x.completed),
        "rejected": sum(1 for x in records if x.rejected),
        "waited": int(np.count_nonzero(waits > 0)),
        "wait_s": {
            **{k: round(v, 1) for k, v in percentiles(waits).items()},
            "mean": round(float(waits.mean()), 1) if waits.size else 0.0,
            "max": round(float(waits.max()), 1) if waits.size else 0.0,
        },
        "utilisation_pct": {
            "mean": round(r.series.time_weighted_mean(gpu), 2) if len(r.series) else 0.0,
            "peak": round(float(gpu.max()), 2) if len(r.series) else 0.0,
        },
        "gpu_hours": round(r.gpu_hours(), 2),
        "span_s": round(r.end_s - r.start_s, 1),
        "cycles": r.cycles,
        "by_kind": by_kind,
        "wait_reasons": dict(wait_reasons(records).most_common()),
        "moments": [_moment_json(m) for m in run.moments],
    }


def _moment_json(m: Moment) -> dict[str, Any]:
    return {
        "time_s": m.time_s,
        "gpu_pct": round(100.0 * m.gpu_used_milli / max(1, m.gpu_total_milli), 2),
        "running": m.running,
        "pending": [{"job": j, "reason": why} for j, why in m.pending],
        "nodes": {
            n.name: {
                "cpu_used_milli": n.cpu_used_milli,
                "cards": [
                    {
                        "index": c.index,
                        "model": c.model,
                        "used_milli": c.used_milli,
                        "holders": [
                            {
                                "job": h.job,
                                "gpu_milli": h.milli,
                                "memory_mib": h.mib,
                                "mig_profile": h.mig_profile,
                            }
                            for h in c.holders
                        ],
                    }
                    for c in n.cards
                ],
            }
            for n in m.nodes
        },
    }


# -- command -------------------------------------------------------------------------------


def add_parser(sub: Any) -> None:
    """Register the top-level ``demo`` command."""
    p = sub.add_parser(
        "demo",
        help="a small simulated cluster and a seeded stream of jobs, in a few seconds",
        description="Schedule a seeded stream of notebooks, inference pods, MIG pods, training\n"
        "gangs and CPU jobs on a small built-in cluster, on a simulated clock, and\n"
        "show the cards, the waits and the reasons.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--seed",
        type=int,
        default=DEFAULT_SEED,
        metavar="N",
        help=f"seed of the job stream (default {DEFAULT_SEED})",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=DEFAULT_JOBS,
        metavar="N",
        help=f"number of jobs (default {DEFAULT_JOBS})",
    )
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gpupool.core.errors import ConfigError

    if not 1 <= args.jobs <= 5000:
        raise ConfigError(f"--jobs {args.jobs}: must be 1..5000 (a demo, not a benchmark)")
    outcome = run_demo(args.seed, args.jobs)
    if args.json:
        print(json.dumps(summary(outcome), indent=2))
        return 0
    from rich.console import Console

    from gpupool.sim.demo_render import render

    render(outcome, Console())
    return 0
