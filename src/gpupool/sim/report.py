"""Aggregating openb experiments: ``summary.json``, ``report.md``, ``curves.csv`` and PNG plots.

One experiment is one (trace, policy, seed); it yields two curves over the arrived-load bins
0..130 % (unallocated GPUs and fragmentation, both in % of cluster GPU capacity, NaN where the
bin has no data) and its timings. This module turns a set of them into the figures the ATC'23
paper reports, and the speed figures the design sets goals for:

- a point statistic (the figures at 100 % and 130 % arrived load, frag at 50/80/90 %) is the
  mean and the sample standard deviation (``ddof=1``; 0 for one seed) over the seeds that have
  data in that bin; seeds whose bin is NaN are left out and ``n`` says how many remain; with
  none, mean and sd are ``null``;
- a curve is the median over seeds in each bin with a band from the 25th to the 75th
  percentile (the paper's "50 % percentile band");
- ``wall_s`` is the mean wall time of one experiment, ``decisions`` the total number of
  placement decisions over all seeds of the policy, and the decision latency percentiles are
  taken over all those decisions pooled.

Everything except the timing fields (``wall_s*``, ``decision*_us``, ``decisions_per_s``) is a
function of the curves and counts alone, so the same inputs give the same files. Plots are
drawn on a bare ``matplotlib.figure.Figure`` with the Agg canvas: no pyplot state, no display.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gpupool.sim.report_plots import (
    BAND,
    _new_figure,
    _save,
    plot_bars,
    plot_frag,
    plot_unallocated,
    policy_color,
)
from gpupool.sim.report_stats import (
    BINS,
    ExperimentLike,
    _num,
    _percentile,
    _seed_text,
    curve_band,
    curve_matrix,
    group_by_policy,
    point_stat,
)

__all__ = [
    "BAND",
    "BINS",
    "CURVES_FILE",
    "FRAG_AT",
    "PLOT_BARS",
    "PLOT_FRAG",
    "PLOT_UNALLOCATED",
    "REPORT_FILE",
    "SUMMARY_FILE",
    "TOLERANCE",
    "UNALLOCATED_AT",
    "ExperimentLike",
    "_new_figure",
    "_save",
    "curve_band",
    "curve_matrix",
    "dumps_summary",
    "group_by_policy",
    "plot_bars",
    "plot_frag",
    "plot_unallocated",
    "point_stat",
    "policy_color",
    "render_report",
    "summarize",
    "write_curves",
    "write_outputs",
]

UNALLOCATED_AT = (100, 130)
FRAG_AT = (50, 80, 90)
TOLERANCE = 0.5
"""Points of unallocated-GPU % within which a figure counts as reproducing a published one."""
SUMMARY_FILE = "summary.json"
REPORT_FILE = "report.md"
CURVES_FILE = "curves.csv"
PLOT_UNALLOCATED = "unallocated_vs_load.png"
PLOT_BARS = "unallocated_at_100.png"
PLOT_FRAG = "frag_vs_load.png"

# ---------------------------------------------------------------------------------------------
# summary.json


def summarize(
    results: Sequence[ExperimentLike],
    *,
    trace: str | None = None,
    seeds: Sequence[int] | None = None,
    policies: Sequence[str] | None = None,
    published: Mapping[str, float] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``summary.json`` document for a set of experiments on one trace and cluster.

    ``published`` maps policy names to the paper's unallocated-GPU % at 100 % arrived load for
    this trace (pass it only for the trace the figures belong to). ``extra`` adds top-level
    fields (``tune``, ``pods``, ...) after the fixed ones.
    """
    if not results:
        raise ValueError("no experiment results to summarize")
    first = results[0]
    for r in results:
        if (r.nodes, r.gpus) != (first.nodes, first.gpus):
            raise ValueError(
                f"{r.policy} seed {r.seed} ran on {r.nodes} nodes / {r.gpus} GPUs, "
                f"{first.policy} seed {first.seed} on {first.nodes} / {first.gpus}"
            )
    groups = group_by_policy(results, policies)
    all_seeds = sorted({r.seed for r in results}) if seeds is None else list(seeds)
    summary: dict[str, Any] = {
        "trace": trace if trace is not None else first.trace,
        "nodes": int(first.nodes),
        "gpus": int(first.gpus),
        "seeds": [int(s) for s in all_seeds],
    }
    if extra:
        summary.update(extra)
    summary["policies"] = {
        name: _policy_summary(rs, published.get(name) if published else None)
        for name, rs in groups.items()
    }
    return summary


