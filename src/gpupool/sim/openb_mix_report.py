"""Outputs of ``gpupool sim openb-mix``: the family's ``summary.json``, ``report.md``, a plot.

One record is one experiment of the family: (mix, policy, seed) with its unallocated GPU %
at 100 % and 130 % arrived load (openb's metric, see :mod:`gpupool.sim.openb`) and timings.
Per mix and policy the figures are the mean and sample sd over seeds (:func:`point_stat`);
each policy other than the baseline is compared with it:

- ``relative_pct`` = 100 * (policy - baseline) / baseline at 100 % arrived load (negative:
  fewer GPUs left unallocated than the baseline);
- the issue's target per mix (``meets_target``): below the baseline, and by at least
  :data:`TARGET_RELATIVE_PCT` % relative where the baseline leaves at least
  :data:`TARGET_FLOOR_PCT` % unallocated;
- ``verdict``: per policy, how many mixes meet the target, and the worst mix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpupool.sim.report import _new_figure, _save, dumps_summary, point_stat, policy_color

SUMMARY_FILE = "summary.json"
REPORT_FILE = "report.md"
PLOT_FILE = "family_unallocated_at_100.png"
TARGET_RELATIVE_PCT = 5.0
"""Relative lead over the baseline required where the baseline leaves enough unallocated."""
TARGET_FLOOR_PCT = 3.0
"""Baseline unallocated % from which the relative lead is required."""


@dataclass(frozen=True, slots=True)
class Record:
    """One experiment of the family, as kept in ``experiments.jsonl`` and summarised."""

    mix: str
    axis: str
    value: float
    policy: str
    seed: int
    tune: float
    mix_seed: int
    inputs: str
    unallocated_100: float | None
    unallocated_130: float | None
    wall_s: float
    decisions: int
    placed: int
    failed: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _stat(records: Sequence[Record], field: str) -> dict[str, Any]:
    values = [np.nan if getattr(r, field) is None else getattr(r, field) for r in records]
    return point_stat(values)


def compare(policy: float | None, baseline: float | None) -> dict[str, Any]:
    """The policy's difference from the baseline and whether it meets the target."""
    if policy is None or baseline is None:
        return {"diff": None, "relative_pct": None, "wins": None, "meets_target": None}
    rel = 100.0 * (policy - baseline) / baseline if baseline else 0.0
    meets = policy < baseline and (baseline < TARGET_FLOOR_PCT or -rel >= TARGET_RELATIVE_PCT)
    return {
        "diff": round(policy - baseline, 4),
        "relative_pct": round(rel, 2),
        "wins": policy < baseline,
        "meets_target": meets,
    }


def summarize_family(
    records: Sequence[Record],
    mixes: Sequence[Mapping[str, Any]],
    *,
    policies: Sequence[str],
    baseline: str,
    seeds: Sequence[int],
    extra: Mapping[str, Any],
) -> dict[str, Any]:
    """The family's summary; ``mixes`` gives each mix's name, axis, value and composition."""
    out_mixes = []
    for mix in mixes:
        entry: dict[str, Any] = dict(mix)
        pols: dict[str, Any] = {}
        for policy in policies:
            rs = sorted(
                (r for r in records if r.mix == mix["name"] and r.policy == policy),
                key=lambda r: r.seed,
            )
            pols[policy] = {
                "unallocated_gpu_pct": {
                    "100": _stat(rs, "unallocated_100"),
                    "130": _stat(rs, "unallocated_130"),
                },
                "wall_s": round(float(np.mean([r.wall_s for r in rs])), 3) if rs else None,
                "wall_s_max": round(max(r.wall_s for r in rs), 3) if rs else None,
                "per_seed": {
                    "seed": [r.seed for r in rs],
                    "unallocated_gpu_pct_100": [r.unallocated_100 for r in rs],
                },
            }
        entry["policies"] = pols
        base = pols[baseline]["unallocated_gpu_pct"]["100"]["mean"]
        entry["versus_" + baseline] = {
            p: compare(pols[p]["unallocated_gpu_pct"]["100"]["mean"], base)
            for p in policies
            if p != baseline
        }
        out_mixes.append(entry)
    verdict: dict[str, Any] = {}
    for p in policies:
        if p == baseline:
            continue
        cmp = [(m["name"], m["versus_" + baseline][p]) for m in out_mixes]
        scored = [(n, c) for n, c in cmp if c["relative_pct"] is not None]
        worst = max(scored, key=lambda nc: nc[1]["relative_pct"]) if scored else None
        verdict[p] = {
            "mixes": len(cmp),
            "wins": sum(1 for _, c in cmp if c["wins"]),
            "meets_target": sum(1 for _, c in cmp if c["meets_target"]),
            "all_meet_target": bool(cmp) and all(c["meets_target"] for _, c in cmp),
            "worst_mix": worst[0] if worst else None,
            "worst_relative_pct": worst[1]["relative_pct"] if worst else None,
        }
    return {
        **extra,
        "seeds": list(seeds),
        "policies": list(policies),
        "baseline": baseline,
        "target": {
            "relative_pct": TARGET_RELATIVE_PCT,
            "where_baseline_pct_at_least": TARGET_FLOOR_PCT,
        },
        "mixes": out_mixes,
        "verdict": verdict,
    }


def _cell(stat: Mapping[str, Any]) -> str:
    if stat.get("mean") is None:
        return "n/a"
    return f"{stat['mean']:.2f} ({stat['sd']:.2f})"


AS_MIXED = {
    "gpushare": "gpushare_pct",
    "cpu": "cpu_pct",
    "multigpu": "multigpu_pct",
    "gpuspec": "gpuspec_pct",
}


