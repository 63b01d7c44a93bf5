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
import itertools
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
from gpupool.sim.replay import fmt_duration, wait_reasons

GPU_TAINT = Taint("nvidia.com/gpu", "present")
GPU_TOLERATION = Toleration("nvidia.com/gpu", "Exists")
A100 = "A100-80GB"
T4 = "T4"
MIG_PROFILE = "1g.10gb"
GIB = 1024

KINDS = ("training", "notebook", "inference", "mig", "cpu")
KIND_LABEL = {
    "training": "training", "notebook": "notebook", "inference": "inference",
    "mig": "MIG pod", "cpu": "CPU-only",
}
KIND_COLOR = {
    "training": "dodger_blue1", "notebook": "green3", "inference": "magenta",
    "mig": "cyan", "cpu": "yellow",
}
PREFIX = {"training": "train", "notebook": "nb", "inference": "inf", "mig": "mig",
          "cpu": "cpu"}
DEFAULT_JOBS = 150
DEFAULT_SEED = 7


# -- the cluster -------------------------------------------------------------------------


def demo_cluster() -> list[Node]:
    """4 x 8 A100-80GB (NVLink mesh), 4 x 4 T4, 1 node with 2 MIG A100s, 2 CPU-only nodes."""
    nodes: list[Node] = []
    for i in range(4):
        cards = tuple(Gpu(g, A100, 80 * GIB, uuid=f"GPU-a100-{i}-{g}",
                          nvlink_peers=tuple(p for p in range(8) if p != g))
                      for g in range(8))
        nodes.append(Node(NodeName(f"a100-{i}"), 128_000, 1024 * GIB, cards,
                          labels={"gpupool.io/flavor": "a100"}, taints=(GPU_TAINT,)))
    for i in range(4):
        cards = tuple(Gpu(g, T4, 16 * GIB, uuid=f"GPU-t4-{i}-{g}") for g in range(4))
        nodes.append(Node(NodeName(f"t4-{i}"), 48_000, 192 * GIB, cards,
                          labels={"gpupool.io/flavor": "t4"}, taints=(GPU_TAINT,)))
    mig = (MigInstance(MIG_PROFILE, 7, WHOLE_GPU_MILLI // 7, 10 * GIB),)
    nodes.append(Node(NodeName("mig-0"), 64_000, 512 * GIB,
                      tuple(Gpu(g, A100, 80 * GIB, uuid=f"GPU-mig-{g}", mig=mig)
                            for g in range(2)),
                      labels={"gpupool.io/flavor": "a100-mig"}, taints=(GPU_TAINT,)))
    for i in range(2):
        nodes.append(Node(NodeName(f"cpu-{i}"), 64_000, 256 * GIB,
                          labels={"gpupool.io/flavor": "cpu"}))
    return nodes


# -- the jobs ----------------------------------------------------------------------------


def demo_jobs(seed: int = DEFAULT_SEED, count: int = DEFAULT_JOBS,
              mean_gap_s: float = 150.0) -> list[Job]:
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
            [(1, 1), (1, 2), (1, 4), (1, 8), (2, 4), (2, 8)], weights=[18, 22, 26, 18, 8, 8])[0]
        pod = PodSet("worker", count=tasks, cpu_milli=per_task * 10_000,
                     memory_mib=per_task * 64 * GIB,
                     gpu=GpuRequest(count=per_task, models=frozenset({A100})),
                     tolerations=gpu_tol)
        return Job(job_id, (pod,), QueueName("research"), submit_time_s=at,
                   duration_s=_minutes(rng, 45, 240), user=rng.choice(["ana", "bo", "chen"]))
    if kind == "notebook":
        milli, mem = rng.choice([(250, 10 * GIB), (250, 8 * GIB), (500, 20 * GIB),
                                 (330, 12 * GIB)])
        pod = PodSet("notebook", cpu_milli=rng.choice([2000, 4000, 8000]),
                     memory_mib=rng.choice([16, 32]) * GIB,
                     gpu=GpuRequest(gpu_milli=milli, memory_mib=mem), tolerations=gpu_tol)
        return Job(job_id, (pod,), QueueName("notebooks"), submit_time_s=at,
                   duration_s=_minutes(rng, 20, 120), user=rng.choice(["dee", "eli", "fay"]))
    if kind == "inference":
        milli, mem = rng.choice([(300, 6 * GIB), (500, 8 * GIB), (250, 4 * GIB)])
        pod = PodSet("server", cpu_milli=4000, memory_mib=16 * GIB,
                     gpu=GpuRequest(gpu_milli=milli, memory_mib=mem, models=frozenset({T4})),
                     tolerations=gpu_tol)
        return Job(job_id, (pod,), QueueName("serving"), submit_time_s=at,
                   duration_s=_minutes(rng, 30, 180), user="svc")
    if kind == "mig":
        pod = PodSet("dev", cpu_milli=4000, memory_mib=32 * GIB,
                     gpu=GpuRequest(mig_profile=MIG_PROFILE), tolerations=gpu_tol)
        return Job(job_id, (pod,), QueueName("notebooks"), submit_time_s=at,
                   duration_s=_minutes(rng, 15, 90), user=rng.choice(["dee", "eli"]))
    pod = PodSet("etl", cpu_milli=rng.choice([4000, 8000, 16000, 24000]),
                 memory_mib=rng.choice([16, 32, 64]) * GIB)
    return Job(job_id, (pod,), QueueName("data"), submit_time_s=at,
               duration_s=_minutes(rng, 10, 90), user="etl")


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
        gpu = f"{g.gpu_milli / 10:.0f}% of a {'|'.join(sorted(g.models)) or 'GPU'}, " \
              f"{g.memory_mib // GIB} GiB"
    else:
        gpu = "no GPU"
    tasks = f"{ps.count} × " if ps.count > 1 else ""
    return f"{tasks}{gpu}, {ps.cpu_milli // 1000} CPU"


# -- running -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Holder:
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
    holders: tuple[Holder, ...]

    @property
    def used_milli(self) -> int:
        """Held compute; a MIG instance counts for its declared share (``core.mig``)."""
        return sum(h.milli for h in self.holders)


@dataclass(frozen=True, slots=True)
class NodeView:
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
    nodes: tuple[NodeView, ...]
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
        by_card: dict[int, list[Holder]] = {g.index: [] for g in node.gpus}
        cpu = 0
        jobs: dict[str, int] = {}
        for p in sorted(placements, key=lambda p: p.task):
            cpu += p.cpu_milli
            jobs[p.job] = jobs.get(p.job, 0) + p.cpu_milli
            for s in p.shares:
                by_card[s.index].append(Holder(p.job, share_milli(s, node.gpus[s.index]),
                                               s.memory_mib, s.mig_profile))
        cards = tuple(
            CardView(g.index, g.model, g.memory_mib, sum(i.count for i in g.mig),
                     tuple(by_card[g.index]))
            for g in node.gpus)
        views.append(NodeView(node.name, cards, cpu, node.cpu_milli, tuple(jobs.items())))
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
            "wait_s": {"mean": round(float(w.mean()), 1) if w.size else 0.0,
                       **{k: round(v, 1) for k, v in percentiles(w, (90,)).items()},
                       "max": round(float(w.max()), 1) if w.size else 0.0},
        }
    return {
        "seed": run.seed,
        "nodes": len(run.nodes),
        "gpus": sum(n.gpu_count for n in run.nodes),
        "jobs": len(records),
        "completed": sum(1 for x in records if x.completed),
        "rejected": sum(1 for x in records if x.rejected),
        "waited": int(np.count_nonzero(waits > 0)),
        "wait_s": {**{k: round(v, 1) for k, v in percentiles(waits).items()},
                   "mean": round(float(waits.mean()), 1) if waits.size else 0.0,
                   "max": round(float(waits.max()), 1) if waits.size else 0.0},
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
                "cards": [{"index": c.index, "model": c.model, "used_milli": c.used_milli,
                           "holders": [{"job": h.job, "gpu_milli": h.milli,
                                        "memory_mib": h.mib, "mig_profile": h.mig_profile}
                                       for h in c.holders]}
                          for c in n.cards],
            }
            for n in m.nodes
        },
    }