def _policy_summary(results: Sequence[ExperimentLike], published: float | None) -> dict[str, Any]:
    unalloc = curve_matrix(results, "unallocated_pct")
    frag = curve_matrix(results, "frag_pct")
    walls = np.array([r.wall_s for r in results], dtype=np.float64)
    decisions = int(sum(int(r.decisions) for r in results))
    lat = [np.asarray(r.decision_us, dtype=np.float64).ravel() for r in results]
    latency = np.concatenate(lat) if lat else np.zeros(0)
    total_wall = float(walls.sum())
    out: dict[str, Any] = {
        "unallocated_gpu_pct": {str(b): point_stat(unalloc[:, b]) for b in UNALLOCATED_AT},
        "frag_pct": {str(b): point_stat(frag[:, b]) for b in FRAG_AT},
        "wall_s": _num(float(walls.mean())),
        "decisions": decisions,
        "decision_us": {"p50": _percentile(latency, 50), "p99": _percentile(latency, 99)},
        "experiments": len(results),
        "wall_s_max": _num(float(walls.max())),
        "decisions_per_s": _num(decisions / total_wall) if total_wall > 0 else None,
        "placed": point_stat([r.placed for r in results]),
        "failed": point_stat([r.failed for r in results]),
        "per_seed": {
            "seed": [int(r.seed) for r in results],
            "unallocated_gpu_pct": {
                str(b): [_num(v) for v in unalloc[:, b]] for b in UNALLOCATED_AT
            },
            "frag_pct": {str(b): [_num(v) for v in frag[:, b]] for b in FRAG_AT},
            "wall_s": [_num(r.wall_s) for r in results],
            "placed": [int(r.placed) for r in results],
            "failed": [int(r.failed) for r in results],
        },
    }
    if published is not None:
        mean = out["unallocated_gpu_pct"]["100"]["mean"]
        diff = None if mean is None else _num(mean - published)
        out["published"] = {
            "unallocated_gpu_pct": {"100": published},
            "diff": diff,
            "within_tolerance": None if diff is None else abs(diff) <= TOLERANCE,
        }
    return out


def dumps_summary(summary: Mapping[str, Any]) -> str:
    """The summary as strict JSON (no NaN) with a final newline.

    Indented two spaces, except that a list or object holding only scalars stays on one line
    (``{"mean": 4.77, "sd": 0.2, "n": 10}``, the per-seed lists), which keeps the file short
    enough to read.
    """
    return _emit(summary, 0) + "\n"


def _is_scalar(v: object) -> bool:
    return not isinstance(v, Mapping | list | tuple)


def _emit(obj: object, level: int) -> str:
    pad, end = "  " * (level + 1), "  " * level
    if isinstance(obj, Mapping):
        if all(_is_scalar(v) for v in obj.values()):
            return json.dumps(obj, allow_nan=False)
        items = [f"{pad}{json.dumps(str(k))}: {_emit(v, level + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + end + "}"
    if isinstance(obj, list | tuple):
        if all(_is_scalar(v) for v in obj):
            return json.dumps(list(obj), allow_nan=False)
        return "[\n" + ",\n".join(pad + _emit(v, level + 1) for v in obj) + "\n" + end + "]"
    return json.dumps(obj, allow_nan=False)


# ---------------------------------------------------------------------------------------------
# report.md