def _as_mixed(composition: Mapping[str, Any], axis: str) -> str:
    value = composition.get(AS_MIXED.get(axis, ""))
    return "n/a" if value is None else f"{value:.1f} %"


def render_family_report(summary: Mapping[str, Any], plots: Sequence[str] = ()) -> str:
    policies: list[str] = summary["policies"]
    baseline: str = summary["baseline"]
    others = [p for p in policies if p != baseline]
    seeds = summary["seeds"]
    seed_text = (
        f"{seeds[0]}-{seeds[-1]}"
        if seeds == list(range(seeds[0], seeds[-1] + 1))
        else ", ".join(map(str, seeds))
    )
    lines = [
        f"# openb mixes derived from `{summary.get('base', '?')}`",
        "",
        f"Unallocated GPU % at 100 % arrived load, mean (sd) over seeds {seed_text} "
        f"({len(seeds)} seeds), tune {summary.get('tune')}, mix seed {summary.get('mix_seed')}. "
        f"Target: below {baseline} on every mix, by at least {TARGET_RELATIVE_PCT:g} % "
        f"relative where {baseline} leaves at least {TARGET_FLOOR_PCT:g} % unallocated. "
        '"as mixed" is the mix\'s own value on its axis.',
        "",
    ]
    for axis in dict.fromkeys(m["axis"] for m in summary["mixes"]):
        rows = [m for m in summary["mixes"] if m["axis"] == axis]
        lines += [f"## {axis}: {rows[0].get('unit', '')}", ""]
        head = (
            "| mix | as mixed | pods | CPU-only | sharing | whole-GPU | "
            + " | ".join(policies)
            + " | "
            + " | ".join(f"{p} vs {baseline}" for p in others)
            + " |"
        )
        lines += [head, "|" + "---|" * (6 + len(policies) + len(others))]
        for m in rows:
            c = m["composition"]
            cells = [_cell(m["policies"][p]["unallocated_gpu_pct"]["100"]) for p in policies]
            vs = []
            for p in others:
                cmp = m["versus_" + baseline][p]
                rel = cmp["relative_pct"]
                mark = "" if cmp["meets_target"] else " ✗"
                vs.append("n/a" if rel is None else f"{rel:+.1f} %{mark}")
            lines.append(
                f"| {m['name']} | {_as_mixed(c, axis)} | {c['pods']} | "
                f"{c['cpu_only']} | {c['sharing']} | "
                f"{c['one_gpu'] + c['multi_gpu']} | "
                + " | ".join(cells)
                + " | "
                + " | ".join(vs)
                + " |"
            )
        lines.append("")
    lines += ["## Verdict", ""]
    for p, v in summary["verdict"].items():
        lines.append(
            f"- `{p}`: below {baseline} on {v['wins']} of {v['mixes']} mixes, meets "
            f"the target on {v['meets_target']}; worst: {v['worst_mix']} "
            f"({v['worst_relative_pct']:+.1f} %)"
            if v["worst_mix"]
            else f"- `{p}`: no data"
        )
    if plots:
        lines += ["", "## Plot", ""] + [f"![{name}]({name})" for name in plots]
    walls = [
        (m["name"], p, m["policies"][p]["wall_s_max"])
        for m in summary["mixes"]
        for p in policies
        if m["policies"][p]["wall_s_max"] is not None
    ]
    if walls:
        name, p, w = max(walls, key=lambda x: x[2])
        lines += ["", f"Slowest experiment: {w:.1f} s of wall clock ({p}, {name})."]
    return "\n".join(lines) + "\n"


def plot_family(summary: Mapping[str, Any], path: Path) -> None:
    """One panel per axis: unallocated GPU % at 100 % arrived load (mean ± sd over seeds)
    against the axis value, one line per policy."""
    policies: list[str] = summary["policies"]
    axes_names = list(dict.fromkeys(m["axis"] for m in summary["mixes"]))
    fig = _new_figure(5.2 * max(1, len(axes_names)), 4.0)
    panels = fig.subplots(1, max(1, len(axes_names)), squeeze=False)[0]
    for ax, axis in zip(panels, axes_names, strict=False):
        rows = sorted((m for m in summary["mixes"] if m["axis"] == axis), key=lambda m: m["value"])
        x = np.asarray([m["value"] for m in rows], np.float64)
        for p in policies:
            st = [m["policies"][p]["unallocated_gpu_pct"]["100"] for m in rows]
            y = np.asarray([np.nan if s["mean"] is None else s["mean"] for s in st])
            e = np.asarray([0.0 if s["sd"] is None else s["sd"] for s in st])
            ax.errorbar(
                x, y, yerr=e, marker="o", ms=4, capsize=3, label=p, color=policy_color(p, policies)
            )
        base = summary.get("base_composition", {}).get(AS_MIXED[axis])
        if base is not None:
            ax.axvline(
                base * (10 if axis == "cpu" else 1),
                color="grey",
                ls="--",
                lw=0.8,
                label=f"{summary.get('base', 'base')} as given",
            )
        ax.set_xlabel(f"{axis} ({rows[0].get('unit', '')})", fontsize=8)
        ax.set_ylabel("unallocated GPUs at 100 % arrived load (%)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(
        f"openb mixes from {summary.get('base', '?')}: mean ± sd over "
        f"{len(summary['seeds'])} seeds",
        fontsize=10,
    )
    _save(fig, path)


def write_family_outputs(summary: Mapping[str, Any], out: Path, *, plots: bool = True) -> None:
    (out / SUMMARY_FILE).write_text(dumps_summary(summary), encoding="utf-8")
    names = []
    if plots:
        plot_family(summary, out / PLOT_FILE)
        names.append(PLOT_FILE)
    (out / REPORT_FILE).write_text(render_family_report(summary, names), encoding="utf-8")
