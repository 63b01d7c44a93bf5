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

Outputs (:func:`write_outputs`): ``summary.json``, ``report.md`` and ``utilisation.png``
(GPU allocation and pending jobs over simulated time).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
from gpupool.core.reasons import Reason
from gpupool.sim.engine import Engine, JobOutcome, ProgressFn, SimResult, percentiles
from gpupool.sim.openb import trace_typical_pods
from gpupool.sim.traces.openb import POD_COLUMNS, POD_COLUMNS_SHORT, TracePod, to_job

if TYPE_CHECKING:
    from matplotlib.axes import Axes

DEFAULT_POLICY = "binpack"
SUMMARY_FILE = "summary.json"
REPORT_FILE = "report.md"
PLOT_FILE = "utilisation.png"


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


_PLUGIN_KINDS = {
    "node-resources": "CPU or memory",
    "node-schedulable": "cordoned",
    "taint-toleration": "taints",
    "node-selector": "node selector",
    "gpu-model": "GPU model",
}
_GPU_FIT_KINDS = {"whole": "whole GPUs", "mig": "MIG instance"}
_KIND_ORDER = (
    "room on one GPU",
    "CPU or memory",
    "whole GPUs",
    "MIG instance",
    "cordoned",
    "taints",
    "node selector",
    "GPU model",
)


def reason_kind(reason: Reason) -> str:
    """What one reason says was short, in words: from the plugin that gave it (and, for
    ``gpu-fit``, the kind of GPU request it could not serve); any other plugin by its name."""
    if reason.plugin == "gpu-fit":
        return _GPU_FIT_KINDS.get(reason.gpu, "room on one GPU")
    return _PLUGIN_KINDS.get(reason.plugin, reason.plugin)


def reason_kinds(reasons: Sequence[Reason]) -> list[str]:
    """What was short, in words, each once, in the order of the reasons (most nodes first
    within a clause); a gang's reasons are its failing task's."""
    return list(dict.fromkeys(reason_kind(r) for r in reasons))


def category_rank(kind: str) -> tuple[int, str]:
    return (_KIND_ORDER.index(kind) if kind in _KIND_ORDER else len(_KIND_ORDER)), kind


INVENTORY_KINDS = frozenset({"GPU model", "node selector", "taints"})
"""Reasons that are facts of the nodes, not of their use: no waiting changes them."""


def wait_reasons(records: Sequence[JobOutcome]) -> Counter[str]:
    """Jobs that waited, counted by what was short when they were first parked.

    Nodes ruled out by inventory (another GPU model, labels, taints) are left out of the
    label when some nodes were ruled out by usage: those are the ones the job waited for.
    """
    counts: Counter[str] = Counter()
    for r in records:
        if r.parks and r.first_reasons:
            kinds = reason_kinds(r.first_reasons)
            kinds = [k for k in kinds if k not in INVENTORY_KINDS] or kinds
            counts[" + ".join(sorted(kinds, key=category_rank))] += 1
    return counts


# -- files ---------------------------------------------------------------------------------