# -- rendering -----------------------------------------------------------------------------


def clock(seconds: float) -> str:
    m = round(seconds) // 60
    return f"{m // 60:d}:{m % 60:02d}"


def render(run: DemoRun, console: Any) -> None:
    from rich.panel import Panel
    from rich.rule import Rule
    from rich.table import Table
    from rich.text import Text

    s = summary(run)
    jobs = {j.id: j for j in run.jobs}
    width = max(60, min(int(console.width), 120))

    def table(title: str | None = None) -> Table:
        return Table(title=title, title_justify="left", title_style="bold", box=None,
                     padding=(0, 2), show_edge=False, header_style="dim")

    console.print(Panel.fit(
        Text.from_markup(
            "[bold]gpupool demo[/]: a small simulated cluster, a seeded stream of jobs, and "
            "the gpupool core placing them\n"
            f"[dim]seed {run.seed} · {len(run.jobs)} jobs · the clock is simulated, so hours "
            "of cluster time take a moment[/]"),
        border_style="dodger_blue1"))

    t = table("The cluster")
    for col in ("nodes", "each", "GPUs", "for"):
        t.add_column(col, style="bold" if col == "nodes" else "")
    t.add_row("a100-0..3", "128 CPU, 1 TiB", f"8 × {A100}", "training gangs (NVLink mesh), "
              "notebook slices")
    t.add_row("t4-0..3", "48 CPU, 192 GiB", f"4 × {T4}", "inference and notebook slices")
    t.add_row("mig-0", "64 CPU, 512 GiB", f"2 × {A100}", f"MIG, 7 × {MIG_PROFILE} per card")
    t.add_row("cpu-0..1", "64 CPU, 256 GiB", "none", "CPU-only jobs (GPU nodes are tainted)")
    console.print(t)
    console.print()

    w = table("The workload")
    w.add_column("kind")
    w.add_column("jobs", justify="right")
    w.add_column("each asks for, e.g.")
    for kind in KINDS:
        ks = [j for j in run.jobs if kind_of(j.id) == kind]
        if ks:
            examples = list(dict.fromkeys(describe_request(j) for j in ks))[:3]
            w.add_row(Text(KIND_LABEL[kind], style=KIND_COLOR[kind]), str(len(ks)),
                      " | ".join(examples))
    console.print(w)
    last = max(j.submit_time_s for j in run.jobs)
    console.print(Text(f"  Jobs arrive over {fmt_duration(last)}. A gang starts with all its "
                       "tasks or waits; jobs that do not fit wait in arrival order.",
                       style="dim"))

    console.print()
    legend = Text("  cards: ", style="dim") + Text("███", style="grey70") + \
        Text(" held ", style="dim") + Text("░░░", style="grey35") + \
        Text(" free, one group of three per card (MIG: share of instances in use)\n"
             "  colours: ", style="dim")
    legend += Text("  ").join(Text(KIND_LABEL[k], style=KIND_COLOR[k]) for k in KINDS)
    legend += Text("\n  holding: #0-3 cards 0 to 3 whole · #6 25% a quarter of card 6's "
                   "compute · #0 1g a MIG instance on card 0 · 8c CPUs of a job without "
                   "GPUs", style="dim")
    console.print(legend)
    console.print()
    for m in run.moments:
        console.print(Rule(Text.assemble(
            (f"t = {clock(m.time_s)}", "bold"), (f" · {m.label}" if m.label else "", "bold"),
            f" · GPU {100 * m.gpu_used_milli / max(1, m.gpu_total_milli):.0f} % allocated · "
            f"{m.running} running · {len(m.pending)} waiting "), align="left",
            style="grey50"))
        console.print(_cards_table(m))
        if m.pending:
            p = table()
            p.add_column("waiting", no_wrap=True)
            p.add_column("asks for", no_wrap=True, style="dim")
            p.add_column("why, as the scheduler says it")
            for job_id, why in m.pending[:4]:
                p.add_row(Text(job_id, style=KIND_COLOR[kind_of(job_id)]),
                          describe_request(jobs[JobId(job_id)]), why)
            if len(m.pending) > 4:
                p.add_row(Text(f"+{len(m.pending) - 4} more", style="dim"), "", "")
            console.print(p)
        console.print()

    console.print()
    console.print(Rule(Text("Over the whole run", style="bold"), align="left",
                       style="grey50"))
    series = run.result.series
    gpu = series.gpu_fraction() * 100.0
    tt = np.asarray(series.time_s)
    pend = np.asarray(series.pending, np.float64)
    spark = max(20, width - 46)
    u = s["utilisation_pct"]
    console.print(Text.assemble(("  GPU allocated  ", "bold"),
                                (_sparkline(tt, gpu, 0, 100, spark), "dodger_blue1"),
                                f"  mean {u['mean']:.0f} %, peak {u['peak']:.0f} %"))
    console.print(Text.assemble(("  jobs waiting   ", "bold"),
                                (_sparkline(tt, pend, 0, max(1.0, float(pend.max(initial=0))),
                                            spark), "red"),
                                f"  peak {int(pend.max(initial=0))}"))
    end = clock(run.result.end_s)
    console.print(Text(f"{'':17}0:00{end:>{spark - 4}}", style="dim"))

    console.print()
    r = table("Results")
    for col in ("kind", "jobs", "finished", "waited", "mean wait", "p90 wait", "max wait"):
        r.add_column(col, justify="left" if col == "kind" else "right")
    for kind in KINDS:
        k = s["by_kind"][kind]
        if k["jobs"]:
            r.add_row(Text(KIND_LABEL[kind], style=KIND_COLOR[kind]), str(k["jobs"]),
                      str(k["completed"]), str(k["waited"]), fmt_duration(k["wait_s"]["mean"]),
                      fmt_duration(k["wait_s"]["p90"]), fmt_duration(k["wait_s"]["max"]))
    ws = s["wait_s"]
    r.add_row(Text("all", style="bold"), str(s["jobs"]), str(s["completed"]), str(s["waited"]),
              fmt_duration(ws["mean"]), fmt_duration(ws["p90"]), fmt_duration(ws["max"]))
    console.print(r)
    console.print(Text(
        f"  {s['completed']} of {s['jobs']} jobs finished in {fmt_duration(s['span_s'])} of "
        f"cluster time · wait p50 {fmt_duration(ws['p50'])}, p90 {fmt_duration(ws['p90'])}, "
        f"p99 {fmt_duration(ws['p99'])} · {s['gpu_hours']:.0f} GPU-hours used · "
        f"{s['cycles']} scheduling cycles"))

    reasons = s["wait_reasons"]
    if reasons:
        console.print()
        y = table(f"Why {s['waited']} jobs waited")
        y.add_column("jobs", justify="right")
        y.add_column("each node that had the right GPUs was short of")
        for why, n in reasons.items():
            y.add_row(str(n), why)
        console.print(y)
        console.print()
        longest = sorted((x for x in run.result.records.values() if x.wait_s),
                         key=lambda x: (-(x.wait_s or 0), x.id))[:5]
        lw = table("Longest waits")
        lw.add_column("job", no_wrap=True)
        lw.add_column("waited", justify="right", no_wrap=True)
        lw.add_column("asks for", no_wrap=True, style="dim")
        lw.add_column("reason when it was first parked")
        for x in longest:
            lw.add_row(Text(x.id, style=KIND_COLOR[kind_of(x.id)]), fmt_duration(x.wait_s or 0),
                       describe_request(jobs[x.id]), x.first_reason)
        console.print(lw)
        note = _observation(s)
        if note:
            console.print(Text("  " + note, style="italic"))
    console.print()
    console.print(Text("Next: gpupool demo --seed 3 (another day) · gpupool demo --json · "
                       "gpupool sim replay (a real trace; docs/sim-replay.md)", style="dim"))


