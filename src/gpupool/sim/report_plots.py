"""The openb report's plots, drawn on a bare ``matplotlib.figure.Figure`` with the Agg canvas:
unallocated GPUs and fragmentation against arrived load (median and band per policy), and the
figures at 100 % load as bars."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.axes import Axes


from gpupool.sim.report_stats import (
    BINS,
    ExperimentLike,
    _seed_text,
    curve_band,
    curve_matrix,
    group_by_policy,
)

BAND = "25th-75th percentile over seeds"
_COLORS = {
    "random": "#7f7f7f",
    "dotprod": "#9467bd",
    "gpupacking": "#8c564b",
    "gpuclustering": "#e377c2",
    "bestfit": "#2ca02c",
    "fgd": "#1f77b4",
    "gpupool": "#d62728",
}
_SPARE_COLORS = ("#ff7f0e", "#17becf", "#bcbd22", "#393b79", "#637939", "#843c39")


def policy_color(name: str, order: Sequence[str]) -> str:
    """A fixed colour per known policy; others take spare colours by their place in ``order``."""
    if name in _COLORS:
        return _COLORS[name]
    unknown = [p for p in order if p not in _COLORS]
    idx = unknown.index(name) if name in unknown else 0
    return _SPARE_COLORS[idx % len(_SPARE_COLORS)]


def _new_figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: Path) -> None:
    # No "Software" chunk: the same curves give the same bytes whatever matplotlib's version.
    fig.savefig(path, format="png", metadata={"Software": None})


def _title_suffix(trace: str, seeds: Sequence[int]) -> str:
    return f"openb {trace}, seeds {_seed_text(seeds)}"


def _draw_curves(ax: Axes, groups: Mapping[str, Sequence[ExperimentLike]], metric: str) -> None:
    x = np.arange(BINS)
    order = list(groups)
    for name, rs in groups.items():
        med, lo, hi = curve_band(curve_matrix(rs, metric))
        color = policy_color(name, order)
        # gpupool is drawn wide and underneath, so a policy whose curve coincides with it
        # still shows as a thin line inside the wide one.
        ours = name == "gpupool"
        ax.fill_between(x, lo, hi, color=color, alpha=0.18, linewidth=0)
        ax.plot(
            x,
            med,
            color=color,
            linewidth=3.2 if ours else 1.4,
            label=name,
            zorder=1.9 if ours else 2.0,
        )
    ax.axvline(100, color="black", linestyle="--", linewidth=0.9)
    ax.grid(True, alpha=0.3)


def plot_unallocated(
    results: Sequence[ExperimentLike],
    path: Path,
    *,
    trace: str,
    seeds: Sequence[int],
    policies: Sequence[str] | None = None,
) -> None:
    """Unallocated GPUs % versus arrived load %, full range and the 80–130 % close-up."""
    groups = group_by_policy(results, policies)
    fig = _new_figure(13.0, 4.8)
    full, zoom = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.0, 1.0]})
    for ax in (full, zoom):
        _draw_curves(ax, groups, "unallocated_pct")
        ax.set_xlabel("Arrived GPU demand (% of cluster GPU capacity)")
        ax.set_ylabel("Unallocated GPUs (% of cluster capacity)")
    full.set_xlim(0, 130)
    full.set_ylim(0, 100)
    full.set_title("Full range")
    zoom.set_xlim(80, 130)
    zoom.set_ylim(*_zoom_ylim(groups, 80))
    zoom.set_title("Close-up, 80–130 %")
    handles, labels = full.get_legend_handles_labels()
    fig.legend(
        handles, labels, title="policy (median)", loc="outside right upper", fontsize="small"
    )
    full.text(100, 97, " 100 %", va="top", ha="left", fontsize="small")
    fig.suptitle(
        f"Unallocated GPUs vs arrived load — {_title_suffix(trace, seeds)}\n"
        f"median over seeds, band: {BAND}",
        fontsize="medium",
    )
    _save(fig, path)


def _zoom_ylim(groups: Mapping[str, Sequence[ExperimentLike]], start: int) -> tuple[float, float]:
    vals = [curve_band(curve_matrix(rs, "unallocated_pct"))[2][start:] for rs in groups.values()]
    top = (
        np.nanmax(np.concatenate(vals))
        if vals and np.isfinite(np.concatenate(vals)).any()
        else 100.0
    )
    lows = [curve_band(curve_matrix(rs, "unallocated_pct"))[1][start:] for rs in groups.values()]
    cat = np.concatenate(lows) if lows else np.zeros(0)
    bottom = float(np.nanmin(cat)) if np.isfinite(cat).any() else 0.0
    span = max(float(top) - bottom, 1.0)
    return max(0.0, bottom - 0.05 * span), min(100.0, float(top) + 0.05 * span)


def plot_bars(summary: Mapping[str, Any], path: Path) -> None:
    """Unallocated GPUs % at 100 % arrived load: mean ± sd per policy, published as markers."""
    pol: Mapping[str, Any] = summary["policies"]
    names = list(pol)
    means = [pol[n]["unallocated_gpu_pct"]["100"]["mean"] for n in names]
    sds = [pol[n]["unallocated_gpu_pct"]["100"]["sd"] for n in names]
    fig = _new_figure(max(5.5, 1.0 + 1.0 * len(names)), 4.6)
    ax = fig.subplots()
    x = np.arange(len(names))
    heights = [np.nan if m is None else m for m in means]
    errs = [0.0 if s is None else s for s in sds]
    ax.bar(
        x,
        heights,
        yerr=errs,
        capsize=4,
        color=[policy_color(n, names) for n in names],
        edgecolor="black",
        linewidth=0.6,
        label="ours: mean ± sd over seeds",
        error_kw={"linewidth": 1.0},
    )
    pub = [
        pol[n]["published"]["unallocated_gpu_pct"]["100"] if "published" in pol[n] else None
        for n in names
    ]
    pub_x = [i for i, v in enumerate(pub) if v is not None]
    if pub_x:
        ax.scatter(
            pub_x,
            [pub[i] for i in pub_x],
            marker="D",
            s=40,
            facecolor="white",
            edgecolor="black",
            linewidth=1.4,
            zorder=3,
            label="published (ATC'23 simulator)",
        )
    tops = [0.0]
    for i, m in enumerate(means):
        top = max(0.0 if m is None else m + errs[i], pub[i] or 0.0)
        tops.append(top)
        if m is not None:
            ax.annotate(
                f"{m:.2f}",
                (x[i], top),
                textcoords="offset points",
                xytext=(0, 6),
                fontsize="small",
                ha="center",
                va="bottom",
            )
    ax.set_xticks(x, names, rotation=20 if len(names) > 5 else 0)
    ax.set_xlabel("Policy")
    ax.set_ylabel("Unallocated GPUs (% of cluster capacity)")
    ax.set_ylim(0, max(max(tops) * 1.3, 1.0))
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(loc="upper right", fontsize="small")
    ax.set_title(
        "Unallocated GPUs at 100 % arrived load\n"
        f"{_title_suffix(summary['trace'], summary['seeds'])}",
        fontsize="medium",
    )
    _save(fig, path)


def plot_frag(
    results: Sequence[ExperimentLike],
    path: Path,
    *,
    trace: str,
    seeds: Sequence[int],
    policies: Sequence[str] | None = None,
) -> None:
    """Fragmentation % of GPU capacity versus arrived load %."""
    groups = group_by_policy(results, policies)
    fig = _new_figure(8.5, 4.8)
    ax = fig.subplots()
    _draw_curves(ax, groups, "frag_pct")
    ax.set_xlim(0, 130)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("Arrived GPU demand (% of cluster GPU capacity)")
    ax.set_ylabel("Fragmented GPU (% of cluster capacity)")
    fig.legend(
        *ax.get_legend_handles_labels(),
        title="policy (median)",
        loc="outside right upper",
        fontsize="small",
    )
    ax.set_title(
        f"GPU fragmentation vs arrived load — {_title_suffix(trace, seeds)}\n"
        f"median over seeds, band: {BAND}",
        fontsize="medium",
    )
    _save(fig, path)
