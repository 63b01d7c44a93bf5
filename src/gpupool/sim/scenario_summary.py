"""The figures of one seed of a scenario (``summary.json``'s ``runs``); the definitions are in
``scenario_report.py``'s docstring and ``docs/scenarios.md``."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from gpupool.core.model import WHOLE_GPU_MILLI
from gpupool.sim.scenario_model import Scenario
from gpupool.sim.scenario_results import JobRun, RunResult

__all__ = [
    "capacity_gpu_s",
    "gangs",
    "jain",
    "provisioned_queues",
    "provisioning_summary",
    "rounded",
    "stats",
    "step_mean",
    "summarise_run",
    "wait_stats",
]


def rounded(x: float | None, digits: int = 4) -> float | None:
    """``x`` to ``digits`` places; None for None, inf and nan (JSON has neither)."""
    if x is None or not math.isfinite(x):
        return None
    return round(float(x), digits) + 0.0


def wait_stats(values: Iterable[float]) -> dict[str, float | None]:
    """p50, p99, max and count of waits."""
    arr = np.asarray(list(values), np.float64)
    if arr.size == 0:
        return {"p50": None, "p99": None, "max": None, "n": 0}
    return {
        "p50": rounded(float(np.percentile(arr, 50)), 1),
        "p99": rounded(float(np.percentile(arr, 99)), 1),
        "max": rounded(float(arr.max()), 1),
        "n": int(arr.size),
    }


def stats(values: Sequence[float | None], digits: int = 4) -> dict[str, float | None]:
    """Mean, min and max of the values given (None ones left out)."""
    vals = [v for v in values if v is not None]
    if not vals:
        return {"mean": None, "min": None, "max": None}
    return {
        "mean": rounded(sum(vals) / len(vals), digits),
        "min": rounded(min(vals), digits),
        "max": rounded(max(vals), digits),
    }


def jain(xs: Sequence[float]) -> float | None:
    """Jain's index: (sum x)^2 / (n sum x^2); None without values, 1.0 when all are 0."""
    if not xs:
        return None
    sq = sum(x * x for x in xs)
    if sq == 0:
        return 1.0
    return sum(xs) ** 2 / (len(xs) * sq)


def step_mean(t: npt.NDArray[np.float64], y: npt.NDArray[np.float64], a: float, b: float) -> float:
    """Mean over [a, b] of the step function that holds y[i] from t[i] to t[i+1]."""
    if b <= a or t.size == 0:
        return 0.0
    edges = np.clip(np.append(t, max(b, float(t[-1]))), a, b)
    widths = np.diff(edges)
    return float(np.sum(y * widths) / (b - a))


# -- one run --------------------------------------------------------------------------------


def gangs(result: RunResult, top: int = 20) -> list[JobRun]:
    """Jobs of several tasks, the largest first (at most ``top``)."""
    multi = [j for j in result.jobs.values() if j.job.task_count > 1 and not j.rejected]
    multi.sort(key=lambda j: (-j.gpu_milli, j.submit_s, j.job.id))
    return multi[:top]