def _observation(s: dict[str, Any]) -> str:
    by = s["by_kind"]
    kinds = [k for k in KINDS if by[k]["waited"]]
    if not kinds:
        return ""
    worst = max(kinds, key=lambda k: by[k]["wait_s"]["mean"])
    if worst == "training":
        return ("Training gangs wait longest: a gang needs all its cards free at the same "
                "time, while slices and small jobs fit into the gaps as cards free up.")
    return f"{KIND_LABEL[worst]} jobs waited longest on average."


def _cards_table(m: Moment) -> Any:
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, padding=(0, 1), show_header=True, header_style="dim",
                  show_edge=False, pad_edge=True)
    table.add_column("node", style="bold", no_wrap=True)
    table.add_column("CPU", justify="right", no_wrap=True)
    table.add_column("cards", no_wrap=True)
    table.add_column("holding")
    for n in m.nodes:
        cards = Text()
        for c in n.cards:
            cards.append_text(_card_cells(c))
            cards.append(" ")
        if not n.cards:
            cards.append("no GPUs", style="dim")
        holding = Text()
        for job_id, cpu_milli in n.jobs:
            if holding:
                holding.append("  ")
            holding.append(job_id, style=KIND_COLOR[kind_of(job_id)])
            holding.append(_holding_detail(n, job_id) or f" {cpu_milli // 1000}c", style="dim")
        cpu = f"{n.cpu_used_milli // 1000}/{n.cpu_milli // 1000}"
        table.add_row(n.name, cpu, cards, holding)
    return table


