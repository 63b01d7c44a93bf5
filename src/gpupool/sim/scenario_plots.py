"""A scenario's plots: GPUs per queue (or user) over time, and waits per queue."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from gpupool.config.fields import fmt_s
from gpupool.core.model import WHOLE_GPU_MILLI
from gpupool.sim.scenario_results import RunResult
from gpupool.sim.scenario_summary import step_mean

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["SHARES_PLOT", "USERS_PLOT", "WAITS_PLOT", "plot_shares", "plot_waits", "resample"]

SHARES_PLOT = "shares.png"
USERS_PLOT = "users.png"
WAITS_PLOT = "waits.png"

_COLORS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)


def _figure(width: float, height: float) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: Path) -> None:
    fig.savefig(path, format="png", metadata={"Software": None})


def _hours(span_s: float) -> tuple[float, str]:
    return (3600.0, "hours") if span_s > 3 * 3600 else (60.0, "minutes")


def resample(
    t: npt.NDArray[np.float64], y: npt.NDArray[np.float64], end_s: float, step_s: float
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Mean of a step function (each column of ``y`` held from t[i] on) per bin of
    ``step_s``, over [0, end_s]."""
    edges = np.arange(0.0, end_s + step_s, step_s)
    edges[-1] = min(edges[-1], end_s) if edges.size > 1 else end_s
    out = np.zeros((edges.size - 1, y.shape[1]))
    for k in range(edges.size - 1):
        a, b = edges[k], edges[k + 1]
        if b > a:
            for c in range(y.shape[1]):
                out[k, c] = step_mean(t, y[:, c], a, b)
    return (edges[:-1] + edges[1:]) / 2, out


def plot_shares(path: Path, r: RunResult, by: str = "queue") -> None:
    """Top: GPUs allocated per queue (or per user) over time, stacked, under the capacity.
    Bottom: each one's share of the allocated GPUs over 10 minutes, against its entitled
    share (queues only); the saturated window shaded."""
    s = r.scenario
    if by == "queue":
        t, used = r.series.arrays()
        names = r.series.queues
    else:
        t, used = r.series.user_arrays()
        names = r.series.users
    unit, unit_name = _hours(s.duration_s)
    step = max(60.0, s.duration_s / 240)
    mid, binned = resample(t, used / WHOLE_GPU_MILLI, s.duration_s, step)
    smooth = max(1, round(600 / step))  # 10-minute windows: GPU-time of one / of all
    fig = _figure(11, 7.2)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2.4))
    x = mid / unit
    colors = {q: _COLORS[i % len(_COLORS)] for i, q in enumerate(names)}
    top.stackplot(
        x, binned.T, labels=names, colors=[colors[q] for q in names], alpha=0.85, linewidth=0
    )
    if r.cloud is not None and by == "queue":
        ct = np.asarray([*r.cloud.capacity_t, s.duration_s], np.float64)
        cg = np.asarray([*r.cloud.capacity_gpus, r.cloud.capacity_gpus[-1]], np.float64)
        top.step(
            ct / unit,
            s.gpus + cg,
            where="post",
            color="black",
            linewidth=1,
            linestyle="--",
            label="capacity",
        )
        ymax = float(s.gpus + cg.max())
    else:
        top.axhline(s.gpus, color="black", linewidth=1, linestyle="--", label="capacity")
        ymax = float(s.gpus)
    top.set_ylim(0, max(ymax, float(binned.sum(axis=1).max()) if binned.size else 0.0) * 1.08)
    top.set_ylabel("GPUs allocated")
    top.legend(loc="lower right", fontsize=8, ncol=min(len(names) + 1, 6), framealpha=0.9)
    top.set_title(
        f"{s.name} · seed {r.seed} · GPUs allocated per {by} ({fmt_s(step)} "
        f"means); below: shares of the allocated GPU-time over "
        f"{fmt_s(smooth * step)}",
        fontsize=11,
    )
    kernel = np.ones(smooth)
    rolled = (
        np.stack(
            [np.convolve(binned[:, i], kernel, mode="same") for i in range(len(names))], axis=1
        )
        if names
        else binned
    )
    total = rolled.sum(axis=1)
    ent_sum = sum(r.entitled_gpu.values()) or 1.0
    for i, q in enumerate(names):
        share = np.divide(rolled[:, i], total, out=np.zeros_like(total), where=total > 0)
        bottom.plot(x, 100 * share, color=colors[q], linewidth=1.3, label=q)
        if by == "queue":
            bottom.axhline(
                100 * r.entitled_gpu[q] / ent_sum,
                color=colors[q],
                linewidth=1,
                linestyle=(0, (4, 3)),
            )
    for ax in (top, bottom):
        ax.axvspan(s.window[0] / unit, s.window[1] / unit, color="#999999", alpha=0.15, linewidth=0)
        ax.grid(True, alpha=0.3)
    bottom.set_ylim(0, 104)
    bottom.set_ylabel("% of allocated GPUs")
    bottom.set_xlabel(
        f"simulated time ({unit_name}); shaded: the saturated window"
        + ("; dashed: entitled shares" if by == "queue" else "")
    )
    bottom.set_xlim(0, s.duration_s / unit)
    bottom.legend(loc="upper right", fontsize=8, ncol=min(len(names), 6), framealpha=0.9)
    _save(fig, path)


def plot_waits(path: Path, runs: Sequence[RunResult]) -> None:
    """Waits per queue, all seeds together: box (quartiles), whiskers at p1 and p99. Jobs
    that never started count with the time they had waited by the end (a lower bound), so a
    queue whose backlog only grows shows it."""
    queues = runs[0].series.queues if runs else []
    data = []
    unstarted = []
    for q in queues:
        waits = []
        left = 0
        for r in runs:
            for j in r.jobs.values():
                if j.queue != q or j.rejected:
                    continue
                if j.wait_s is not None:
                    waits.append(j.wait_s)
                else:
                    waits.append(r.scenario.duration_s - j.submit_s)
                    left += 1
        data.append(np.asarray(waits, np.float64) / 60)
        unstarted.append(left)
    fig = _figure(max(6.0, 1.5 * len(queues) + 2), 4.8)
    ax: Axes = fig.subplots()
    shown = [d if d.size else np.zeros(1) for d in data]
    box = ax.boxplot(
        shown,
        whis=(1, 99),
        showfliers=False,
        patch_artist=True,
        medianprops={"color": "black", "linewidth": 1.4},
    )
    ax.set_xticks(range(1, len(queues) + 1), queues)
    for i, patch in enumerate(box["boxes"]):
        patch.set_facecolor(_COLORS[i % len(_COLORS)])
        patch.set_alpha(0.6)
    top = max((float(np.percentile(d, 99)) for d in data if d.size), default=1.0)
    for i, d in enumerate(data):
        if d.size:
            note = f"p50 {np.median(d):.1f}\np99 {np.percentile(d, 99):.1f}"
            if unstarted[i]:
                note += f"\n{unstarted[i]:,} never started"
            ax.text(i + 1, top * 1.04, note, ha="center", va="bottom", fontsize=8)
    ax.set_ylim(0, max(1.0, top * 1.3))
    ax.set_ylabel("wait before the first start (minutes)")
    seeds = ", ".join(str(r.seed) for r in runs)
    ax.set_title(
        f"{runs[0].scenario.name if runs else ''} · waits per queue · seeds {seeds} "
        "· whiskers p1–p99",
        fontsize=11,
    )
    ax.set_xlabel("jobs that never started count with their wait until the end")
    ax.grid(True, axis="y", alpha=0.3)
    _save(fig, path)