def summarise_run(r: RunResult) -> dict[str, Any]:
    s = r.scenario
    w0, w1 = s.window
    jobs = list(r.jobs.values())
    queues = sorted(r.entitled_gpu)
    accepted = [j for j in jobs if not j.rejected]
    started = [j for j in accepted if j.start_s is not None]
    window_total = sum(j.window_gpu_s for j in jobs)
    q_window: dict[str, float] = defaultdict(float)
    q_total: dict[str, float] = defaultdict(float)
    for j in jobs:
        q_window[j.queue] += j.window_gpu_s
        q_total[j.queue] += j.gpu_s
    ent_sum = sum(r.entitled_gpu.values()) or 1.0
    nom_sum = sum(r.nominal_milli.values()) or 1
    active = {j.queue for j in accepted if j.submit_s < w1}
    evict_count: Counter[str] = Counter(e.job for e in r.evictions)
    by_queue_evictions: Counter[str] = Counter(e.queue for e in r.evictions)
    out_queues: dict[str, Any] = {}
    ratios = []
    for q in queues:
        share = q_window[q] / window_total if window_total > 0 else 0.0
        ent = r.entitled_gpu[q] / ent_sum
        qjobs = [j for j in accepted if j.queue == q]
        waits = [j.wait_s for j in qjobs if j.wait_s is not None]
        out_queues[q] = {
            "gpu_seconds": rounded(q_total[q], 1),
            "window_gpu_seconds": rounded(q_window[q], 1),
            "share": rounded(share),
            "entitled_share": rounded(ent),
            "nominal_share": rounded(r.nominal_milli[q] / nom_sum),
            "share_error_pts": rounded(100 * (share - ent), 2),
            "jobs": len(qjobs),
            "started": sum(1 for j in qjobs if j.start_s is not None),
            "never_started": sum(1 for j in qjobs if j.start_s is None),
            "wait_s": wait_stats(waits),
            "wait_with_unstarted_s": wait_stats(
                j.wait_s if j.wait_s is not None else s.duration_s - j.submit_s for j in qjobs
            ),
            "preempted": by_queue_evictions[q],
            "time_to_nominal_s": rounded(r.time_to_nominal_s.get(q), 1),
        }
        if q in active and ent > 0:
            ratios.append(share / ent)
    users: dict[str, dict[str, Any]] = {}
    by_user: dict[str, list[JobRun]] = defaultdict(list)
    for j in accepted:
        by_user[j.job.user].append(j)
    for u in sorted(by_user):
        ujobs = by_user[u]
        win = sum(j.window_gpu_s for j in ujobs)
        users[u] = {
            "queues": sorted({j.queue for j in ujobs}),
            "gpu_seconds": rounded(sum(j.gpu_s for j in ujobs), 1),
            "window_gpu_seconds": rounded(win, 1),
            "window_share": rounded(win / window_total if window_total > 0 else 0.0),
            "jobs": len(ujobs),
            "wait_s": wait_stats(j.wait_s for j in ujobs if j.wait_s is not None),
        }
    streams: dict[str, dict[str, Any]] = {}
    by_stream: dict[str, list[JobRun]] = defaultdict(list)
    for j in accepted:
        by_stream[f"{j.tenant}/{j.stream}"].append(j)
    for key in sorted(by_stream):
        sj = by_stream[key]
        streams[key] = {
            "jobs": len(sj),
            "started": sum(1 for j in sj if j.start_s is not None),
            "stopped_at_run_limit": sum(1 for j in sj if j.stopped_at_limit),
            "gpu_seconds": rounded(sum(j.gpu_s for j in sj), 1),
            "wait_s": wait_stats(j.wait_s for j in sj if j.wait_s is not None),
        }
    t, used = r.series.arrays()
    total_used = used.sum(axis=1) if used.size else np.zeros(0)
    gang_rows = []
    for g in gangs(r):
        until = g.start_s if g.start_s is not None else s.duration_s
        cap = capacity_gpu_s(r, g.submit_s, until) * WHOLE_GPU_MILLI
        util = (
            step_mean(t, total_used, g.submit_s, until) * (until - g.submit_s) / cap
            if cap and until > g.submit_s
            else None
        )
        gang_rows.append(
            {
                "job": g.job.id,
                "tasks": g.job.task_count,
                "gpus": rounded(g.gpu_milli / 1000, 3),
                "submit_s": rounded(g.submit_s, 1),
                "start_s": rounded(g.start_s, 1),
                "wait_s": rounded(g.wait_s, 1),
                "utilization_while_waiting": rounded(util),
                "preempted": g.evictions,
            }
        )
    reasons = Counter(e.reason for e in r.evictions)
    pairs = {(e.preemptor, e.job) for e in r.evictions}
    mutual = sum(1 for a, b in pairs if a < b and (b, a) in pairs)
    guaranteed = sum(
        1
        for e in r.evictions
        if e.reason != "within-queue"
        and e.queue_used_before_milli - e.gpu_milli < e.queue_nominal_milli
    )
    judged = [
        j for j in accepted if j.estimated and j.estimate_s is not None and j.start_s is not None
    ]
    errors = [abs(j.estimate_s - j.start_s) for j in judged]  # type: ignore[operator]
    # Relative to the job's actual wait, submission to start (a wait under 1 s counts 1 s).
    rel = [
        abs(j.estimate_s - j.start_s)  # type: ignore[operator]
        / max(1.0, j.start_s - j.submit_s)  # type: ignore[operator]
        for j in judged
    ]
    estimated = [j for j in accepted if j.estimated]
    asked = [j for j in accepted if j.estimate_at_s is not None]
    delays = [j.estimate_at_s - j.submit_s for j in estimated if j.estimate_at_s is not None]
    return {
        "seed": r.seed,
        "jobs": {
            "submitted": len(jobs),
            "rejected": len(jobs) - len(accepted),
            "started": len(started),
            "completed": sum(1 for j in accepted if j.end_s is not None),
            "stopped_at_run_limit": sum(1 for j in accepted if j.stopped_at_limit),
            "never_started": len(accepted) - len(started),
        },
        "cycles": r.cycles,
        "gpu_seconds": rounded(sum(j.gpu_s for j in jobs), 1),
        "window_gpu_seconds": rounded(window_total, 1),
        "utilization": rounded(window_total / capacity_gpu_s(r, w0, w1))
        if capacity_gpu_s(r, w0, w1) > 0
        else None,
        "jain_index": rounded(jain(ratios)),
        "jain_queues": sorted(q for q in queues if q in active and r.entitled_gpu[q] > 0),
        "partial_gang_placements": r.partial_gang_placements,
        "max_preemptions_per_job": max(evict_count.values(), default=0),
        "max_preemptions_allowed": r.max_preemptions_allowed,
        "preemptions": {
            "count": len(r.evictions),
            "by_reason": dict(sorted(reasons.items())),
            "jobs_preempted": len(evict_count),
            "guaranteed_preempted": guaranteed,
            "mutual": mutual,
        },
        "wait_s": wait_stats(j.wait_s for j in accepted if j.wait_s is not None),
        "wait_estimate": {
            "asked": len(asked),
            "estimated_jobs": len(estimated),
            "median_estimate_delay_s": rounded(float(np.median(delays)), 1) if delays else None,
            "started": len(errors),
            "median_abs_error_s": rounded(float(np.median(errors)), 1) if errors else None,
            "p90_abs_error_s": rounded(float(np.percentile(errors, 90)), 1) if errors else None,
            "median_rel_error": rounded(float(np.median(rel))) if rel else None,
        },
        "queues": out_queues,
        "users": users,
        "streams": streams,
        "gangs": gang_rows,
        "wall_s": rounded(r.wall_s, 3),
        **({"provisioning": provisioning_summary(r)} if r.cloud is not None else {}),
        **({"measured_use": dict(r.measured)} if r.measured is not None else {}),
    }