def _card_cells(c: CardView) -> Any:
    from rich.text import Text

    width = 3
    if not c.holders:
        return Text("░" * width, style="grey35")
    main = max(c.holders, key=lambda h: h.milli if not c.mig_slots else 1)
    color = KIND_COLOR[kind_of(main.job)]
    full = min(width, max(1, round(width * c.used_milli / WHOLE_GPU_MILLI)))
    return Text("█" * full, style=color) + Text("░" * (width - full), style="grey35")


def _holding_detail(n: NodeView, job_id: str) -> str:
    """Which cards a job holds on this node and how much: ``#0-3`` four whole cards,
    ``#6 25%`` a quarter of card 6, ``#0 1g`` a MIG instance on card 0; "" without GPUs."""
    shares = [(c, h) for c in n.cards for h in c.holders if h.job == job_id]
    if not shares:
        return ""
    c, first = shares[0]
    if first.mig_profile:
        return f" #{c.index} {first.mig_profile.split('.')[0]}"
    if all(h.milli == WHOLE_GPU_MILLI for _, h in shares):
        idx = sorted(card.index for card, _ in shares)
        if len(idx) > 1 and idx == list(range(idx[0], idx[-1] + 1)):
            return f" #{idx[0]}-{idx[-1]}"
        return " #" + ",".join(map(str, idx))
    return " " + " ".join(f"#{card.index} {h.milli / 10:.0f}%" for card, h in shares)


_BARS = " ▁▂▃▄▅▆▇█"


def _sparkline(t: np.ndarray, y: np.ndarray, lo: float, hi: float, width: int) -> str:
    """Time-weighted means of a step series over ``width`` equal slices of time."""
    if t.size == 0:
        return " " * width
    edges = np.linspace(float(t[0]), float(t[-1]), width + 1)
    out = []
    for a, b in itertools.pairwise(edges):
        i0 = max(0, int(np.searchsorted(t, a, side="right")) - 1)
        i1 = max(i0 + 1, int(np.searchsorted(t, b, side="left")))
        seg = y[i0:i1]
        v = float(seg.mean()) if seg.size else float(y[i0])
        frac = 0.0 if hi <= lo else (v - lo) / (hi - lo)
        out.append(_BARS[min(8, max(0, round(frac * 8)))] if v > lo else " ")
    return "".join(out)


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
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, metavar="N",
                   help=f"seed of the job stream (default {DEFAULT_SEED})")
    p.add_argument("--jobs", type=int, default=DEFAULT_JOBS, metavar="N",
                   help=f"number of jobs (default {DEFAULT_JOBS})")
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

    render(outcome, Console())
    return 0