def _fmt(x: float | None, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _fmt_stat(s: Mapping[str, Any], digits: int = 2) -> str:
    if s.get("mean") is None:
        return "n/a"
    text = f"{s['mean']:.{digits}f} ± {s['sd']:.{digits}f}"
    return text


def render_report(summary: Mapping[str, Any], plots: Sequence[str] = ()) -> str:
    """``report.md``: the published figures beside ours, fragmentation, speed, and the plots."""
    pol: Mapping[str, Any] = summary["policies"]
    lines: list[str] = []
    add = lines.append
    add(f"# openb `{summary['trace']}`: placement policies compared")
    add("")
    add(f"- Cluster: {summary['nodes']} nodes, {summary['gpus']} GPUs")
    if "pods" in summary:
        add(
            f"- Trace: {summary['pods']} pods in the file"
            + (f", tuned to {summary['tune']}× cluster GPU capacity" if "tune" in summary else "")
        )
    add(f"- Seeds: {_seed_text(summary['seeds'])}")
    add(
        "- Unallocated GPUs and fragmentation are % of the cluster's GPU capacity, read at an "
        "arrived GPU demand of the given % of that capacity (failed pods count as arrived). "
        "Cells are mean ± sample sd over seeds."
    )
    add("")

    add("## Unallocated GPUs (%)")
    add("")
    has_pub = any("published" in p for p in pol.values())
    if has_pub:
        add(
            f"Published: the ATC'23 FGD paper's simulator, mean of seeds 42–51 at 100 % "
            f"arrived load. ✓ marks a mean within ±{TOLERANCE} points of it."
        )
        add("")
        add("| policy | published @100 % | ours @100 % | difference | within ±0.5 | ours @130 % |")
        add("|---|---:|---:|---:|:---:|---:|")
    else:
        add("No published figures for this trace.")
        add("")
        add("| policy | ours @100 % | ours @130 % |")
        add("|---|---:|---:|")
    for name, p in pol.items():
        u100 = _fmt_stat(p["unallocated_gpu_pct"]["100"])
        u130 = _fmt_stat(p["unallocated_gpu_pct"]["130"])
        if has_pub:
            pub = p.get("published")
            if pub is None:
                add(f"| {name} | – | {u100} | – | – | {u130} |")
            else:
                ok = pub["within_tolerance"]
                mark = "n/a" if ok is None else ("✓" if ok else "✗")
                diff = "n/a" if pub["diff"] is None else f"{pub['diff']:+.2f}"
                add(
                    f"| {name} | {pub['unallocated_gpu_pct']['100']:.2f} | {u100} | {diff} "
                    f"| {mark} | {u130} |"
                )
        else:
            add(f"| {name} | {u100} | {u130} |")
    add("")
    versus = _versus_fgd(pol)
    if versus:
        add(versus)
        add("")

    add("## Fragmentation (% of GPU capacity)")
    add("")
    add("Fragment of the idle GPUs with respect to the trace's typical pods (the FGD measure).")
    add("")
    add("| policy | " + " | ".join(f"@{b} %" for b in FRAG_AT) + " |")
    add("|---|" + "---:|" * len(FRAG_AT))
    for name, p in pol.items():
        add(f"| {name} | " + " | ".join(_fmt_stat(p["frag_pct"][str(b)]) for b in FRAG_AT) + " |")
    add("")

    add("## Speed")
    add("")
    add(
        "Wall time is per experiment (one policy, one seed, the whole trace). Decision latency "
        "percentiles pool every placement decision of the policy's experiments."
    )
    add("")
    add(
        "| policy | wall s (mean) | wall s (max) | decisions (total) | decisions/s "
        "| p50 µs | p99 µs | placed (mean) | failed (mean) |"
    )
    add("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, p in pol.items():
        lat = p["decision_us"]
        rate = p.get("decisions_per_s")
        add(
            f"| {name} | {_fmt(p['wall_s'])} | {_fmt(p.get('wall_s_max'))} | {p['decisions']} "
            f"| {_fmt(rate, 0)} | {_fmt(lat['p50'], 1)} | {_fmt(lat['p99'], 1)} "
            f"| {_fmt(p['placed']['mean'], 1)} | {_fmt(p['failed']['mean'], 1)} |"
        )
    add("")

    if plots:
        add("## Plots")
        add("")
        add(f"Curves are the median over seeds; the shaded band is the {BAND}.")
        add("")
        for name in plots:
            add(f"![{Path(name).stem.replace('_', ' ')}]({name})")
            add("")
    return "\n".join(lines).rstrip("\n") + "\n"


def _versus_fgd(pol: Mapping[str, Any]) -> str:
    if "gpupool" not in pol or "fgd" not in pol:
        return ""
    ours = pol["gpupool"]["unallocated_gpu_pct"]["100"]["mean"]
    fgd = pol["fgd"]["unallocated_gpu_pct"]["100"]["mean"]
    if ours is None or fgd is None:
        return ""
    diff = ours - fgd
    verdict = "below" if diff < 0 else "not below"
    return f"gpupool − fgd at 100 %: {diff:+.2f} points (gpupool is {verdict} FGD on this trace)."


# ---------------------------------------------------------------------------------------------
# curves.csv


def write_curves(
    results: Sequence[ExperimentLike], path: Path, policies: Sequence[str] | None = None
) -> None:
    """Every experiment's curves, one row per (policy, seed, bin); empty cell for no data."""
    groups = group_by_policy(results, policies)
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["policy", "seed", "arrived_load_pct", "unallocated_gpu_pct", "frag_pct"])
        for name, rs in groups.items():
            for r in rs:
                u = np.asarray(r.unallocated_pct, dtype=np.float64)
                f = np.asarray(r.frag_pct, dtype=np.float64)
                for b in range(BINS):
                    w.writerow([name, r.seed, b, _cell(u[b]), _cell(f[b])])


def _cell(x: float) -> str:
    v = _num(x)
    return "" if v is None else repr(v)


# ---------------------------------------------------------------------------------------------
# Everything at once


def write_outputs(
    results: Sequence[ExperimentLike],
    out_dir: Path,
    *,
    trace: str | None = None,
    seeds: Sequence[int] | None = None,
    policies: Sequence[str] | None = None,
    published: Mapping[str, float] | None = None,
    extra: Mapping[str, Any] | None = None,
    plots: bool = True,
) -> dict[str, Any]:
    """Write summary.json, curves.csv, the plots and report.md into ``out_dir``.

    Returns the summary. ``out_dir`` must exist.
    """
    summary = summarize(
        results, trace=trace, seeds=seeds, policies=policies, published=published, extra=extra
    )
    trace_name: str = summary["trace"]
    seed_list: list[int] = summary["seeds"]
    (out_dir / SUMMARY_FILE).write_text(dumps_summary(summary), encoding="utf-8")
    write_curves(results, out_dir / CURVES_FILE, policies)
    names: list[str] = []
    if plots:
        plot_unallocated(
            results,
            out_dir / PLOT_UNALLOCATED,
            trace=trace_name,
            seeds=seed_list,
            policies=policies,
        )
        plot_bars(summary, out_dir / PLOT_BARS)
        plot_frag(
            results, out_dir / PLOT_FRAG, trace=trace_name, seeds=seed_list, policies=policies
        )
        names = [PLOT_UNALLOCATED, PLOT_BARS, PLOT_FRAG]
    (out_dir / REPORT_FILE).write_text(render_report(summary, names), encoding="utf-8")
    return summary
