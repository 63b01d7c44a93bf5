"""What a time-based replay writes: ``summary.json``, ``report.md`` and, unless asked not to,
``utilisation.png`` (the plot is drawn by :mod:`.replay_plot`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpupool.sim.engine import SimResult
from gpupool.sim.replay_plot import plot_utilisation
from gpupool.sim.replay_reasons import wait_reasons

SUMMARY_FILE = "summary.json"
REPORT_FILE = "report.md"
PLOT_FILE = "utilisation.png"


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