def write_outputs(
    out: Path, summary: dict[str, Any], result: SimResult, plot: bool = True
) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / SUMMARY_FILE, out / REPORT_FILE]
    (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")
    (out / REPORT_FILE).write_text(report_markdown(summary, result, plot))
    if plot:
        plot_utilisation(
            out / PLOT_FILE,
            result,
            title=f"{summary['trace']} · "
            f"{summary['policy']} · time scale {summary['time_scale']:g}",
        )
        paths.append(out / PLOT_FILE)
    return paths


def fmt_duration(seconds: float) -> str:
    """``45 s``, ``12.5 min``, ``3.2 h``, ``4.1 d``."""
    s = abs(seconds)
    if s < 90:
        return f"{seconds:.0f} s"
    if s < 90 * 60:
        return f"{seconds / 60:.1f} min"
    if s < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def report_markdown(summary: dict[str, Any], result: SimResult, plot: bool = True) -> str:
    s = summary
    w = s["wait_s"]
    u = s["utilisation_pct"]
    c = s["cpu_pct"]
    lines = [
        f"# Time-based replay: {s['trace']}",
        "",
        f"{s['jobs']:,} pods on {s['nodes']:,} nodes ({s['gpus']:,} GPUs), policy "
        f"`{s['policy']}`, time scale {s['time_scale']:g}"
        + (f", the first {s['limit']:,} arrivals" if s["limit"] else "")
        + ". "
        "Each pod arrives at its creation time and runs for deletion − creation seconds "
        "once placed; pods that do not fit wait in FIFO order.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| jobs / completed / rejected / never started | {s['jobs']:,} / {s['completed']:,} / "
        f"{s['rejected']:,} / {s['never_started']:,} |",
        f"| jobs that waited | {s['waited']:,} |",
        f"| wait p50 / p90 / p99 / max | {fmt_duration(w['p50'])} / {fmt_duration(w['p90'])} / "
        f"{fmt_duration(w['p99'])} / {fmt_duration(w['max'])} |",
        f"| GPU allocated, mean / peak | {u['mean']:.2f} % / {u['peak']:.2f} % |",
        f"| CPU allocated, mean / peak | {c['mean']:.2f} % / {c['peak']:.2f} % |",
        f"| pending jobs, peak | {s['pending_peak']:,} |",
        f"| GPU-hours used | {s['gpu_hours']:,.1f} |",
        f"| simulated span | {fmt_duration(s['span_s'])} |",
        f"| scheduling cycles / jobs offered | {s['cycles']:,} / {s['offers']:,} |",
        f"| wall time | {s['wall_s']:.2f} s |",
        "",
        "Means are over simulated time (each sample holds until the next event); GPU "
        "allocation is milli-GPU held by pods over the healthy cards' capacity.",
        "",
    ]
    if plot:
        lines += [f"![GPU allocation and pending jobs over time]({PLOT_FILE})", ""]
    records = list(result.records.values())
    reasons = wait_reasons(records)
    if reasons:
        lines += [
            "## Why pods waited",
            "",
            "Pods that waited, by what the nodes lacked when the pod was first parked "
            "(each node short of at least one of these):",
            "",
            "| short of | pods |",
            "|---|---|",
        ]
        lines += [f"| {why} | {n:,} |" for why, n in reasons.most_common(10)]
        lines.append("")
        longest = sorted((r for r in records if r.wait_s), key=lambda r: (-(r.wait_s or 0), r.id))
        lines += [
            "## Longest waits",
            "",
            "| pod | waited | GPU milli | reason |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {r.id} | {fmt_duration(r.wait_s or 0)} | {r.gpu_milli} | {r.first_reason} |"
            for r in longest[:10]
        ]
        lines.append("")
    rejected = [r for r in records if r.rejected]
    if rejected:
        lines += ["## Rejected at submission", ""]
        lines += [f"- {r.rejected}" for r in rejected[:10]]
        if len(rejected) > 10:
            lines.append(f"- ... and {len(rejected) - 10:,} more")
        lines.append("")
    return "\n".join(lines)


def _time_axis(span_s: float) -> tuple[float, str]:
    if span_s > 3 * 86400:
        return 86400.0, "days"
    if span_s > 3 * 3600:
        return 3600.0, "hours"
    return 60.0, "minutes"


def busy_window_s(result: SimResult) -> float:
    """Seconds from the start until the last arrival or the last moment a job waited,
    whichever is later: the part of the run where scheduling happens."""
    s = result.series
    t = np.asarray(s.time_s, np.float64) - result.start_s
    last_arrival = max((r.submit_s for r in result.records.values()), default=result.start_s)
    end = last_arrival - result.start_s
    pending = np.flatnonzero(np.asarray(s.pending) > 0)
    if pending.size and pending[-1] + 1 < t.size:
        end = max(end, float(t[pending[-1] + 1]))
    elif pending.size:
        end = max(end, float(t[pending[-1]]))
    return end


def plot_utilisation(path: Path, result: SimResult, title: str = "") -> None:
    """GPU and CPU allocation % and pending jobs over simulated time, as step lines.

    When arrivals and waits all fall in the first 40 % of the run (compressed arrivals,
    then long jobs draining), the two main panels zoom on that busy window and a third
    panel shows the whole run with the window shaded.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    s = result.series
    t = np.asarray(s.time_s, np.float64) - result.start_s
    span = float(t[-1]) if t.size else 0.0
    gpu = s.gpu_fraction() * 100.0
    cpu_used = np.asarray(s.cpu_used_milli, np.float64)
    cpu_total = np.asarray(s.cpu_total_milli, np.float64)
    cpu = np.divide(cpu_used, cpu_total, out=np.zeros_like(cpu_used), where=cpu_total > 0) * 100
    pending = np.asarray(s.pending, np.float64)
    busy = busy_window_s(result)
    zoom = span > 0 and busy < 0.4 * span
    window = max(busy * 1.08, span * 0.002) if zoom else span
    unit, unit_name = _time_axis(window)
    x = t / unit

    fig = Figure(figsize=(11, 7.4 if zoom else 6.2), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    if zoom:
        top, middle, overview = fig.subplots(3, 1, height_ratios=(3, 2, 1.3))
        middle.sharex(top)
        top.tick_params(labelbottom=False)
    else:
        top, middle = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    shown = x <= window / unit * 1.0001 if zoom else np.ones(x.size, np.bool_)
    _steps(top, x, gpu, "#1f77b4", "GPU allocated", fill=True)
    _steps(top, x, cpu, "#ff7f0e", "CPU allocated", fill=False)
    peak = float(max(gpu[shown].max(initial=0), cpu[shown].max(initial=0)))
    top.set_ylim(0, 100.0 if peak >= 80 else min(100.0, max(5.0, peak * 1.15)))
    top.set_ylabel("allocated, % of capacity")
    mean_gpu = s.time_weighted_mean(gpu) if t.size else 0.0
    top.axhline(
        mean_gpu, color="#1f77b4", linestyle=":", linewidth=1, label="GPU mean over the whole run"
    )
    top.legend(
        loc="upper right",
        frameon=True,
        framealpha=0.85,
        title=f"GPU mean {mean_gpu:.2f} %, peak {gpu.max(initial=0):.2f} %",
        title_fontsize=9,
        fontsize=9,
        alignment="left",
    )
    top.grid(True, alpha=0.3)
    if title:
        top.set_title(title + (" · busy window" if zoom else ""), fontsize=11)
    _steps(middle, x, pending, "#d62728", "pending jobs", fill=True)
    middle.set_ylim(0, max(1.0, float(pending.max(initial=0)) * 1.15))
    middle.set_ylabel("pending jobs")
    middle.grid(True, alpha=0.3)
    if not pending.any():
        middle.text(
            0.5,
            0.5,
            "no job ever waited",
            transform=middle.transAxes,
            ha="center",
            va="center",
            color="#555555",
        )
    xmax = max(window / unit, 1e-9)
    top.set_xlim(0, xmax)
    middle.set_xlim(0, xmax)
    if zoom:
        middle.set_xlabel(f"simulated time since the first arrival ({unit_name})")
        o_unit, o_name = _time_axis(span)
        _steps(overview, t / o_unit, gpu, "#1f77b4", "GPU allocated", fill=True)
        overview.axvspan(0, window / o_unit, color="#999999", alpha=0.25, linewidth=0)
        overview.set_xlim(0, span / o_unit)
        overview.set_ylim(0, 100.0 if peak >= 80 else min(100.0, max(5.0, peak * 1.15)))
        overview.set_ylabel("GPU %")
        overview.set_xlabel(
            f"whole run ({o_name}); shaded: the window above, after it only running jobs finish"
        )
        overview.grid(True, alpha=0.3)
    else:
        middle.set_xlabel(f"simulated time since the first arrival ({unit_name})")
    fig.savefig(path)


def _steps(ax: Axes, x: np.ndarray, y: np.ndarray, color: str, label: str, fill: bool) -> None:
    if x.size == 0:
        return
    ax.step(x, y, where="post", color=color, linewidth=1.1, label=label)
    if fill:
        ax.fill_between(x, y, step="post", color=color, alpha=0.18, linewidth=0)


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
