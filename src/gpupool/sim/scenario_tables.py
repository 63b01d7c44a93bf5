"""``report.md``: a scenario's summary as tables a person reads."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpupool.config.fields import fmt_s
from gpupool.sim.scenario_plots import SHARES_PLOT, USERS_PLOT, WAITS_PLOT

__all__ = ["render_measured", "render_provisioning", "render_report", "render_targets"]


def _pct(x: float | None, digits: int = 1) -> str:
    return "n/a" if x is None else f"{100 * x:.{digits}f} %"


def _dur(x: float | None) -> str:
    if x is None:
        return "n/a"
    if x < 90:
        return f"{x:.0f} s"
    if x < 5400:
        return f"{x / 60:.1f} min"
    return f"{x / 3600:.2f} h"


def _mmm(st: Mapping[str, Any], fmt: Callable[[Any], str]) -> str:
    if st.get("mean") is None:
        return "n/a"
    if st["min"] == st["max"]:
        return fmt(st["mean"])
    return f"{fmt(st['mean'])} ({fmt(st['min'])} – {fmt(st['max'])})"


def render_report(summary: Mapping[str, Any], plots: Sequence[str] = ()) -> str:
    s = summary
    a = s["aggregate"]
    seeds = s["seeds"]
    w = s["window"]
    lines = [f"# Scenario {s['scenario']}", ""]
    if s["description"]:
        lines += [s["description"], ""]
    lines += [
        f"`{s['file']}`: {s['cluster']['nodes']} nodes, {s['cluster']['gpus']} GPUs, "
        f"{len(s['queue_config'])} ClusterQueues; simulated {fmt_s(s['duration_s'])}"
        + (" (shortened with --duration)" if s["shortened"] else "")
        + f", seeds {', '.join(map(str, seeds))}; scheduling every "
        f"{fmt_s(s['scheduling_interval_s'])}, victims' grace period "
        f"{fmt_s(s['grace_period_s'])}; saturated window {fmt_s(w['start_s'])} – "
        f"{fmt_s(w['end_s'])}.",
        "",
        "Figures over seeds are the mean, with the range (min – max) when seeds differ.",
        "",
        "## Figures and goals",
        "",
        "The fairness goals (Jain index, gap to the entitled share) hold when every queue "
        "wants more than its share through the saturated window; the others always hold.",
        "",
        "| figure | value | goal |",
        "|---|---|---|",
        f"| Jain index of share / entitled share, saturated window | "
        f"{_mmm(a['jain_index'], lambda x: f'{x:.4f}')} | ≥ 0.99 |",
        f"| largest gap between a queue's share and its entitled share | "
        f"{a['max_abs_share_error_pts']:.2f} points | ≤ 2 points |",
        f"| GPU utilization, saturated window | {_mmm(a['utilization'], _pct)} | high |",
        f"| partial gang placements | {a['partial_gang_placements']} | 0 |",
        f"| most preemptions of one job | {a['max_preemptions_per_job']} | ≤ "
        f"{a['max_preemptions_allowed']} |",
        f"| preemptions that took guaranteed (not borrowed) quota | "
        f"{a['preemptions']['guaranteed_preempted']} | 0 |",
        f"| pairs of jobs that preempted each other | {a['preemptions']['mutual']} | 0 |",
        f"| wait estimate, median absolute error | "
        f"{_mmm(a['wait_estimate_median_abs_error_s'], _dur)} | small |",
        "",
    ]
    lines += render_measured(a)
    lines += render_targets(s)
    lines += [
        "## Queues",
        "",
        "Share: of the GPU-time allocated in the saturated window. Entitled: "
        f"{s['entitled_basis']}.",
        "",
        "| queue | weight | nominal GPUs | entitled share | share | gap (points) | "
        "wait p50 | wait p99 | preempted | at nominal after |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for q, info in s["queue_config"].items():
        row = a["queues"][q]
        lines.append(
            f"| {q} | {info['weight']:g} | {info['nominal_gpus']:g} | "
            f"{_pct(row['entitled_share'])} | {_mmm(row['share'], _pct)} | "
            f"{_mmm(row['share_error_pts'], lambda x: f'{x:+.2f}')} | "
            f"{_mmm(row['wait_p50_s'], _dur)} | {_mmm(row['wait_p99_s'], _dur)} | "
            f"{row['preempted']} | {_mmm(row['time_to_nominal_s'], _dur)} |"
        )
    lines += [
        "",
        '"At nominal after": from the queue\'s first submission to the first cycle '
        "after which it held its nominal GPU quota.",
        "",
    ]
    if SHARES_PLOT in plots:
        lines += [
            f"![GPU allocation by queue over time, and shares against entitlement]({SHARES_PLOT})",
            "",
        ]
    lines += ["## Users", "", "| user | GPU-hours | share of the window |", "|---|---|---|"]
    for u, row in a["users"].items():
        gh = row["gpu_seconds"]
        lines.append(
            f"| {u} | {_mmm(gh, lambda x: f'{x / 3600:,.1f}')} | "
            f"{_mmm(row['window_share'], _pct)} |"
        )
    if USERS_PLOT in plots:
        lines += ["", f"![GPU allocation by user over time]({USERS_PLOT})"]
    lines += ["", "## Preemptions", ""]
    by_reason = a["preemptions"]["by_reason"]
    if by_reason:
        lines += ["| reason | evictions (all seeds) |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in by_reason.items()]
    else:
        lines.append("No job was preempted.")
    lines.append("")
    first = s["runs"][str(seeds[0])] if seeds else None
    if first is not None:
        lines += [
            f"## Streams (seed {seeds[0]})",
            "",
            "| tenant/stream | jobs | started | stopped at run limit | wait p50 | "
            "wait p99 | wait max |",
            "|---|---|---|---|---|---|---|",
        ]
        for key, row in first["streams"].items():
            ws = row["wait_s"]
            lines.append(
                f"| {key} | {row['jobs']} | {row['started']} | "
                f"{row['stopped_at_run_limit']} | {_dur(ws['p50'])} | "
                f"{_dur(ws['p99'])} | {_dur(ws['max'])} |"
            )
        lines.append("")
        if first["gangs"]:
            lines += [
                f"## Gangs (seed {seeds[0]}, the largest)",
                "",
                "| job | tasks | GPUs | submitted | started | waited | GPU utilization "
                "while it waited | preempted |",
                "|---|---|---|---|---|---|---|---|",
            ]
            for g in first["gangs"][:10]:
                lines.append(
                    f"| {g['job']} | {g['tasks']} | {g['gpus']:g} | {_dur(g['submit_s'])} | "
                    f"{_dur(g['start_s'])} | {_dur(g['wait_s'])} | "
                    f"{_pct(g['utilization_while_waiting'])} | {g['preempted']} |"
                )
            lines.append("")
        j = first["jobs"]
        lines += [
            f"## Jobs (seed {seeds[0]})",
            "",
            f"{j['submitted']:,} submitted, {j['rejected']:,} rejected, "
            f"{j['started']:,} started, {j['completed']:,} completed "
            f"({j['stopped_at_run_limit']:,} stopped at their run limit), "
            f"{j['never_started']:,} never started; {first['cycles']:,} scheduling "
            f"cycles. Wait estimates: {first['wait_estimate']['asked']:,} jobs were still "
            "pending at the first estimate after they arrived (median "
            f"{_dur(first['wait_estimate']['median_estimate_delay_s'])} after), "
            f"{first['wait_estimate']['estimated_jobs']:,} got a start time; for the "
            f"{first['wait_estimate']['started']:,} of them that started, the median "
            "absolute error was "
            f"{_dur(first['wait_estimate']['median_abs_error_s'])} (p90 "
            f"{_dur(first['wait_estimate']['p90_abs_error_s'])}).",
            "",
        ]
    if WAITS_PLOT in plots:
        lines += [f"![Waits per queue]({WAITS_PLOT})", ""]
    if "provisioning" in a:
        lines += render_provisioning(s)
    return "\n".join(lines)


def render_targets(s: Mapping[str, Any]) -> list[str]:
    """The scenario's own targets (``spec.targets``), checked on every seed."""
    runs = s["runs"]
    if not runs or not next(iter(runs.values())).get("targets"):
        return []
    seeds = list(runs)
    lines = [
        "## Targets of this scenario",
        "",
        f"All met on every seed: **{'yes' if s['targets_met'] else 'no'}**.",
        "",
        "| target | goal | " + " | ".join(f"seed {k}" for k in seeds) + " |",
        "|---|---|" + "---|" * len(seeds),
    ]
    first = runs[seeds[0]]["targets"]
    for i, row in enumerate(first):
        cells = []
        for k in seeds:
            r = runs[k]["targets"][i]
            cells.append(f"{r['measured']} {'✓' if r['met'] else '✗'}")
        lines.append(f"| {row['target']} | {row['goal']} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def render_provisioning(s: Mapping[str, Any]) -> list[str]:
    """The report's section on queued provisioning: figures over seeds, then the first
    seed's gangs and requests."""
    a = s["aggregate"]["provisioning"]
    cloud = s["cluster"].get("cloud", {})
    pools = ", ".join(
        f"{n} ({p['gpus_per_node']} x {p['model']} a node, zones "
        f"{'/'.join(p['zones'])}, {p['max_nodes_per_zone']} nodes a zone)"
        for n, p in cloud.get("pools", {}).items()
    )
    lines = [
        "## Provisioning",
        "",
        f"Cloud {cloud.get('name', '')} ({cloud.get('region', '')}): regional quota "
        f"{cloud.get('gpu_quota', 0)} GPUs; pools {pools or 'none'}.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| time from submission to start, provisioned jobs, p50 | "
        f"{_mmm(a['submit_to_start_p50_s'], _dur)} |",
        f"| time from submission to start, provisioned jobs, mean | "
        f"{_mmm(a['submit_to_start_mean_s'], _dur)} |",
        f"| time from submission to start, provisioned jobs, max | "
        f"{_mmm(a['submit_to_start_max_s'], _dur)} |",
        f"| GPU-hours idle in bookings (Provisioned, before the first pod) | "
        f"{_mmm(a['idle_booking_gpu_hours'], lambda x: f'{x:,.2f}')} |",
        f"| of which in bookings no pod consumed (expired or cancelled) | "
        f"{_mmm(a['idle_booking_gpu_hours_unconsumed'], lambda x: f'{x:,.2f}')} |",
        f"| cloud GPU-hours provisioned | {_mmm(a['cloud_gpu_hours'], lambda x: f'{x:,.1f}')} |",
        f"| requests (all seeds) by outcome | "
        f"{', '.join(f'{k} {v}' for k, v in a['by_outcome'].items()) or 'none'} |",
        f"| requests whose nodes did not all join at once in one zone | "
        f"{a['partial_provisions']} (goal 0) |",
        f"| bookings expired | {a['expired_bookings']} |",
        f"| capacity revoked at maxRunDurationSeconds | {a['revoked_at_run_limit']} |",
        f"| provisioned jobs stopped at their run limit | {a['stopped_at_run_limit']} |",
        f"| provisioned jobs that never started | {a['never_started']} |",
        "",
    ]
    seeds = s["seeds"]
    first = s["runs"][str(seeds[0])]["provisioning"] if seeds else None
    if first is None:
        return lines
    lines += [
        f"### Provisioned jobs (seed {seeds[0]})",
        "",
        "| job | GPUs | submitted | provisioned | started | waited | requests | zone | "
        "stopped at run limit |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for g in first["gangs"]:
        lines.append(
            f"| {g['job']} | {g['gpus']:g} | {_dur(g['submit_s'])} | "
            f"{_dur(g['provisioned_s'])} | {_dur(g['start_s'])} | {_dur(g['wait_s'])} | "
            f"{g['requests']} ({g['failed_requests']} failed) | {g['zone'] or '–'} | "
            f"{'yes' if g['stopped_at_run_limit'] else 'no'} |"
        )
    lines += [
        "",
        f"### Requests (seed {seeds[0]})",
        "",
        "| request | pool/zone | nodes | made | provisioned | consumed | ended | outcome "
        "| GPU-hours idle booked |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for q in first["request_log"]:
        lines.append(
            f"| {q['request']} | {q['pool']}/{q['zone'] or '–'} | {q['nodes']} | "
            f"{_dur(q['created_s'])} | {_dur(q['provisioned_s'])} | {_dur(q['consumed_s'])} | "
            f"{_dur(q['ended_s'])} | {q['outcome']}"
            + (f" ({q['reason']})" if q["reason"] else "")
            + f" | {q['idle_booking_gpu_hours']:.2f} |"
        )
    lines.append("")
    return lines


def render_measured(a: Mapping[str, Any]) -> list[str]:
    """The measured-use figures of a scenario with ``spec.measuredUse``; nothing otherwise."""
    m = a.get("measured_use")
    if not m:
        return []

    def hours(x: float) -> str:
        return f"{x / 3600:,.1f} h"

    how = "measured use" if m["place_by"] == "measured" else "requests (measured only)"
    return [
        "## Measured use",
        "",
        f"Placed by {how}; every card sampled for what its jobs actually use before each cycle.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| hot-card time (card-time with actual compute demand above the card) | "
        f"{_mmm(m['hot_card_gpu_s'], hours)} |",
        f"| card-time with actual memory above the card | {_mmm(m['memory_over_card_s'], hours)} |",
        f"| GPU-time of compute actually delivered | {_mmm(m['busy_gpu_s'], hours)} |",
        "",
    ]