def capacity_gpu_s(r: RunResult, a: float, b: float) -> float:
    """GPU-seconds of capacity within [a, b]: the fixed cluster's, plus the cloud's nodes."""
    fixed = r.scenario.gpus * max(0.0, b - a)
    return fixed + (r.cloud.gpu_seconds(a, b) if r.cloud is not None else 0.0)


def provisioned_queues(scenario: Scenario) -> set[str]:
    return {q.name for q in scenario.config.cluster_queues if q.admission_checks}


def provisioning_summary(r: RunResult) -> dict[str, Any]:
    """Requests, bookings and the jobs that waited for them (see the module docstring)."""
    cloud = r.cloud
    assert cloud is not None
    s = r.scenario
    reqs = list(cloud.requests.values())
    outcomes = Counter(q.outcome for q in reqs)
    partial = 0
    for q in reqs:
        if q.node_names and (
            len(q.node_names) != q.nodes
            or len(set(q.nodes_added_s)) != 1
            or any(f"-{q.zone}-" not in n for n in q.node_names)
        ):
            partial += 1
    checked = provisioned_queues(s)
    by_job: dict[str, list[Any]] = defaultdict(list)
    for q in reqs:
        if q.job:
            by_job[q.job].append(q)
    rows: list[dict[str, Any]] = []
    waits: list[float] = []
    for j in sorted(
        (j for j in r.jobs.values() if j.queue in checked and not j.rejected),
        key=lambda j: (j.submit_s, j.job.id),
    ):
        if j.wait_s is not None:
            waits.append(j.wait_s)
        mine = by_job.get(j.job.id, [])
        first = next((q for q in mine if q.provisioned_s is not None), None)
        rows.append(
            {
                "job": j.job.id,
                "tasks": j.job.task_count,
                "gpus": rounded(j.gpu_milli / 1000, 3),
                "submit_s": rounded(j.submit_s, 1),
                "start_s": rounded(j.start_s, 1),
                "wait_s": rounded(j.wait_s, 1),
                "requests": len(mine),
                "failed_requests": sum(1 for q in mine if q.outcome == "failed"),
                "zone": first.zone if first else None,
                "provisioned_s": rounded(first.provisioned_s, 1) if first else None,
                "stopped_at_run_limit": j.stopped_at_limit,
                "revoked": j.revoked,
            }
        )
    idle = sum(q.idle_booking_gpu_s for q in reqs)
    return {
        "requests": len(reqs),
        "by_outcome": dict(sorted(outcomes.items())),
        "provisioned": sum(1 for q in reqs if q.provisioned_s is not None),
        "partial_provisions": partial,
        "expired_bookings": outcomes.get("expired", 0),
        "revoked_at_run_limit": outcomes.get("revoked", 0),
        "failed": outcomes.get("failed", 0),
        "nodes_made": cloud.nodes_made,
        "cloud_gpu_hours": rounded(cloud.gpu_seconds(0.0, s.duration_s) / 3600, 2),
        "peak_cloud_gpus": max(cloud.capacity_gpus, default=0),
        "idle_booking_gpu_hours": rounded(idle / 3600, 3),
        "idle_booking_gpu_hours_consumed": rounded(
            sum(q.idle_booking_gpu_s for q in reqs if q.consumed_s is not None) / 3600, 3
        ),
        "idle_booking_gpu_hours_unconsumed": rounded(
            sum(q.idle_booking_gpu_s for q in reqs if q.consumed_s is None) / 3600, 3
        ),
        "jobs": len(rows),
        "started": len(waits),
        "never_started": len(rows) - len(waits),
        "stopped_at_run_limit": sum(1 for row in rows if row["stopped_at_run_limit"]),
        "submit_to_start_s": {
            **wait_stats(waits),
            "mean": rounded(sum(waits) / len(waits), 1) if waits else None,
        },
        "gangs": rows,
        "request_log": [
            {
                "request": q.key,
                "job": q.job,
                "pool": q.pool,
                "zone": q.zone,
                "nodes": q.nodes,
                "gpus": q.gpus,
                "created_s": rounded(q.created_s, 1),
                "provisioned_s": rounded(q.provisioned_s, 1),
                "consumed_s": rounded(q.consumed_s, 1),
                "ended_s": rounded(q.ended_s, 1),
                "outcome": q.outcome,
                "reason": q.reason,
                "idle_booking_gpu_hours": rounded(q.idle_booking_gpu_s / 3600, 3),
            }
            for q in reqs
        ],
        "stockouts": {
            k: [[rounded(a, 1), rounded(b, 1)] for a, b in v]
            for k, v in cloud.stockouts.items()
            if v
        },
    }
