"""The replay's plot: GPU and CPU allocation and pending jobs over simulated time, zoomed on
the busy window when the run ends with a long drain."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from gpupool.sim.engine import SimResult

if TYPE_CHECKING:
    from matplotlib.axes import Axes


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
